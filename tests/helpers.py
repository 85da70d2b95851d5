"""Small helpers shared by tests (fixtures stay in each area's own test module)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuaudit import schema, store

REPO = Path(__file__).resolve().parents[1]

# Where simulated and imported test data begin: a Monday, so a day-of-week pattern starts on its first day.
START = datetime(2026, 9, 7, tzinfo=UTC)
# Where the series served by a test Prometheus begin (also a Monday): the import tests' windows name this date.
IMPORT_START = datetime(2026, 1, 5, tzinfo=UTC)

# (GPUs, days, interval_s) of each simulated scenario in the simulator's and the analysis' tests: small fleets at
# coarse intervals keep them fast, large and long enough for each scenario's truth to show (and a week at least,
# analysis.bootstrap_min_days, so the analysis claims its intervals).
SIZES: dict[str, tuple[int, int, int]] = {
    "phantom": (64, 14, 600),
    "idle-cluster": (128, 7, 900),
    "steady-training": (32, 7, 600),
    "bursty-agents": (256, 7, 900),
    "mixed": (128, 7, 900),
}



def scenario_dataset(factory: pytest.TempPathFactory, name: str) -> tuple[Path, Any]:
    """The scenario `name` at SIZES (seed 1, START) and its SimulationSummary: simulated once per test run and
    shared by every module and xdist worker that asks (the first builds it under a lock; the others wait and
    read it). Read-only for its users: only the rollup cache (a dot-directory no reader lists) is written."""
    import pickle

    from gpuaudit.sim import bulk as sim
    from gpuaudit.util import atomic, locks

    base = factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "scenarios"
    shared.mkdir(exist_ok=True)
    root, kept = shared / name, shared / f"{name}.summary.pickle"
    with locks.held(shared / f"{name}.lock") as held:
        assert held, f"cannot lock {shared / name}.lock"
        if not kept.exists():
            shutil.rmtree(root, ignore_errors=True)  # a worker killed half-way
            gpus, days, interval = SIZES[name]
            summary = sim.simulate(root, name, gpus, days, interval, seed=1, start=START)
            atomic.write_atomic(kept, pickle.dumps(summary))  # the mark that the dataset is whole
        return root, pickle.loads(kept.read_bytes())


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require_binary(name: str, how: str) -> str:
    """Path of `name`; skip the test when it is missing on a laptop, fail in CI (where .ci/run installs it)."""
    path = shutil.which(name)
    if path:
        return path
    message = f"{name} not found; {how}"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)
    raise AssertionError("unreachable")


def run_bin(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 300, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `gpuaudit ARGS` in a fresh interpreter exactly as a user would (the installed console script's
    module); `input_text` is its standard input. For what only a real process shows: its exit status as the
    shell sees it, signals, what child processes write to the inherited stderr, a fresh interpreter's imports."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "gpuaudit", *args],
        capture_output=True, text=True, env=full_env, cwd=cwd, timeout=timeout, input=input_text,
    )


# The warning filters of a fresh interpreter (Python's defaults): a command run in-process shows the warnings a
# user would see, not pytest's selection of them.
_DEFAULT_FILTERS: tuple[tuple[str, type[Warning]], ...] = (
    ("ignore", DeprecationWarning), ("ignore", PendingDeprecationWarning), ("ignore", ImportWarning),
    ("ignore", ResourceWarning),
)


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 300, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `gpuaudit ARGS` in this process through the console script's own entry (`gpuaudit.cli._usage.run`):
    the same parsing, error lines and exit status as `run_bin`, without starting an interpreter. The
    environment, working directory, standard streams, logging and warning state are the command's for the
    call and restored after it. `timeout` is accepted for run_bin's signature (nothing here can hang on a
    child). An exception that escapes is what the interpreter would do with it: a traceback, exit 1.

    `agent run` and `push --follow` always run in a fresh interpreter (run_bin): they install signal handlers,
    fork writers and start uploader children that write to the inherited stderr."""
    if args[:2] == ("agent", "run") or (args[:1] == ("push",) and "--follow" in args):
        return run_bin(*args, env=env, cwd=cwd, timeout=timeout, input_text=input_text)
    import io
    import logging
    import traceback
    import warnings

    from gpuaudit.cli import app
    from gpuaudit.cli._usage import run

    class Kept(io.BytesIO):
        def close(self) -> None:  # a command may close its stderr (a broken pipe): what it wrote is kept
            pass

    out, err = Kept(), Kept()
    streams = (sys.stdin, sys.stdout, sys.stderr, sys.argv)
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    root, ours = logging.getLogger(), logging.getLogger("gpuaudit")
    saved_logging = (root.handlers[:], root.level, ours.handlers[:], ours.level, ours.propagate)
    sys.stdin = io.TextIOWrapper(io.BytesIO((input_text or "").encode()), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    sys.stderr = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True)
    sys.argv = ["gpuaudit", *args]
    os.environ.update(env or {})
    code = 0
    try:
        if cwd is not None:
            os.chdir(cwd)
        with warnings.catch_warnings():
            warnings.resetwarnings()
            for action, category in _DEFAULT_FILTERS:
                warnings.simplefilter(action, category)  # type: ignore[arg-type]
            try:
                code = run(app)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if e.code is not None and not isinstance(e.code, int):
                    print(e.code, file=sys.stderr)
            except Exception:
                traceback.print_exc()
                code = 1
            finally:
                logging.captureWarnings(False)
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(ValueError):  # closed by the command
                stream.flush()
        stdout, stderr = out.getvalue().decode("utf-8", "replace"), err.getvalue().decode("utf-8", "replace")
        sys.stdin, sys.stdout, sys.stderr, sys.argv = streams
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        root.handlers[:], ours.handlers[:] = saved_logging[0], saved_logging[2]
        root.setLevel(saved_logging[1])
        ours.setLevel(saved_logging[3])
        ours.propagate = saved_logging[4]
    return subprocess.CompletedProcess(["gpuaudit", *args], code, stdout, stderr)


def wait_until(condition: Callable[[], object], timeout_s: float = 60.0, poll_s: float = 0.05) -> bool:
    """Poll `condition` until it holds (True) or `timeout_s` passes (False). For a state another process or
    thread reaches: the timeout is generous, a failure on a loaded machine only ever waits longer."""
    import time

    deadline = time.monotonic() + timeout_s
    pace = threading.Event()
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        pace.wait(poll_s)  # pacing the polls, not a wait for the result


UNIT_BINARY = "/opt/gpuaudit/bin/gpuaudit"  # the console script the systemd units run (agents/README.md's venv)


def systemd_verify(units: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` on unit files given as {file name: text}, with ExecStart pointed at this
    checkout's console script (verify checks that the binary exists)."""
    systemd_analyze = require_binary("systemd-analyze", "install systemd (apt-get install systemd)")
    candidates = [REPO / ".venv" / "bin" / "gpuaudit", Path(sys.executable).parent / "gpuaudit",
                  Path(shutil.which("gpuaudit") or "/nonexistent")]
    binary = next((c for c in candidates if c.exists()), None)
    if binary is None:
        pytest.skip("no gpuaudit console script to point ExecStart at (run `make test` to create the venv)")
    copies = []
    for name, text in units.items():
        copy = tmp_path / name
        copy.write_text(text.replace(UNIT_BINARY, str(binary)))
        copies.append(str(copy))
    return subprocess.run([systemd_analyze, "verify", *copies], capture_output=True, text=True, timeout=60)


@contextlib.contextmanager
def serving(server: Any) -> Iterator[Any]:
    """Run a socketserver-style `server` (http.server's) in a daemon thread for the block, then shut it down."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def one_error_line(r: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The single `gpuaudit: error: ...` line a refused command prints (exit 2, no traceback, nothing else on
    stderr), holding every needle."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and not re.search(r"^\w+(Error|Exception)\b", r.stderr, re.M), r.stderr
    line, = r.stderr.strip().splitlines()
    assert line.startswith("gpuaudit: error: "), line
    for needle in needles:
        assert needle in line, line
    return line


NASTY = "\x1b[31mred\x1b[0m\r\bover\x00nul\u202eevil\x1b]0;title\x07\x9b"


def _nasty_dataset(root: Path, n: int = 120) -> None:
    """One GPU on a host whose name, GPU name, user, job and pod carry escape sequences, bidi overrides..."""
    t0 = datetime(2026, 3, 2, tzinfo=UTC)
    ts = [t0 + timedelta(minutes=i + 1) for i in range(n)]
    host = f"node-{NASTY}"
    samples = {
        "ts": ts, "interval_s": [60.0] * n, "host": [host] * n, "gpu_uuid": [f"GPU-{NASTY}"] * n,
        "gpu_index": [0] * n, "gpu_name": [f"H100 {NASTY}"] * n, "gpu_fraction": [1.0] * n,
        "sm_active": [0.5 if i % 2 else 0.0 for i in range(n)], "duty_cycle": [0.9 if i % 2 else 0.0 for i in range(n)],
        "n_processes": [1 if i % 2 else 0 for i in range(n)], "power_w": [300.0] * n,
        "source": [schema.SOURCE_SIMULATED] * n,
    }
    busy = [t for i, t in enumerate(ts) if i % 2]
    processes = {
        "ts": busy, "host": [host] * len(busy), "gpu_uuid": [f"GPU-{NASTY}"] * len(busy), "pid": [7] * len(busy),
        "user": [f"mallory{NASTY}"] * len(busy), "job_id": [f"job{NASTY}"] * len(busy),
        "k8s_pod": [f"pod{NASTY}"] * len(busy), "command": [f"python {NASTY}"] * len(busy),
    }
    store.write_table(root, schema.SAMPLES, samples)
    store.write_table(root, schema.PROCESSES, processes)
