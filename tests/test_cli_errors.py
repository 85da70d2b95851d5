"""Adversarial inputs to the CLI: control characters in data reaching the terminal, unreadable option
files, odd times, a full disk, unknown users in --data, NaN in JSON, and the agent's life cycle (interval
bounds, signals, liveness, one agent per host and directory). Every case runs the real CLI in a
subprocess (or the real library) on real files."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import NASTY, REPO, _nasty_dataset, one_error_line, run_cli, wait_until
from tests.tmpfs_helpers import in_tiny_tmpfs

from gpuaudit import schema, store

RAW = ("\x1b", "\r", "\b", "\x00", "\u202e", "\x07", "\x9b")
ARG = NASTY.replace("\x00", "")  # what a command line or a path can carry (no NUL)


def _raw_controls(text: str) -> list[str]:
    """Control / format characters left in `text`, other than the line breaks a renderer puts there."""
    return [c for c in RAW if c in text]


def _strict_json(text: str) -> Any:
    def refuse(token: str) -> Any:
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)




# --- 4. control characters from data never reach the terminal raw -------------------------------------------
def test_printable_escapes_controls_and_keeps_text() -> None:
    from gpuaudit.util.textsafe import printable

    assert printable("plain ascii, Ünïcødé, 数据, 🙂") == "plain ascii, Ünïcødé, 数据, 🙂"
    assert printable("a\x1b[31mb") == "a\\x1b[31mb"
    assert printable("x\r\b\x00\x7f\x85y") == "x\\x0d\\x08\\x00\\x7f\\x85y"
    assert printable("abc\u202edef\u2066\u200b\u2028") == "abc\\u202edef\\u2066\\u200b\\u2028"
    assert printable("bad \udcff byte") == "bad \\udcff byte"  # surrogateescape'd input
    assert printable(42) == "42"
    assert not _raw_controls(printable(NASTY))


def test_sql_table_escapes_control_characters(tmp_path: Path) -> None:
    _nasty_dataset(tmp_path)
    r = run_cli("sql", "--data", str(tmp_path), "--format", "table",
                "SELECT s.host, s.gpu_name, p.user, p.job_id, p.k8s_pod, p.command AS \"col\x1b[1m\" "
                "FROM samples s JOIN processes p USING (gpu_uuid, ts) LIMIT 2")
    assert r.returncode == 0, r.stderr
    assert not _raw_controls(r.stdout), repr(r.stdout)
    assert "mallory\\x1b[31mred" in r.stdout and "\\u202eevil" in r.stdout and "col\\x1b[1m" in r.stdout
    assert "(2 rows)" in r.stdout


def test_agent_status_escapes_host_device_and_error_text(tmp_path: Path) -> None:
    host = f"h{ARG}"
    r = run_cli("agent", "run", "--once", "--interval", "0.2", "--simulate", "static", "--simulate-gpus", "1",
                "--data", str(tmp_path), "--host", host)
    assert r.returncode == 0, r.stderr
    assert not _raw_controls(r.stderr), repr(r.stderr)  # the agent's key=value log lines too
    status = tmp_path / f"agent-status-{store_safe(host)}.json"
    doc = json.loads(status.read_text())
    doc["flush_error"] = f"cannot write {NASTY}"
    status.write_text(json.dumps(doc))
    st = run_cli("agent", "status", "--simulate", "static", "--simulate-gpus", "1", "--data", str(tmp_path),
                 "--host", host)
    assert not _raw_controls(st.stdout), repr(st.stdout)
    assert "\\u202eevil" in st.stdout and "cannot write \\x1b[31mred" in st.stdout


def store_safe(host: str) -> str:
    from gpuaudit.agent.instance import host_key

    return host_key(host)


def test_error_lines_escape_echoed_data(tmp_path: Path) -> None:
    weird = tmp_path / f"no{ARG}"
    r = run_cli("analyze", "--data", str(weird))
    assert r.returncode == 2
    line, = r.stderr.strip().splitlines()
    assert line.startswith("gpuaudit: error: ") and not _raw_controls(line), repr(line)
    assert "\\u202eevil" in line
    _nasty_dataset(tmp_path / "d")
    r = run_cli("sql", "--data", str(tmp_path / "d"), f"SELECT * FROM no_such_table_{ARG}")
    assert r.returncode == 2
    line, = r.stderr.strip().splitlines()
    assert not _raw_controls(line), repr(line)


def test_analyze_summary_escapes_data_in_warnings(tmp_path: Path) -> None:
    root = tmp_path / f"data{ARG}"
    _nasty_dataset(root, n=24 * 60)
    damaged = store.partition_dir(root, schema.SAMPLES, "other", "2026-03-02") / "broken.parquet"
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"PAR1 this is not parquet")
    r = run_cli("analyze", "--data", str(root))
    assert r.returncode == 0, r.stderr
    assert "left out file" in r.stdout
    assert not _raw_controls(r.stdout), repr(r.stdout)
    assert "data\\x1b[31mred" in r.stdout


def test_report_summary_escapes_paths(tmp_path: Path) -> None:
    root = tmp_path / "d"
    _nasty_dataset(root, n=24 * 60)
    out = tmp_path / f"out{ARG}"
    r = run_cli("report", "--data", str(root), "--out", str(out), "--format", "json",
                env={"COLUMNS": "1000"})  # rich wraps at the terminal width: keep the path on one line
    assert r.returncode == 0, r.stderr
    assert not _raw_controls(r.stdout), repr(r.stdout)
    assert "out\\x1b[31mred" in r.stdout


# --- 2. one-line errors instead of tracebacks ------------------------------------------------------------------


def test_non_utf8_option_files_are_one_line_errors(tmp_path: Path) -> None:
    _nasty_dataset(tmp_path / "d", n=4)
    query = tmp_path / "q.sql"
    query.write_bytes(b"SELECT \xff\xfe 1")
    one_error_line(run_cli("sql", "--data", str(tmp_path / "d"), "--file", str(query)), "not UTF-8", "q.sql")
    token = tmp_path / "token"
    token.write_bytes(b"\xff\xfe\x00secret")
    one_error_line(run_cli("import", "prometheus", "--url", "http://127.0.0.1:9", "--data", str(tmp_path / "i"),
                            "--bearer-token-file", str(token), "-q"), "--bearer-token-file", "not UTF-8")
    assert not (tmp_path / "i").exists()


@pytest.mark.parametrize("value", ["99999-01-01", "-1e20d", "", "now-", "-100000000000000000000d", "0001-01-01",
                                   "9999-12-31", "1970-01-01"])
def test_odd_times_are_one_line_errors(tmp_path: Path, value: str) -> None:
    for option in ("--start", "--end"):
        args = ["--start", "2026-01-01", option, value] if option == "--end" else [option, value]
        r = run_cli("import", "prometheus", "--url", "http://127.0.0.1:9", "--retries", "0", "-q",
                    "--data", str(tmp_path / "i"), *args)
        one_error_line(r, option)
    r = run_cli("simulate", "--days", "1", "--gpus", "8", "--data", str(tmp_path / "s"), f"--start={value}")
    one_error_line(r, "--start")
    assert not (tmp_path / "i").exists() and not (tmp_path / "s").exists()


def test_simulated_trial_must_end_by_2100(tmp_path: Path) -> None:
    r = run_cli("simulate", "--days", "2", "--gpus", "8", "--data", str(tmp_path), "--start", "2099-12-31")
    one_error_line(r, "--start", "2100-01-01")


@pytest.mark.parametrize("command", [
    ["sql", "SELECT 1"], ["analyze"], ["report"], ["compact"], ["simulate", "--days", "0.1", "--gpus", "8"],
    ["agent", "status", "--simulate", "static"], ["agent", "run", "--once", "--simulate", "static"],
    ["import", "prometheus", "--url", "http://127.0.0.1:9"],
])
def test_unknown_user_in_data_path_is_one_line_error(tmp_path: Path, command: list[str]) -> None:
    r = run_cli(*command, "--data", "~no_such_user_gpuaudit/x", cwd=tmp_path)
    one_error_line(r, "~no_such_user_gpuaudit/x")
    if command[0] == "sql":  # the same through $GPUAUDIT_DATA
        r = run_cli(*command, env={"GPUAUDIT_DATA": "~no_such_user_gpuaudit"}, cwd=tmp_path)
        one_error_line(r, "~no_such_user_gpuaudit")


FULL_DISK_REPORT = r"""
import hashlib, json, os, subprocess, sys
from pathlib import Path
out, data, filler_kb = Path(sys.argv[1]) / "report", sys.argv[2], int(sys.argv[3])
out.mkdir()
for name in ("report.html", "report.md", "report.json"):
    (out / name).write_text("the earlier report\n")
# Leave room for about `filler_kb` less than the disk holds: the html fits, the rest does not.
with open(Path(sys.argv[1]) / "filler", "wb") as f:
    try:
        f.write(b"x" * (filler_kb * 1024))
    except OSError:
        pass
r = subprocess.run([sys.executable, "-m", "gpuaudit", "report", "--data", data, "--out", str(out), "-q"],
                   capture_output=True, text=True)
files = {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
         for p in sorted(out.rglob("*")) if p.is_file()}
print(json.dumps({"rc": r.returncode, "stderr": r.stderr, "files": files}))
"""


def test_report_on_a_full_disk_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "d"
    _nasty_dataset(root, n=24 * 60)
    probe = run_cli("report", "--data", str(root), "--out", str(tmp_path / "probe"), "-q")
    assert probe.returncode == 0, probe.stderr
    html_kb = (tmp_path / "probe" / "report.html").stat().st_size // 1024 + 1
    size_kb = html_kb + 512
    # The disk keeps html_kb + ~100 KB free: report.html is staged, the markdown, charts or json are not.
    res = in_tiny_tmpfs(size_kb, FULL_DISK_REPORT, str(root), str(size_kb - html_kb - 100 - 16))
    assert res["rc"] == 2, res
    assert len(res["stderr"].strip().splitlines()) == 1, res["stderr"]
    line = res["stderr"].strip()
    assert line.startswith("gpuaudit: error: cannot write the report") and "No space left" in line, line
    earlier = hashlib.sha256(b"the earlier report\n").hexdigest()
    # The earlier report is whole and alone: no new report.html beside an old report.md, no temporary files.
    assert res["files"] == {"report.html": earlier, "report.md": earlier, "report.json": earlier}, res["files"]


# --- 3. the agent's life cycle ------------------------------------------------------------------------------
def _status(root: Path, host: str) -> dict[str, Any] | None:
    return store.read_json(root, f"agent-status-{store_safe(host)}.json")


def _start_agent(root: Path, host: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    """An agent on the simulated NVML, returned once it is ready: its status file names its pid."""
    with log.open("ab") as err:
        p = subprocess.Popen([sys.executable, "-m", "gpuaudit", "agent", "run", "--simulate", "static",
                              "--simulate-gpus", "2", "--data", str(root), "--host", host, *extra],
                             stdout=subprocess.DEVNULL, stderr=err, cwd=REPO)
    def ready() -> bool:
        st = _status(root, host)
        return p.poll() is not None or bool(st and st.get("pid") == p.pid)

    if not wait_until(ready):
        p.kill()
        pytest.fail(f"agent not ready (no status file with its pid): {log.read_text()[-2000:]}")
    if p.poll() is not None:
        pytest.fail(f"agent exited {p.returncode}: {log.read_text()[-2000:]}")
    return p


@pytest.fixture
def agents() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:  # only those this test started, by pid
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)


@pytest.mark.parametrize("value", ["1e-9", "0", "-1", "nan", "inf", "3601"])
def test_interval_outside_its_range_is_one_line_error(tmp_path: Path, value: str) -> None:
    r = run_cli("agent", "run", "--once", "--simulate", "static", "--simulate-gpus", "1", "--data", str(tmp_path),
                f"--interval={value}", timeout=60)
    one_error_line(r, "--interval must be between 0.1 and 3600 seconds")


def test_sigterm_is_prompt_at_the_longest_interval(tmp_path: Path, agents: list) -> None:
    p = _start_agent(tmp_path, "slow", tmp_path / "log", "--interval", "3600")
    agents.append(p)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 0
    assert time.monotonic() - t0 < 60  # not the rest of an hour-long interval (generous on a busy machine)
    assert _status(tmp_path, "slow")["stopped"]


def test_sighup_flushes_and_keeps_running_and_status_tells_live_from_gone(tmp_path: Path, agents: list) -> None:
    log = tmp_path / "log"
    p = _start_agent(tmp_path, "hup", log, "--interval", "0.1", "--flush-interval", "600")
    agents.append(p)
    samples = tmp_path / "gpu_samples"

    def flushed() -> bool:  # nothing is due for 600 s: SIGHUP it until a flush lands
        if samples.exists() and any(samples.rglob("*.parquet")):
            return True
        p.send_signal(signal.SIGHUP)
        return False

    assert wait_until(flushed, poll_s=0.3), log.read_text()
    assert p.poll() is None  # still running
    args = ["agent", "status", "--simulate", "static", "--simulate-gpus", "2", "--data", str(tmp_path), "--host", "hup"]
    st = run_cli(*args)
    assert st.returncode == 0, st.stdout + st.stderr
    assert f"agent:           running (pid {p.pid}" in st.stdout
    doc = json.loads(run_cli(*args, "--json").stdout)
    assert doc["agent_running"] is True

    p.send_signal(signal.SIGKILL)  # dies without a word: the status file still says what it last wrote
    p.wait(timeout=30)
    st = run_cli(*args)
    assert st.returncode == 3, st.stdout + st.stderr
    assert f"NOT RUNNING (pid {p.pid} is gone; last seen" in st.stdout
    # The same pid reused by another process (here: this test) is not the agent either.
    status = tmp_path / f"agent-status-{store_safe('hup')}.json"
    doc = json.loads(status.read_text())
    status.write_text(json.dumps({**doc, "pid": os.getpid()}))
    st = run_cli(*args)
    assert st.returncode == 3 and f"pid {os.getpid()} is gone" in st.stdout
    # Written on another node of a shared directory: this machine cannot tell.
    status.write_text(json.dumps({**doc, "boot_id": "another-boot", "node": "elsewhere"}))
    st = run_cli(*args)
    assert st.returncode == 3 and "unknown: it ran on node 'elsewhere'" in st.stdout


def test_one_agent_per_host_and_directory(tmp_path: Path, agents: list) -> None:
    p = _start_agent(tmp_path, "same", tmp_path / "log", "--interval", "0.2")
    agents.append(p)
    r = run_cli("agent", "run", "--once", "--simulate", "static", "--simulate-gpus", "1", "--interval", "0.2",
                "--data", str(tmp_path), "--host", "same", timeout=60)
    one_error_line(r, "another agent for host 'same' is already running", f"pid {p.pid}")
    # Another host sharing the directory (a shared filesystem) is fine.
    r = run_cli("agent", "run", "--once", "--simulate", "static", "--simulate-gpus", "1", "--interval", "0.2",
                "--data", str(tmp_path), "--host", "other", timeout=60)
    assert r.returncode == 0, r.stderr
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 0
    # Released on exit: the same host can start again.
    r = run_cli("agent", "run", "--once", "--simulate", "static", "--simulate-gpus", "1", "--interval", "0.2",
                "--data", str(tmp_path), "--host", "same", timeout=60)
    assert r.returncode == 0, r.stderr


# --- 5. JSON output is strict JSON ------------------------------------------------------------------------------
def test_json_outputs_never_hold_nan_or_infinity(tmp_path: Path) -> None:
    import numpy as np

    from gpuaudit.util.jsonio import dumps

    doc = {"a": float("nan"), "b": [float("inf"), np.float32("-inf"), np.float64("nan"), 1.5], "c": {"d": 2}}
    assert _strict_json(dumps(doc)) == {"a": None, "b": [None, None, None, 1.5], "c": {"d": 2}}
    # agent status --json echoes the status file, which Python's json reads NaN from.
    r = run_cli("agent", "run", "--once", "--simulate", "static", "--simulate-gpus", "1", "--interval", "0.2",
                "--data", str(tmp_path), "--host", "n")
    assert r.returncode == 0, r.stderr
    status = tmp_path / "agent-status-n.json"
    status.write_text(status.read_text().replace('"interval_s": 0.2', '"interval_s": NaN'))
    st = run_cli("agent", "status", "--json", "--simulate", "static", "--simulate-gpus", "1", "--data",
                 str(tmp_path), "--host", "n")
    assert _strict_json(st.stdout)["agent"]["interval_s"] is None


def test_analyze_and_report_json_are_strict_with_non_finite_inputs(tmp_path: Path) -> None:
    root = tmp_path / "d"
    _nasty_dataset(root, n=24 * 60)
    t0 = datetime(2026, 3, 2, tzinfo=UTC)
    n = 24 * 60
    store.write_table(root, schema.SAMPLES, {
        "ts": [t0 + timedelta(minutes=i + 1) for i in range(n)], "interval_s": [60.0] * n, "host": ["odd"] * n,
        "gpu_uuid": ["GPU-odd"] * n, "gpu_fraction": [1.0] * n, "sm_active": [0.3] * n, "n_processes": [1] * n,
        "power_w": [float("nan"), float("inf")] * (n // 2), "energy_j": [float("inf")] * n,
        "source": [schema.SOURCE_SIMULATED] * n})
    r = run_cli("analyze", "--json", "--data", str(root))
    assert r.returncode == 0, r.stderr
    _strict_json(r.stdout)
    r = run_cli("report", "--data", str(root), "--out", str(tmp_path / "out"), "--format", "json", "-q")
    assert r.returncode == 0, r.stderr
    _strict_json((tmp_path / "out" / "report.json").read_text())
