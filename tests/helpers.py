"""Small helpers shared by tests (fixtures stay in each area's own test module)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
