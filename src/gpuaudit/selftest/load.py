"""The load process: the selftest's calibrated load runs in a process of its own (`python -m gpuaudit.selftest`),
spoken to in JSON lines, so that the agent has to find and attribute a pid that is not the selftest's own, and
a Ctrl-C, a SIGTERM or a dead parent ends the load at once (the driver tears the context down with the
process, a running kernel included).

Child side: `child_main` (commands on stdin: run k d, idle, exit; events on stdout: ready, running, idle,
error). Parent side: `LoadProcess`. The `simulated` backend runs no kernel and only follows the protocol (the
fake NVML produces the figures, see selftest/simulated.py).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import pwd
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuaudit.errors import GpuauditError
from gpuaudit.selftest.driver import load_library
from gpuaudit.selftest.kernel import THREADS_PER_BLOCK, SpinKernel, build_kernel, run_pattern

_MODULE = "gpuaudit.selftest"  # what `python -m` runs: the package's __main__, this module's child_main


def identity() -> dict[str, Any]:
    """Who this process is, as the agent should attribute it: pid, user, cgroup."""
    uid = os.getuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    try:
        cgroup = Path("/proc/self/cgroup").read_text()
    except OSError:
        cgroup = ""
    return {"pid": os.getpid(), "uid": uid, "user": user, "cgroup": cgroup}


class _Commands:
    """Newline-delimited JSON commands on stdin, read with a timeout (os.read: no hidden buffering)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf, self.eof = fd, b"", False

    def ready(self, timeout: float | None) -> bool:
        if b"\n" in self.buf or self.eof:
            return True
        r, _, _ = select.select([self.fd], [], [], timeout)
        if r:
            chunk = os.read(self.fd, 4096)
            self.buf += chunk
            self.eof = not chunk
        return b"\n" in self.buf or self.eof

    def next(self) -> dict[str, Any] | None:
        while not self.ready(None):
            pass
        if b"\n" not in self.buf:
            return None  # EOF: the parent is gone
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line) if line.strip() else {}


def _emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the parent dies (a kill -9 of the selftest ends the load too)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def child_main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {_MODULE}")
    ap.add_argument("--backend", choices=("auto", "driver", "torch", "simulated"), default="auto")
    ap.add_argument("--period-s", type=float, default=0.1)
    ap.add_argument("--sm-count", type=int, default=132, help="simulated backend: the SMs it reports")
    ap.add_argument("--expect-uuid", default=None, help="refuse when CUDA device 0 is another GPU")
    ap.add_argument("--fail", choices=("no-libcuda",), default=None, help="simulated backend: fail like this")
    args = ap.parse_args(argv)
    # Ctrl-C reaches the whole process group: end now; the driver frees the context and stops the kernel.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: os._exit(128 + signum))
    _die_with_parent()
    kernel: SpinKernel | None = None
    try:
        if args.backend == "simulated":
            if args.fail == "no-libcuda":  # the real loader, asked for a library that is not there
                load_library(("libcuda-gpuaudit-simulated-missing.so.1",))
            info: dict[str, Any] = {"name": "simulated", "sm_count": args.sm_count, "blocks_per_sm": 1,
                                    "threads_per_block": THREADS_PER_BLOCK, "max_threads_per_sm": 2048,
                                    "cuda_uuid": args.expect_uuid}
            backend = "simulated"
        else:
            kernel, backend = build_kernel(args.backend)
            info = kernel.describe()
            if args.expect_uuid and args.expect_uuid.startswith("GPU-") and kernel.uuid != args.expect_uuid:
                raise GpuauditError(f"CUDA device 0 is {kernel.uuid}, not the GPU asked for ({args.expect_uuid})")
    except GpuauditError as e:
        _emit("error", message=str(e))
        return 2
    _emit("ready", backend=backend, period_s=args.period_s, **info, **identity())
    commands = _Commands(sys.stdin.fileno())
    try:
        while (cmd := commands.next()) is not None:
            op = cmd.get("cmd")
            if op == "run":
                k, d = int(cmd["k"]), float(cmd["d"])
                _emit("running", k=k, d=d)
                if kernel is not None:
                    run_pattern(kernel, k, d, args.period_s, commands.ready)
            elif op == "idle":
                _emit("idle")
            elif op == "exit":
                break
    except (GpuauditError, ValueError, KeyError) as e:
        _emit("error", message=str(e))
        return 2
    finally:
        if kernel is not None:
            kernel.close()
    return 0


class LoadProcess:
    """The parent's handle on the load process: start it, wait for it to be ready, tell it what to run."""

    def __init__(self, backend: str, *, cuda_device: str | None, period_s: float = 0.1,
                 extra_args: Sequence[str] = (), ready_timeout_s: float = 120.0) -> None:
        env = dict(os.environ)
        if cuda_device:  # the GPU by UUID (GPU-... or MIG-...): CUDA's ordinal 0 is then that GPU
            env["CUDA_VISIBLE_DEVICES"] = cuda_device
        argv = [sys.executable, "-m", _MODULE, "--backend", backend, "--period-s", str(period_s),
                *(["--expect-uuid", cuda_device] if cuda_device else []), *extra_args]
        # stderr to a file, not a pipe nobody reads while the load runs (a full pipe would block it)
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in kill(), it outlives this call)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     env=env)
        self._buf = b""
        self.info: dict[str, Any] = {}
        try:
            self.info = self._expect("ready", ready_timeout_s)
        except BaseException:
            self.kill()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _line(self, timeout_s: float) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise GpuauditError(f"the load process (pid {self.pid}) did not answer within {timeout_s:g} s")
            r, _, _ = select.select([fd], [], [], left)
            if r:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def _expect(self, event: str, timeout_s: float = 30.0) -> dict[str, Any]:
        msg = self._line(timeout_s)
        if msg is None:
            self.proc.wait(timeout=5)
            self._stderr.seek(0)
            err = self._stderr.read().decode("utf-8", "replace").strip()
            last = err.splitlines()[-1] if err else "no message"
            raise GpuauditError(f"the load process exited with status {self.proc.returncode}: {last}")
        if msg.get("event") == "error":
            raise GpuauditError(str(msg.get("message")))
        if msg.get("event") != event:
            raise GpuauditError(f"the load process answered {msg.get('event')!r}, expected {event!r}")
        return msg

    def _send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise GpuauditError(f"the load process (pid {self.pid}) is gone") from None

    def run(self, k: int, d: float) -> None:
        self._send(cmd="run", k=k, d=d)
        self._expect("running")

    def idle(self) -> None:
        self._send(cmd="idle")
        self._expect("idle")

    def kill(self) -> None:
        """Stop the load now (SIGKILL: the driver ends its kernel with the process)."""
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for f in (self.proc.stdin, self.proc.stdout, self._stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()

    def close(self) -> None:
        """Ask the load to exit (its context is released cleanly), kill it if it does not."""
        if self.proc.poll() is None:
            with contextlib.suppress(GpuauditError, OSError):
                self._send(cmd="exit")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        self.kill()
