"""util/locks.py: the one flock owner every locker uses (agent, push, compaction, readers and publishers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpuaudit.util import locks

HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_SH if sys.argv[2] == "shared" else fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def _holder(path: Path, kind: str) -> subprocess.Popen[str]:
    """Another process holding the lock until its stdin closes (flocks of one process never conflict)."""
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), kind], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def _release(p: subprocess.Popen[str]) -> None:
    assert p.stdin is not None
    p.stdin.close()
    p.wait(timeout=60)


def test_an_exclusive_lock_is_refused_while_another_process_holds_it_and_granted_after(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    other = _holder(path, "exclusive")
    fd = locks.open_file(path)
    assert fd is not None
    try:
        assert locks.take(fd, wait_s=0.0) is False
        assert locks.take(fd, shared=True, wait_s=0.0) is False
        _release(other)
        assert locks.take(fd, wait_s=0.0) is True
    finally:
        locks.close(fd)


def test_shared_locks_coexist_and_keep_a_writer_out(tmp_path: Path) -> None:
    path = tmp_path / "r.lock"
    other = _holder(path, "shared")
    try:
        with locks.held(path, shared=True, wait_s=0.0) as ok:
            assert ok
        with locks.held(path, wait_s=0.0) as ok:
            assert not ok
    finally:
        _release(other)
    with locks.held(path, wait_s=0.0) as ok:
        assert ok


def test_a_deadline_polls_on_the_given_clock_until_it_passes(tmp_path: Path) -> None:
    """The deadline is counted on the injected clock, never by the machine's speed: five polls of 0.1 s."""
    path = tmp_path / "d.lock"
    other = _holder(path, "exclusive")
    now = [0.0]
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        now[0] += s

    fd = locks.open_file(path)
    assert fd is not None
    try:
        assert locks.take(fd, wait_s=0.5, poll_s=0.1, sleep=sleep, clock=lambda: now[0]) is False
        assert len(sleeps) == 5 and now[0] >= 0.5
    finally:
        locks.close(fd)
        _release(other)


def test_a_lock_file_that_cannot_be_opened_is_reported_as_not_held(tmp_path: Path) -> None:
    missing = tmp_path / "absent" / "x.lock"
    assert locks.open_file(missing) is None
    with locks.held(missing) as ok:
        assert ok is False
    assert locks.open_file(tmp_path / "none.lock", create=False) is None


def test_a_read_only_lock_file_still_takes_a_lock(tmp_path: Path) -> None:
    """Another user's lock file (not writable here) is opened read-only: an flock needs no write access."""
    path = tmp_path / "ro.lock"
    path.touch()
    path.chmod(0o444)
    fd = locks.open_file(path, create=False)
    assert fd is not None
    try:
        assert os.fstat(fd).st_size == 0
        assert locks.take(fd, shared=True, wait_s=0.0)
    finally:
        locks.close(fd)
