"""Small helpers shared by tests (fixtures stay in each area's own test module)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuaudit import schema, store

REPO = Path(__file__).resolve().parents[1]


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


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 300, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `gpuaudit ARGS` in a subprocess exactly as a user would (the installed console script's module);
    `input_text` is its standard input."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "gpuaudit", *args],
        capture_output=True, text=True, env=full_env, cwd=cwd, timeout=timeout, input=input_text,
    )


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
    """The single `gpuaudit: error: ...` line a refused command prints (exit 2, no traceback)."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
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
