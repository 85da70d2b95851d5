"""Ctrl-C and hostile paths end a command with one line, never a traceback.

Ctrl-C is a real SIGINT sent to a real `gpuaudit` subprocess while DuckDB runs a query that never ends on its
own: `sql` runs `range(10^13)`; for `analyze`, `report` and the analysis half of `demo`, a sitecustomize hook
(test-only, on PYTHONPATH) runs the same endless query through the reader's own `Dataset.execute` just before
the analyzer's first stage-1 statement. The test sends SIGINT once the hook says the query is running, so the
signal always lands inside DuckDB, whatever the machine's speed."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import REPO, one_error_line, run_cli, wait_until

from gpuaudit.sim import bulk as sim

ENDLESS = "SELECT count(*) FROM range(10000000000000)"
READY = "HOOK: endless query running"

_HOOK = f'''
import os, sys, threading, time
if os.environ.get("GPUAUDIT_TEST_ENDLESS_EXECUTE"):
    from gpuaudit.store import reader
    _orig = reader.Dataset.execute
    _fired = []

    def _say_when_inside():
        main = threading.main_thread().ident
        while True:  # the endless call is on the stack: of the main thread, or of the worker it waits for
            frames = sys._current_frames().values()
            if any(f.f_code.co_name == "_endless" for top in frames for f in _stack(top)):
                time.sleep(0.2)  # well inside DuckDB by now: the query never ends by itself
                sys.stderr.write({READY!r} + "\\n"); sys.stderr.flush()
                return
            time.sleep(0.005)

    def _stack(f):
        while f is not None:
            yield f
            f = f.f_back

    def execute(self, sql, params=None):
        if not _fired and "CREATE OR REPLACE TEMP TABLE" in sql:
            _fired.append(1)
            threading.Thread(target=_say_when_inside, daemon=True).start()
            def _endless():
                return _orig(self, {ENDLESS!r})
            _endless()
        return _orig(self, sql, params)

    reader.Dataset.execute = execute
'''


def _interrupt(args: list[str], tmp_path: Path, *, hook: bool, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `gpuaudit ARGS`, send SIGINT once the endless query runs, and return what it printed."""
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir(exist_ok=True)
    (hook_dir / "sitecustomize.py").write_text(_HOOK)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook_dir), str(REPO / "src")])}
    if hook:
        env["GPUAUDIT_TEST_ENDLESS_EXECUTE"] = "1"
    # A child of a non-interactive shell may inherit SIGINT ignored: restore the default, as a terminal has it.
    p = subprocess.Popen([sys.executable, "-m", "gpuaudit", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, cwd=cwd or tmp_path,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        if hook:
            assert p.stderr is not None
            lines = []
            while READY not in (line := p.stderr.readline()):
                assert line, f"the hook never saw the query start: {''.join(lines)}"
                lines.append(line)
        else:
            _wait_busy(p)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def _wait_busy(p: subprocess.Popen, cpu_s: float = 3.0) -> None:
    """Until `p` has used `cpu_s` of CPU (startup takes about one): the endless query is running, on every
    core DuckDB has."""
    pid = p.pid

    def cpu() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def busy() -> bool:
        assert p.poll() is None, p.communicate()
        return len(os.listdir(f"/proc/{pid}/task")) > 1 and cpu() > cpu_s

    assert wait_until(busy, 120), "the query never started"


def _interrupted(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 130, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr and "RuntimeError" not in r.stderr, r.stderr[-3000:]
    assert r.stderr.strip().splitlines()[-1] == "gpuaudit: interrupted", r.stderr


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleet") / "data"
    sim.simulate(root, "phantom", gpus=4, days=2, interval_s=900, seed=3)
    return root


def test_ctrl_c_during_sql_query_is_one_line_and_exit_130(fleet: Path, tmp_path: Path) -> None:
    """Defect: Ctrl-C during `gpuaudit sql` was ignored until the query ended (never, for range(10^13))."""
    out = tmp_path / "rows.csv"
    r = _interrupt(["sql", "--data", str(fleet), "--timeout", "0", "--format", "csv", "--out", str(out), ENDLESS],
                   tmp_path, hook=False)
    _interrupted(r)
    assert not out.exists() and not list(tmp_path.glob(".rows.csv*")), "a partial result file was left"


def test_ctrl_c_during_analyze_is_one_line_and_exit_130(fleet: Path, tmp_path: Path) -> None:
    """Defect: Ctrl-C during `analyze` printed `RuntimeError: Query interrupted` and exited 1."""
    _interrupted(_interrupt(["analyze", "--data", str(fleet)], tmp_path, hook=True))


def test_ctrl_c_during_report_writes_nothing(fleet: Path, tmp_path: Path) -> None:
    """Defect: Ctrl-C during `report` was a RuntimeError traceback; an interrupted report writes no file."""
    out = tmp_path / "report"
    _interrupted(_interrupt(["report", "--data", str(fleet), "--out", str(out)], tmp_path, hook=True))
    assert not out.exists() or not any(out.rglob("*")), sorted(out.rglob("*"))


def test_ctrl_c_during_demo_analysis_writes_no_report(tmp_path: Path) -> None:
    """Defect: Ctrl-C in the analysis half of `demo` was a traceback (the simulation half already said
    `gpuaudit: interrupted`)."""
    out = tmp_path / "demo"
    r = _interrupt(["demo", "--out", str(out), "--gpus", "2", "--days", "1", "--interval", "900"], tmp_path,
                   hook=True)
    _interrupted(r)
    assert (out / "data" / "simulation.json").is_file()  # the simulation half finished
    assert not [p.name for p in out.iterdir() if p.name != "data"], "report files written by an interrupted demo"


# --- a --data path component longer than a file name may be ------------------------------------------------
LONG = "x" * 300  # NAME_MAX is 255 bytes on Linux filesystems


@pytest.mark.parametrize(("command", "extra"), [
    (["analyze"], []), (["report"], ["--out", "{tmp}/r"]), (["sql"], ["SELECT 1"]), (["compact"], []),
    (["push"], ["--to", "{tmp}/t"]), (["simulate"], ["--gpus", "1", "--days", "0.01"]),
    (["agent", "status"], ["--simulate", "static"]),
], ids=lambda a: " ".join(a))
def test_data_path_component_too_long_is_one_line(command: list[str], extra: list[str], tmp_path: Path) -> None:
    """Defect: a --data path with a component over 255 bytes was `OSError: [Errno 36] File name too long` in a
    traceback (analyze, report, sql, compact, push, simulate, agent status)."""
    data = tmp_path / LONG / "data"
    r = run_cli(*command, "--data", str(data), *[a.replace("{tmp}", str(tmp_path)) for a in extra], timeout=120)
    line = one_error_line(r, "too long")
    assert "x" * 300 not in line or len(line) < 2000, line


# --- compact on a read-only data directory -------------------------------------------------------------------
def _two_file_partition(root: Path) -> None:
    sim.simulate(root, "phantom", gpus=1, days=0.1, interval_s=900, seed=1)
    sim.simulate(root / "more", "phantom", gpus=1, days=0.1, interval_s=900, seed=1)
    for f in (root / "more").rglob("*.parquet"):
        dest = root / f.relative_to(root / "more")
        dest = dest.with_name("second-" + dest.name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(f, dest)
    shutil.rmtree(root / "more")


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_compact_on_read_only_filesystem_is_one_line(tmp_path: Path) -> None:
    """Defect: `compact` on a read-only mount (EROFS) was `OSError: [Errno 30] Read-only file system` in a
    traceback. Runs in a private mount namespace with the data directory bind-mounted read-only."""
    if not shutil.which("unshare") or subprocess.run(
            ["unshare", "-rm", "sh", "-c", f"mount --bind {tmp_path} {tmp_path} && mount -o remount,bind,ro "
             f"{tmp_path} {tmp_path}"], capture_output=True).returncode:
        pytest.skip("needs `unshare -rm` and bind mounts (user namespaces)")
    root = tmp_path / "data"
    _two_file_partition(root)
    before = _snapshot(root)
    script = f'mount --bind "{root}" "{root}" && mount -o remount,bind,ro "{root}" && exec "$@"'
    r = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", sys.executable, "-m", "gpuaudit", "compact",
                        "--data", str(root)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    one_error_line(r, "Read-only file system", str(root))
    assert _snapshot(root) == before


def test_compact_on_unwritable_directory_is_one_line(tmp_path: Path) -> None:
    """Defect: `compact` where the data directory is not writable (EACCES) was `PermissionError` in a
    traceback. As root, the command runs without the capabilities that override file permissions."""
    root = tmp_path / "data"
    _two_file_partition(root)
    before = _snapshot(root)
    prefix: list[str] = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: permissions cannot be enforced")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        d.chmod(0o555)
    try:
        r = subprocess.run([*prefix, sys.executable, "-m", "gpuaudit", "compact", "--data", str(root)],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    finally:
        for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
            d.chmod(0o755)
    one_error_line(r, "Permission denied", str(root))
    assert _snapshot(root) == before
