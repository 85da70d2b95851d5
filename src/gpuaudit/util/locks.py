"""File locks, the one owner: advisory flocks on a lock file, shared or exclusive, taken at once, by a deadline
or by waiting. The kernel drops an flock when its holder exits, however it exits, so nothing stale is ever left
to clean up; the lock file itself stays (removing it would let two holders lock two different files).

Who locks what: the agent (one per data directory and host, agent/instance.py), `push` (one per target,
push/manifest.py), compaction and imports (store/compact.py), readers and publishing writers (store/readers.py)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

POLL_S = 0.05  # between tries while waiting for a deadline: a lock is held for a flush or a publish at most

WAIT = None  # wait_s meaning "until granted"


def open_file(path: Path, *, create: bool = True, mode: int = 0o666) -> int | None:
    """A descriptor to lock `path` through: created when `create` and possible, else opened read-only (another
    user's lock file takes an flock all the same); None when it cannot be opened (absent, a read-only dataset)."""
    if create:
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
        except OSError:
            pass
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def take(fd: int, *, shared: bool = False, wait_s: float | None = 0.0, poll_s: float = POLL_S,
         sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> bool:
    """Lock `fd`: `wait_s` None waits until granted, 0 tries once, more polls until that many seconds have passed.
    True when held, False when another holder kept it past the deadline. An fd that cannot be locked at all
    (a filesystem without lock support: ENOLCK) raises OSError."""
    kind = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    if wait_s is None:
        fcntl.flock(fd, kind)
        return True
    deadline = clock() + wait_s
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if clock() >= deadline:
                return False
            sleep(poll_s)


def close(fd: int | None) -> None:
    """Release a lock by closing its descriptor (None: nothing held)."""
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


@contextlib.contextmanager
def held(path: Path, *, shared: bool = False, wait_s: float | None = WAIT, create: bool = True) -> Iterator[bool]:
    """Hold the lock on `path` for the block; yields whether it is held (False: busy past `wait_s`, or the file
    could not be opened or locked: the caller decides whether to go on unprotected)."""
    fd = open_file(path, create=create)
    if fd is None:
        yield False
        return
    try:
        try:
            ok = take(fd, shared=shared, wait_s=wait_s)
        except OSError:
            ok = False
        yield ok
    finally:
        close(fd)
