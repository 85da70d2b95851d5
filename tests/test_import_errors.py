"""Failure modes of `import prometheus` against real sockets on 127.0.0.1: a closed port, a tiny HTTP
server answering 500 / 404 / 401 / malformed JSON / too slowly, and TLS. Each ends in one clear
`gpuaudit: error:` line after bounded retries, and nothing is written."""

from __future__ import annotations

import base64
import hashlib
import json
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import IMPORT_START as START
from tests.helpers import require_binary, run_cli, serving
from tests.prom_helpers import free_port

from gpuaudit.errors import GpuauditError
from gpuaudit.importer.promclient import transport
from gpuaudit.importer.prometheus import import_prometheus
from gpuaudit.importer.prometheus.mapping import build_mapping

END = START + timedelta(hours=2)
GOOD_TOKEN = "tok-123"


def _matrix(query: str, start: float, end: float, step: float) -> dict[str, Any]:
    """A valid answer: one GPU at 50 % SM activity (only for the SM_ACTIVE query)."""
    result = []
    if "DCGM_FI_PROF_SM_ACTIVE" in query:
        ts = [start + i * step for i in range(int((end - start) // step) + 1)]
        result.append({"metric": {"Hostname": "h1", "UUID": "GPU-1", "gpu": "0", "modelName": "X"},
                       "values": [[t, "0.5"] for t in ts]})
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


class FakeProm(ThreadingHTTPServer):
    """A real HTTP server whose behaviour a test sets: mode and, for `fail_after`, how many good answers."""

    daemon_threads = True
    mode = "ok"
    good_answers = 0
    auth: str | None = None  # "bearer" or "basic": demand that credential
    requests = 0
    auth_headers: list[str | None]
    release: threading.Event


class Handler(BaseHTTPRequestHandler):
    server: FakeProm
    disable_nagle_algorithm = True  # as Prometheus (Go) sends: no delayed-ACK wait between headers and body

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        from urllib.parse import parse_qs, urlparse

        srv = self.server
        srv.requests += 1
        header = self.headers.get("Authorization")
        srv.auth_headers.append(header)
        q = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
        mode = srv.mode
        if mode == "fail_after":
            mode = "ok" if srv.good_answers > 0 else "500"
            srv.good_answers -= 1
        if srv.auth == "bearer" and header != f"Bearer {GOOD_TOKEN}":
            mode = "401"
        if srv.auth == "basic" and header != "Basic " + base64.b64encode(b"alice:pw").decode():
            mode = "401"
        if mode == "slow":  # answers only once the test is over: slower than any client timeout
            srv.release.wait(60)
            mode = "ok"
        if mode == "ok":
            self._send(200, json.dumps(_matrix(q["query"], float(q["start"]), float(q["end"]),
                                               float(q["step"]))).encode())
        elif mode == "500":
            self._send(500, b'{"status":"error","errorType":"internal","error":"boom"}')
        elif mode == "404":
            self._send(404, b"404 page not found")
        elif mode == "401":
            self._send(401, b"Unauthorized")
        elif mode == "html":
            self._send(200, b"<html>login page</html>", "text/html")
        elif mode == "nodata":
            self._send(200, b'{"status":"success"}')
        elif mode == "badvalues":
            body = {"status": "success", "data": {"resultType": "matrix", "result": [
                {"metric": {"UUID": "GPU-1"}, "values": [[1, "abc"]]}]}}
            self._send(200, json.dumps(body).encode())

    def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def fake() -> Iterator[FakeProm]:
    srv = FakeProm(("127.0.0.1", 0), Handler)
    srv.auth_headers = []
    srv.release = threading.Event()
    with serving(srv):
        yield srv
        srv.release.set()


def _url(srv: FakeProm, scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{srv.server_address[1]}"


def _import(root: Path, url: str, **kw: Any) -> Any:
    t = transport(url, timeout_s=kw.pop("timeout_s", 5), retries=kw.pop("retries", 2), backoff_s=0.01, **kw)
    return import_prometheus(root, t, build_mapping(), START, END, 60)


def _snapshot(root: Path) -> dict[str, str]:
    """Every data file under root with its content hash (the staging directory excluded)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.parquet")) if ".staging" not in p.parts}


def test_good_answer_imports(fake: FakeProm, tmp_path: Path) -> None:
    r = _import(tmp_path / "d", _url(fake))
    assert r.sample_rows == 120  # two hours at 60 s
    assert _snapshot(tmp_path / "d")


def test_server_down_is_a_clear_error_after_bounded_retries(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(GpuauditError, match=r"cannot reach Prometheus at .*after 2 retries.*refused"):
        _import(tmp_path / "d", url)
    assert time.monotonic() - t0 < 10
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(("mode", "match", "requests"), [
    ("500", r"HTTP 500 \(server error after 2 retries\): boom", 3),  # retried: 1 + 2
    ("404", r"HTTP 404 \(not found: give the server's base URL", 1),  # a 4xx is not retried
    ("401", r"HTTP 401 \(unauthorized: check --bearer-token-file", 1),
    ("html", r"malformed response .*not JSON", 1),
    ("nodata", r"malformed response .*no data.result", 1),
    ("badvalues", r"malformed response .*bad sample", 2),  # the importer's listing of metric names, then this
])
def test_http_failures_are_one_clear_error(fake: FakeProm, tmp_path: Path, mode: str, match: str,
                                           requests: int) -> None:
    fake.mode = mode
    with pytest.raises(GpuauditError, match=match):
        _import(tmp_path / "d", _url(fake))
    assert fake.requests == requests
    assert _snapshot(tmp_path / "d") == {} if (tmp_path / "d").exists() else True


def test_timeout_is_a_clear_error(fake: FakeProm, tmp_path: Path) -> None:
    fake.mode = "slow"
    t0 = time.monotonic()
    with pytest.raises(GpuauditError, match=r"did not answer within 0.3s \(after 1 retries\)"):
        _import(tmp_path / "d", _url(fake), timeout_s=0.3, retries=1)
    assert time.monotonic() - t0 < 30  # gave up on its own (generous on a busy machine): the server never answered
    assert fake.requests == 2


def test_failure_mid_import_writes_nothing_and_keeps_earlier_data(fake: FakeProm, tmp_path: Path) -> None:
    root = tmp_path / "d"
    _import(root, _url(fake))
    before = _snapshot(root)
    assert before
    # Many queries per chunk: let the first few succeed, then fail for good.
    fake.mode, fake.good_answers = "fail_after", 5
    with pytest.raises(GpuauditError, match="HTTP 500"):
        _import(root, _url(fake))
    assert _snapshot(root) == before


def test_bearer_token_from_file_and_env(fake: FakeProm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.auth = "bearer"
    monkeypatch.delenv("GPUAUDIT_PROM_TOKEN", raising=False)
    with pytest.raises(GpuauditError, match="HTTP 401"):
        _import(tmp_path / "a", _url(fake))
    token = tmp_path / "token"
    token.write_text(GOOD_TOKEN + "\n")
    assert _import(tmp_path / "b", _url(fake), bearer_token_file=token).sample_rows == 120
    monkeypatch.setenv("GPUAUDIT_PROM_TOKEN", GOOD_TOKEN)
    assert _import(tmp_path / "c", _url(fake)).sample_rows == 120
    assert fake.auth_headers[-1] == f"Bearer {GOOD_TOKEN}"


def test_basic_auth(fake: FakeProm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.auth = "basic"
    monkeypatch.setenv("GPUAUDIT_PROM_PASSWORD", "wrong")
    with pytest.raises(GpuauditError, match="HTTP 401"):
        _import(tmp_path / "a", _url(fake), user="alice")
    monkeypatch.setenv("GPUAUDIT_PROM_PASSWORD", "pw")
    assert _import(tmp_path / "b", _url(fake), user="alice").sample_rows == 120


@pytest.fixture
def tls_fake(fake: FakeProm, tmp_path: Path) -> tuple[FakeProm, Path]:
    """The same server behind TLS with a self-signed certificate for 127.0.0.1."""
    openssl = require_binary("openssl", "apt-get install openssl")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    fake.socket = ctx.wrap_socket(fake.socket, server_side=True)
    return fake, cert


def test_tls_verification_ca_file_and_insecure(tls_fake: tuple[FakeProm, Path], tmp_path: Path) -> None:
    srv, cert = tls_fake
    url = _url(srv, "https")
    with pytest.raises(GpuauditError, match=r"TLS error .*certificate verify failed.*--ca-file"):
        _import(tmp_path / "a", url, retries=0)
    assert not (tmp_path / "a").exists()
    assert _import(tmp_path / "b", url, ca_file=cert).sample_rows == 120
    assert _import(tmp_path / "c", url, insecure=True).sample_rows == 120


def test_empty_answer_is_an_error_not_an_empty_import(fake: FakeProm, tmp_path: Path) -> None:
    with pytest.raises(GpuauditError, match=r"no GPU utilization series matching \{job=\"none\"\}"):
        t = transport(_url(fake), retries=0)
        import_prometheus(tmp_path / "d", t, build_mapping(["sm_active=OTHER_METRIC"], selector='job="none"'),
                          START, END, 60)


def test_cli_errors_are_one_line_without_traceback(fake: FakeProm, tmp_path: Path) -> None:
    fake.mode = "500"
    base = ["import", "prometheus", "--start", "2026-01-05", "--end", "2026-01-05T02:00:00", "--data",
            str(tmp_path / "d"), "--retries", "1", "-q"]
    cases = [
        (["--url", _url(fake)], "HTTP 500"),
        (["--url", f"http://127.0.0.1:{free_port()}"], "cannot reach Prometheus"),
        (["--url", _url(fake), "--step", "0s"], "bad --step"),
        (["--url", _url(fake), "--start", "yesterday"], "bad time"),
        (["--url", _url(fake), "--metric", "bogus=X"], "unknown field"),
        (["--url", _url(fake), "--end", "2026-01-04"], "empty window"),
    ]
    for extra, message in cases:
        r = run_cli(*base, *extra)
        assert r.returncode == 2, (extra, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gpuaudit: error: ") and message in lines[0], r.stderr
    assert not (tmp_path / "d").exists() or _snapshot(tmp_path / "d") == {}


def test_future_end_is_clipped_to_now(fake: FakeProm, tmp_path: Path) -> None:
    now = datetime.now(UTC)
    t = transport(_url(fake), retries=0)
    r = import_prometheus(tmp_path / "d", t, build_mapping(), now - timedelta(hours=1), now + timedelta(days=1), 60)
    assert r.end <= now and r.sample_rows in (59, 60)  # the grid ends at the last full minute
