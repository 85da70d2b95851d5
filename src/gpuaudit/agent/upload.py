"""`agent run --upload URL`: ship each flush to a collection target without ever blocking sampling.

The upload runs in a child process, `gpuaudit push --follow`, started at the first flush and told about each
later one by a line on its stdin (a non-blocking one-byte write: sampling never waits for the network). Why a
child: S3 support (s3fs, botocore) costs ~40 MB of RSS (measured: uploader 48 MB for a directory target, 85 MB
for S3; agent 53 MB either way) that the long-lived agent does not have to carry, a hung network call cannot
stall the sampler, and a crash of the uploader cannot take the agent down. The child
pushes at each line and once more when the pipe closes (the agent stopped, or died), then exits; it ignores
SIGTERM/SIGINT sent to the whole group so that the agent's last flush still goes out. What it confirmed is
in its manifest (gpuaudit.push), so a restart of either resumes without sending anything twice; each push
also lists the target, so a target wiped or recreated meanwhile is filled again. A round that finds another
push running (e.g. one from cron) is skipped, not counted as a failure; the last one waits for it a while. A
child that exits early is restarted at a later flush, backing off (doubling up to 5 minutes).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gpuaudit.agent.log import event

_RESTART_MIN_S = 1.0
_RESTART_MAX_S = 300.0
_FINAL_WAIT_S = 20.0  # at exit, how long the agent waits for the last push (systemd's stop timeout is 90 s)


class Uploader:
    def __init__(self, root: Path, url: str, *, endpoint_url: str | None = None, delete_after_upload: bool = False,
                 verbose: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.argv = [sys.executable, "-m", "gpuaudit", "push", "--follow", "--data", str(root), "--to", url]
        if endpoint_url:
            self.argv += ["--endpoint-url", endpoint_url]
        if delete_after_upload:
            self.argv.append("--delete-after-upload")
        if verbose:
            self.argv.append("--verbose")
        self.url = url
        self.clock = clock
        self.proc: subprocess.Popen[bytes] | None = None
        self.failures = 0
        self.restart_at = 0.0

    def notify(self) -> None:
        """A flush happened: have the child push (start or restart it first when needed). Never blocks."""
        if self.proc is not None and self.proc.poll() is not None:
            self.failures += 1
            delay = min(_RESTART_MIN_S * 2 ** (self.failures - 1), _RESTART_MAX_S)
            self.restart_at = self.clock() + delay
            event("upload_exited", logging.WARNING, code=self.proc.returncode, restart_in_s=delay, to=self.url)
            self.proc = None
        if self.proc is None:
            if self.clock() < self.restart_at:
                return
            try:
                # Own session: a terminal's Ctrl-C reaches the agent only; the child stops when its stdin closes.
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                             start_new_session=True)
            except OSError as e:
                self.failures += 1
                self.restart_at = self.clock() + min(_RESTART_MIN_S * 2 ** (self.failures - 1), _RESTART_MAX_S)
                event("upload_start_failed", logging.WARNING, error=e, to=self.url)
                return
            assert self.proc.stdin is not None
            os.set_blocking(self.proc.stdin.fileno(), False)
            event("upload_started", pid=self.proc.pid, to=self.url)
        assert self.proc.stdin is not None
        # A full pipe means the child already has a push pending, which will include this flush.
        with contextlib.suppress(BlockingIOError, BrokenPipeError):
            os.write(self.proc.stdin.fileno(), b"\n")

    def close(self, wait_s: float = _FINAL_WAIT_S) -> None:
        """The agent stops: close the pipe (the child makes its last push and exits) and wait for it a while."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            # Left running: it finishes the push on its own (or a service manager stops it); a restart resumes.
            event("upload_pending", logging.WARNING, pid=proc.pid, waited_s=wait_s, to=self.url)


def check_target(root: Path, url: str) -> None:
    """Refuse an --upload target that cannot work, at start rather than at the first flush."""
    from gpuaudit.errors import GpuauditError
    from gpuaudit.util.paths import as_url, collection_target, expand_user

    url = collection_target(url, "--upload")  # a malformed URL or an unknown user's `~`: refused here
    if as_url(url):
        import importlib.util

        if importlib.util.find_spec("s3fs") is None:  # not imported here: the agent stays small
            raise GpuauditError(f"--upload {url}: S3 support is not installed: pip install 'gpuaudit[s3]'")
    elif Path(url).resolve() == expand_user(root, "--data").resolve():
        raise GpuauditError("--upload must name another place than --data")
