"""Adversarial answers to `import prometheus`: impossible values (from a real Prometheus, backfilled with
promtool), timestamps outside the query, oversized or endless bodies (from a small local HTTP server), and a
write phase that fails part-way (a blocked partition, a full disk). Each must end in one error line with
the dataset exactly as it was."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from tests.helpers import IMPORT_START as START
from tests.helpers import require_binary, run_bin, run_cli, serving
from tests.prom_helpers import PromServer, backfill, start_prometheus
from tests.tmpfs_helpers import in_tiny_tmpfs

from gpuaudit import store
from gpuaudit.errors import GpuauditError
from gpuaudit.importer.promclient import transport
from gpuaudit.importer.prometheus import import_prometheus
from gpuaudit.importer.prometheus.mapping import build_mapping
from gpuaudit.store import readers

HOW = "install Prometheus (it ships promtool): apt-get install --no-install-recommends prometheus"
END = START + timedelta(hours=2)
N = 120  # one sample a minute, at hh:mm:07
BAD_AT = 30  # the sample at 00:30:07 is out of range: the step ending 00:31:00 is the first bad row


def _snapshot(root: Path) -> dict[str, str]:
    """Every file of the dataset with its content hash (staging excluded): what a reader can see."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))
            if p.is_file() and store.STAGING not in p.parts
            and p.name not in (store.COMPACT_LOCK, *readers.LOCK_FILES)}


def _stages(root: Path) -> list[Path]:
    return sorted((root / store.STAGING).glob("import-*")) if (root / store.STAGING).exists() else []


# --- impossible values from a real Prometheus ---------------------------------------------------------------
def _series(metric: str, labels: dict[str, str], values: list[float]) -> str:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    t0 = START.timestamp() + 7
    return "".join(f"{metric}{{{text}}} {v} {t0 + 60 * i:.0f}\n" for i, v in enumerate(values))


def _spiked(normal: float, bad: float) -> list[float]:
    return [bad if i == BAD_AT else normal for i in range(N)]


@pytest.fixture(scope="module")
def bad_prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromServer]:
    """Four GPUs told apart by a `case` label: one sane, and one each with SM activity 1.5, a duty cycle of
    150 % and a power of -5 W at 00:30:07."""
    prometheus = require_binary("prometheus", HOW)
    promtool = require_binary("promtool", HOW)
    work = tmp_path_factory.mktemp("badprom")
    gpus = {case: {"Hostname": f"node-{case}", "UUID": f"GPU-{case}", "gpu": "0", "modelName": "H100", "case": case}
            for case in ("good", "sm", "util", "power")}
    families = {
        "DCGM_FI_PROF_SM_ACTIVE": [("good", [0.5] * N), ("sm", _spiked(0.5, 1.5)), ("power", [0.5] * N)],
        "DCGM_FI_DEV_GPU_UTIL": [("good", [100.0] * N), ("util", _spiked(40.0, 150.0))],
        "DCGM_FI_DEV_POWER_USAGE": [("good", [300.0] * N), ("power", _spiked(300.0, -5.0))],
    }
    om = work / "bad.om.txt"
    with om.open("w", encoding="utf-8") as out:
        for metric, series in families.items():
            out.write(f"# TYPE {metric} gauge\n")
            for case, values in series:
                out.write(_series(metric, gpus[case], values))
        out.write("# EOF\n")
    backfill(promtool, om, work / "tsdb")
    server = start_prometheus(prometheus, work / "tsdb", work)
    try:
        yield server
    finally:
        server.stop()


def _cli_import(url: str, root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli("import", "prometheus", "--url", url, "--start", START.isoformat(), "--end", END.isoformat(),
                   "--retries", "0", "-q", "--data", str(root), *extra)


@pytest.mark.prometheus
@pytest.mark.parametrize(("case", "needles"), [
    ("sm", ['DCGM_FI_PROF_SM_ACTIVE{', 'case="sm"', "= 1.5 at 2026-01-05T00:31:00Z", "utilization above 1"]),
    ("util", ['DCGM_FI_DEV_GPU_UTIL{', 'case="util"', "= 150 at 2026-01-05T00:31:00Z", "utilization above 100 %"]),
    ("power", ['DCGM_FI_DEV_POWER_USAGE{', 'case="power"', "= -5 at 2026-01-05T00:31:00Z", "negative power"]),
])
def test_impossible_values_are_refused_not_clipped(bad_prom: PromServer, tmp_path: Path, case: str,
                                                   needles: list[str]) -> None:
    root = tmp_path / "d"
    good = _cli_import(bad_prom.url, root, "--selector", 'case="good"')
    assert good.returncode == 0, good.stderr  # 100 % duty cycle and 0.5 SM activity are fine
    before = _snapshot(root)
    assert before
    r = _cli_import(bad_prom.url, root, "--selector", f'case=~"good|{case}"')
    assert r.returncode == 2, r.stdout + r.stderr
    line, = r.stderr.strip().splitlines()
    assert line.startswith("gpuaudit: error: bad value from ") and line.endswith("nothing imported"), line
    for needle in needles:
        assert needle in line, line
    assert _snapshot(root) == before and not _stages(root)


# --- answers Prometheus cannot give: a small local HTTP server -------------------------------------------------
Answer = Callable[[str, float, float, float], tuple[int, dict[str, str], Any]]


class Server(ThreadingHTTPServer):
    daemon_threads = True
    answer: Answer


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: with Nagle's algorithm on, the body waits for the client's delayed
    # ACK (40 ms a request on Linux: 5 s a test). Prometheus (Go) sends with TCP_NODELAY too.
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        q = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
        code, headers, body = self.server.answer(q["query"], float(q["start"]), float(q["end"]), float(q["step"]))
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        if isinstance(body, bytes):
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_header("Transfer-Encoding", "chunked")  # a stream of unknown length
        self.end_headers()
        try:
            for chunk in body:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client hung up: what a capped reader does
            self.close_connection = True


@pytest.fixture
def http() -> Iterator[Server]:
    with serving(Server(("127.0.0.1", 0), Handler)) as srv:
        yield srv


def _url(srv: Server) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}"


def _matrix(series: list[tuple[dict[str, str], list[list[Any]]]]) -> bytes:
    result = [{"metric": m, "values": v} for m, v in series]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


def fleet(hosts: list[str], sm: float = 0.5, ts_of: Callable[[float], Any] | None = None,
          energy_j: float | None = None) -> Answer:
    """One GPU per host at `sm` SM activity (and, if given, an energy increase in mJ per step); `ts_of` may
    bend the timestamps the server sends."""

    def answer(query: str, start: float, end: float, step: float) -> tuple[int, dict[str, str], Any]:
        grid = [start + i * step for i in range(int((end - start) // step) + 1)]
        series = []
        for h in hosts:
            labels = {"Hostname": h, "UUID": f"GPU-{h}", "gpu": "0", "modelName": "H100"}
            if "SM_ACTIVE" in query:
                series.append((labels, [[ts_of(t) if ts_of else t, str(sm)] for t in grid]))
            elif "ENERGY" in query and energy_j is not None:
                series.append((labels, [[t, str(energy_j)] for t in grid]))
        return 200, {"Content-Type": "application/json"}, _matrix(series)

    return answer


def _import(srv: Server, root: Path, start: datetime = START, end: datetime = END, **kw: Any) -> Any:
    t = transport(_url(srv), retries=0, timeout_s=10, **kw)
    return import_prometheus(root, t, build_mapping(), start, end, 60)


@pytest.mark.parametrize(("bend", "shown"), [
    (lambda t: 0.0, "1970-01-01T00:00:00Z"),
    (lambda t: 253402300799.0, "9999-12-31T23:59:59Z"),
    (lambda t: 1e15, "timestamp 1e+15"),
    (lambda t: t + 86400 * 365, "2027-01-05"),
    (lambda t: "NaN", "timestamp nan"),
])
def test_timestamps_outside_the_query_are_refused(http: Server, tmp_path: Path, bend: Any, shown: str) -> None:
    root = tmp_path / "d"
    http.answer = fleet(["h1"])
    _import(http, root)
    before = _snapshot(root)
    http.answer = fleet(["h1"], sm=0.7, ts_of=lambda t: bend(t) if t >= START.timestamp() + 1800 else t)
    with pytest.raises(GpuauditError, match=r"malformed response .*DCGM_FI_PROF_SM_ACTIVE\{.*UUID=\"GPU-h1\".* "
                                            r"has a sample at .*outside the queried window .*nothing imported") as e:
        _import(http, root)
    assert shown in str(e.value)
    assert _snapshot(root) == before and not _stages(root)


def test_negative_energy_is_refused(http: Server, tmp_path: Path) -> None:
    http.answer = fleet(["h1"], energy_j=-5000.0)
    with pytest.raises(GpuauditError, match=r"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{.* = -5000 at "
                                            r"2026-01-05T00:00:00Z: negative energy; nothing imported"):
        _import(http, tmp_path / "d")
    assert _snapshot(tmp_path / "d") == {}


def test_response_size_is_capped(http: Server, tmp_path: Path) -> None:
    big = b'{"status":"success","data":{"resultType":"matrix","result":[' + b" " * (3 * 1024 * 1024) + b"]}}"
    http.answer = lambda q, s, e, st: (200, {"Content-Type": "application/json"}, big)
    with pytest.raises(GpuauditError, match=r"answer larger than 1 MiB \(--max-response-mb\)"):
        _import(http, tmp_path / "d", max_response_mb=1)
    assert _snapshot(tmp_path / "d") == {}
    # A server that never stops (no Content-Length) is cut off at the limit, not read into memory.
    sent = {"bytes": 0}

    def endless(q: str, s: float, e: float, st: float) -> tuple[int, dict[str, str], Any]:
        def chunks() -> Iterator[bytes]:
            yield b'{"status":"success","data":{"resultType":"matrix","result":['
            while sent["bytes"] < 1024 ** 3:  # 1 GiB, were anyone to read it all
                sent["bytes"] += 65536
                yield b" " * 65536
        return 200, {"Content-Type": "application/json"}, chunks()

    http.answer = endless
    t0 = time.monotonic()
    # A fresh interpreter: the server thread's own complaint about the dropped connection (on this process's
    # stderr) is not the command's.
    r = run_bin("import", "prometheus", "--url", _url(http), "--start", START.isoformat(), "--end", END.isoformat(),
                "--retries", "0", "-q", "--data", str(tmp_path / "d"), "--max-response-mb", "2", timeout=120)
    assert r.returncode == 2, r.stderr
    line, = r.stderr.strip().splitlines()
    assert "answer larger than 2 MiB (--max-response-mb)" in line, line
    assert sent["bytes"] < 64 * 1024 ** 2 and time.monotonic() - t0 < 60
    r = run_cli("import", "prometheus", "--url", _url(http), "--max-response-mb", "0", "--data", str(tmp_path / "d"))
    assert r.returncode == 2 and "--max-response-mb must be positive" in r.stderr


# --- a write phase that fails part-way ----------------------------------------------------------------------
HOSTS = ["h1", "h2", "h3", "h4", "h5"]


def test_failure_on_the_third_of_five_partitions_publishes_nothing(http: Server, tmp_path: Path) -> None:
    root = tmp_path / "d"
    http.answer = fleet(["h1", "h2"], sm=0.25)  # an earlier import: the re-import replaces these files
    _import(http, root)
    before = _snapshot(root)
    assert len(before) == 2
    # h3's partition cannot be created: a file stands where its directory must go.
    (root / "gpu_samples" / "host=h3").write_text("in the way")
    before = _snapshot(root)
    http.answer = fleet(HOSTS, sm=0.75)
    with pytest.raises(GpuauditError, match=r"cannot write to .*Not a directory; nothing imported"):
        _import(http, root)
    assert _snapshot(root) == before  # the earlier files whole, no new host visible
    assert not _stages(root)
    with store.open_dataset(root) as ds:
        assert ds.fetchall("SELECT DISTINCT sm_active FROM samples") == [(0.25,)]
    # Once the way is clear the same import succeeds.
    (root / "gpu_samples" / "host=h3").unlink()
    assert _import(http, root).hosts == 5


FULL_DISK_IMPORT = r"""
import hashlib, json, os, subprocess, sys
from pathlib import Path
disk, url = Path(sys.argv[1]), sys.argv[2]
root = disk / "d"

def run(*extra):
    return subprocess.run([sys.executable, "-m", "gpuaudit", "import", "prometheus", "--url", url, "--retries", "0",
                           "-q", "--data", str(root), "--start", "2026-01-05", *extra], capture_output=True, text=True)

def snapshot():
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))
            if p.is_file() and ".staging" not in p.parts and not p.name.endswith(".lock")}

first = run("--end", "2026-01-05T02:00:00")
before = snapshot()
st = os.statvfs(disk)
with open(disk / "filler", "wb") as f:  # leave 24 KiB: the first partition may fit, not all five days
    try:
        f.write(b"x" * (st.f_bavail * st.f_frsize - 24 * 1024))
    except OSError:
        pass
second = run("--end", "2026-01-10")
print(json.dumps({"first": [first.returncode, first.stderr], "second": [second.returncode, second.stderr],
                  "before": before, "after": snapshot(),
                  "stages": os.listdir(root / ".staging") if (root / ".staging").exists() else []}))
"""


def test_full_disk_during_import_leaves_the_dataset_as_it_was(http: Server) -> None:
    http.answer = fleet(HOSTS, sm=0.5)
    res = in_tiny_tmpfs(2048, FULL_DISK_IMPORT, _url(http))
    assert res["first"][0] == 0, res["first"][1]
    assert len(res["before"]) == 5
    code, err = res["second"]
    assert code == 2, err
    line, = err.strip().splitlines()
    assert line.startswith("gpuaudit: error: cannot write to ") and "No space left on device" in line, line
    assert line.endswith("nothing imported (the dataset is as it was)"), line
    assert res["after"] == res["before"]
    assert not [s for s in res["stages"] if s.startswith("import-")]



# --- an import and a compaction at once ---------------------------------------------------------------------
def test_import_waits_for_a_running_compaction(http: Server, tmp_path: Path) -> None:
    """The importer rewrites partition files; a compaction merging them at the same moment would lose or double
    rows. The import takes the compaction lock (held here by another process) and waits for it."""
    import os
    import sys

    root = tmp_path / "d"
    http.answer = fleet(["h1"], sm=0.25)
    _import(http, root)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from gpuaudit import store\n"
         "with store.compaction_lock(sys.argv[1]):\n    print('held', flush=True); sys.stdin.readline()", str(root)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        http.answer = fleet(["h1"], sm=0.75)
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuaudit", "import", "prometheus", "--url", _url(http), "--retries", "0", "-q",
             "--data", str(root), "--start", START.isoformat(), "--end", END.isoformat()],
            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "1000"})
        assert proc.stderr is not None
        line = proc.stderr.readline()  # the import says it waits, and does not finish while the lock is held
        assert "waiting for another compaction" in line
        assert proc.poll() is None
        with store.open_dataset(root) as ds:
            assert ds.fetchall("SELECT DISTINCT sm_active FROM samples") == [(0.25,)]
    finally:
        holder.communicate("\n", timeout=30)
    assert proc.wait(timeout=60) == 0
    with store.open_dataset(root) as ds:
        assert ds.fetchall("SELECT DISTINCT sm_active FROM samples") == [(0.75,)]


# --- values and labels that cannot be stored (adversarial review) -------------------------------------------
def _gauges(values: dict[str, float], labels: dict[str, str] | None = None) -> Answer:
    """One GPU at 0.5 SM activity and, from 00:30 on, the given value for each named metric; `labels` are added
    to every series."""

    def answer(query: str, start: float, end: float, step: float) -> tuple[int, dict[str, str], Any]:
        grid = [start + i * step for i in range(int((end - start) // step) + 1)]
        metric = {"Hostname": "h1", "UUID": "GPU-h1", "gpu": "0", "modelName": "H100", **(labels or {})}
        named = [v for name, v in values.items() if name in query]
        if "SM_ACTIVE" in query:
            return 200, {}, _matrix([(metric, [[t, "0.5"] for t in grid])])
        if named:
            return 200, {}, _matrix([(metric, [[t, str(named[0] if t >= START.timestamp() + 1800 else 1)]
                                                for t in grid])])
        return 200, {}, _matrix([])

    return answer


@pytest.mark.parametrize(("values", "labels", "needles"), [
    ({"DCGM_FI_DEV_FB_USED": -5}, None, ["DCGM_FI_DEV_FB_USED{", "= -5 at 2026-01-05T00:30:00Z", "negative"]),
    ({"DCGM_FI_DEV_FB_FREE": -1}, None, ["DCGM_FI_DEV_FB_FREE{", "= -1 at", "negative"]),
    ({"DCGM_FI_DEV_GPU_TEMP": 70000}, None, ["DCGM_FI_DEV_GPU_TEMP{", "= 70000 at", "temperature"]),
    ({"DCGM_FI_DEV_GPU_TEMP": -1e9}, None, ["DCGM_FI_DEV_GPU_TEMP{", "= -1e+09 at", "temperature"]),
    ({"DCGM_FI_DEV_FB_USED": 1e30}, None, ["DCGM_FI_DEV_FB_USED{", "= 1e+30 at", "too large"]),
    ({"DCGM_FI_DEV_POWER_USAGE": 1e300}, None, ["DCGM_FI_DEV_POWER_USAGE{", "= 1e+300 at", "too large"]),
    ({}, {"GPU_I_ID": "70000"}, ['GPU_I_ID="70000"', "MIG instance"]),
    ({}, {"gpu": "99999999999"}, ['gpu="99999999999"', "GPU index"]),
    ({}, {"GPU_I_ID": "-1"}, ['GPU_I_ID="-1"', "MIG instance"]),
])
def test_values_and_labels_that_cannot_be_stored_are_refused(http: Server, tmp_path: Path, values: dict[str, float],
                                                             labels: dict[str, str] | None, needles: list[str]) -> None:
    root = tmp_path / "d"
    http.answer = fleet(["h1"])
    _import(http, root)
    before = _snapshot(root)
    http.answer = _gauges(values, labels)
    with pytest.raises(GpuauditError, match=r"nothing imported") as e:
        _import(http, root)
    assert "\n" not in str(e.value)
    for needle in needles:
        assert needle in str(e.value), str(e.value)
    assert _snapshot(root) == before and not _stages(root)


def test_a_huge_temperature_is_one_line_from_the_cli(http: Server, tmp_path: Path) -> None:
    http.answer = _gauges({"DCGM_FI_DEV_GPU_TEMP": 70000})
    r = run_cli("import", "prometheus", "--url", _url(http), "--start", START.isoformat(), "--end", END.isoformat(),
                "--retries", "0", "-q", "--data", str(tmp_path / "d"))
    assert r.returncode == 2, r.stderr
    line, = r.stderr.strip().splitlines()
    assert line.startswith("gpuaudit: error: bad value from ") and "DCGM_FI_DEV_GPU_TEMP{" in line, line


def test_sane_memory_temperature_and_mig_labels_import(http: Server, tmp_path: Path) -> None:
    http.answer = _gauges({"DCGM_FI_DEV_FB_USED": 4096, "DCGM_FI_DEV_GPU_TEMP": 65},
                          {"GPU_I_ID": "3", "GPU_I_PROFILE": "1g.10gb"})  # no profile: not guessed (issue 18)
    result = _import(http, tmp_path / "d")
    assert result.sample_rows == 120
    with store.open_dataset(tmp_path / "d") as ds:
        assert ds.fetchall("SELECT max(mem_used_bytes), max(temp_c), min(mig_instance) FROM samples") == [
            (4096 * 1024 * 1024, 65, 3)]


def test_a_deeply_nested_answer_is_malformed_not_a_crash(http: Server, tmp_path: Path) -> None:
    deep = b'{"status":"success","data":{"resultType":"matrix","result":' + b"[" * 100000 + b"]" * 100000 + b"}}"
    http.answer = lambda q, s, e, st: (200, {"Content-Type": "application/json"}, deep)
    with pytest.raises(GpuauditError, match=r"malformed response from .*nested too deeply"):
        _import(http, tmp_path / "d")
    assert _snapshot(tmp_path / "d") == {}
