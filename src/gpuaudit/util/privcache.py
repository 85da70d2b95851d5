"""This user's private cache directories (`$XDG_CACHE_HOME/gpuaudit/<name>/`, util.paths.user_cache_dir): the
one owner of the rules under which a cached file is trusted. The chart cache keeps markup pasted into
report.html and the stage-2 memo keeps pickles: whoever can write an entry could put script into a report or
run code, so an entry is used only from a directory and a file owned by this user and writable by no one else,
below directories that only this user or root can change (or sticky ones): a shared or planted cache is
neither read nor written, and no part of its path can be swapped between a check and a use. Files are opened
without following a link or waiting on a FIFO. A cache that cannot be used or written costs only the work it
would have saved."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from gpuaudit.util import atomic, paths

log = logging.getLogger("gpuaudit")


def _trusted(st: os.stat_result) -> bool:
    """Owned by this user and writable by no one else."""
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _safe_ancestor(st: os.stat_result) -> bool:
    """A directory above the cache that no one but this user and root can rename things in (or one with the
    sticky bit, /tmp's, where only an entry's owner can)."""
    if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (0, os.geteuid()):
        return False
    return not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or bool(st.st_mode & stat.S_ISVTX)


def _makedirs(d: Path) -> None:
    """`d` and any missing directory above it, each created 0o700 (mkdir's parents would take the umask's
    mode: a group-writable parent lets the group swap the cache for its own)."""
    missing = []
    while not d.exists():
        missing.append(d)
        d = d.parent
    for p in reversed(missing):
        with contextlib.suppress(FileExistsError):
            p.mkdir(mode=0o700)


class PrivateCache:
    """Entries `<key><suffix>` in `$XDG_CACHE_HOME/gpuaudit/<name>/`, at most `max_bytes` each."""

    def __init__(self, name: str, suffix: str, max_bytes: int) -> None:
        self.name, self.suffix, self.max_bytes = name, suffix, max_bytes

    def directory(self) -> Path:
        return paths.user_cache_dir() / self.name

    def usable_dir(self, create: bool) -> Path | None:
        """The directory, resolved, where it and every directory above it are safe: then nobody else can
        rename, replace or redirect any part of the paths used below between a check and a use."""
        try:
            if create:
                _makedirs(self.directory())
            d = self.directory().resolve(strict=True)
            st = os.lstat(d)
            chain = [os.lstat(p) for p in d.parents]
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode) or not _trusted(st) or not all(map(_safe_ancestor, chain)):
            log.debug("cache %s is not this user's alone: not used", d)
            return None
        return d

    def read(self, d: Path, key: str) -> bytes | None:
        """Entry `key`'s bytes from the usable directory `d`, or None (none, not ours, too large)."""
        try:  # never through a link; never blocked by a FIFO planted under the name
            fd = os.open(d / f"{key}{self.suffix}", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not _trusted(st) or st.st_size > self.max_bytes:
                return None
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read(self.max_bytes + 1)
            if len(data) > self.max_bytes:
                return None
            with contextlib.suppress(OSError):
                os.utime(fd)  # recently used: kept by the pruning
            return data
        except OSError:
            return None
        finally:
            os.close(fd)

    def save(self, items: Sequence[tuple[str, atomic.Data]], keep: int) -> None:
        """Keep each (key, content); then only the `keep` most recently used entries."""
        if not items:
            return
        d = self.usable_dir(create=True)
        if d is None:
            return
        try:
            for k, content in items:
                atomic.write_atomic(d / f"{k}{self.suffix}", content, mode=0o600)
            self._prune(d, keep)
        except OSError as e:  # a full disk: the next run does the work again
            log.debug("cache %s not written: %s", d, e)

    def _prune(self, d: Path, keep: int) -> None:
        entries = []
        for p in d.glob(f"*{self.suffix}"):
            with contextlib.suppress(OSError):
                entries.append((os.lstat(p).st_mtime_ns, p))
        entries.sort(reverse=True)
        for _, p in entries[keep:]:
            with contextlib.suppress(OSError):
                p.unlink()
