"""Bounded input: text columns have a bound in the contract (schema.TEXT_MAX_CHARS) that the writer cuts to
and the reader enforces, naming the file; --bearer-token-file is a regular file of a token's size;
`import prometheus --timeout` is a deadline for the whole request, even against a server that drips its answer.
Real Parquet files, real DuckDB, the real CLI, a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import http.server
import resource
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.helpers import REPO, one_error_line, run_cli, serving
from tests.store_helpers import raw_file

from gpuaudit import schema, store
from gpuaudit.sim import bulk as sim

HUGE = 2_000_000  # characters: big enough to tell, small enough for a fast test (the issue had 100 MB)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bounds") / "data"
    sim.simulate(root, "phantom", gpus=2, days=1, interval_s=900, seed=5)
    return root


def _proc_row(ts: datetime, **text: str) -> dict:
    return {"ts": ts, "host": "gpu-node-001", "gpu_uuid": "GPU-x", "pid": 7, "mem_used_bytes": 1,
            "user": "u", **text}


def test_contract_bounds_every_text_column() -> None:
    for table in schema.TABLES:
        text = {c.name for c in schema.COLUMNS[table] if c.sql_type == "VARCHAR"} - set(schema.PARTITION_KEYS)
        assert set(schema.TEXT_MAX_CHARS[table]) == text, table


def test_reader_leaves_out_rows_with_oversized_text_and_names_the_file(fleet: Path, tmp_path: Path) -> None:
    """Defect: a small Parquet file with huge strings reached the views whole (analyze took 5.3 GB, report.json
    was 839 MB). Its rows are now left out, counted and named; the other rows stay."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(fleet, data)
    ts = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    bad = raw_file(data, schema.PROCESSES, [_proc_row(ts, k8s_pod="p" * HUGE), _proc_row(ts, command="c" * HUGE),
                                            _proc_row(ts, k8s_pod="fine")], name="huge")
    assert bad.stat().st_size < 100_000  # compresses to almost nothing, as in the issue
    with store.open_dataset(data) as ds:
        longest = ds.fetchall("SELECT max(length(k8s_pod)), max(length(command)), count(*) FILTER "
                              "(WHERE k8s_pod = 'fine') FROM processes")[0]
        rejected = ds.rejected_rows()
    assert longest[0] <= 253 and longest[1] <= 256 and longest[2] == 1, longest
    reasons = {reason: n for table, reason, n in rejected if table == schema.PROCESSES}
    assert reasons == {"k8s_pod longer than 253 characters": 1, "command longer than 256 characters": 1}, rejected
    r = run_cli("analyze", "--data", str(data), "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout) < 1_000_000, len(r.stdout)
    # the reader names the file of each (the result's own warnings, on stderr too, sum them up without it)
    named = [line for line in r.stderr.splitlines() if "longer than" in line and line.startswith("gpuaudit: "
                                                                                                 "warning: excluded")]
    assert len(named) == 2 and all("huge.parquet" in line for line in named), r.stderr
    assert "gpuaudit: warning: 1 gpu_processes row excluded: command longer than 256 characters" in r.stderr


def test_writer_cuts_text_to_its_bound(tmp_path: Path) -> None:
    """What gpuaudit writes (agent, importer, simulator) is never refused by its own reader."""
    ts = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    store.write_table(tmp_path, schema.PROCESSES, {k: [v] for k, v in _proc_row(
        ts, k8s_pod="p" * 1000, command="c" * 1000, job_id="j" * 1000).items()})
    with store.open_dataset(tmp_path) as ds:
        assert ds.fetchall("SELECT length(k8s_pod), length(command), length(job_id) FROM processes") == [
            (253, 256, 256)]
        assert ds.rejected_rows() == []


# --- --bearer-token-file ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["/dev/zero", "fifo", "big"])
def test_bearer_token_file_must_be_a_regular_file_of_a_token_size(name: str, tmp_path: Path) -> None:
    """Defect: `--bearer-token-file /dev/zero` read without limit (12.9 GB RSS)."""
    import os

    path = Path(name) if name.startswith("/") else tmp_path / name
    if name == "fifo":
        os.mkfifo(path)
    elif name == "big":
        path.write_text("t" * (1 << 20))
    r = subprocess.run([sys.executable, "-m", "gpuaudit", "import", "prometheus", "--url", "http://127.0.0.1:9",
                        "--data", str(tmp_path / "d"), "--bearer-token-file", str(path)],
                       capture_output=True, text=True, timeout=60,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)),
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "src")})
    one_error_line(r, "--bearer-token-file", "regular file" if name != "big" else "larger than")


# --- import prometheus --timeout: a deadline for the whole request --------------------------------------------
class _Dripping(http.server.BaseHTTPRequestHandler):
    """Answers 200 at once, then one byte of body every 0.5 s: every socket read succeeds within any timeout."""

    stop = threading.Event()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        try:
            while not self.stop.wait(0.5):
                self.wfile.write(b" ")
                self.wfile.flush()
        except OSError:  # the client gave up: what the test wants
            return

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


def test_import_timeout_is_a_deadline_for_a_dripping_server(tmp_path: Path) -> None:
    """Defect: `import prometheus --timeout 2 --retries 0` against a server sending a byte every 0.5 s ran 304 s:
    the timeout bounded each socket read, not the request."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Dripping)
    server.daemon_threads = True
    with serving(server):
        t0 = time.monotonic()
        try:
            r = run_cli("import", "prometheus", "--url", f"http://127.0.0.1:{server.server_port}", "--start", "-1h",
                        "--timeout", "2", "--retries", "0", "--quiet", "--data", str(tmp_path / "d"), timeout=40)
        finally:
            _Dripping.stop.set()
        took = time.monotonic() - t0
    one_error_line(r, "did not answer within 2s")
    assert took < 30, took
