"""Atomic publication, the one owner: write to a staging name, fsync, rename into place, fsync the directory.
A reader or a crash sees the whole file or none of it.

Two ways in: `write_atomic(final, data)` does all of it for one file beside its destination; `stage` +
`replace` split it for a caller that must stage several files before renaming any (a report), or do
something to the staged file first (push gives it to the target's owner). `publish` renames a file staged
elsewhere (a dataset's staging directory) that a writer other than `stage` produced (DuckDB's COPY)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

# New files are created as any new file is: 0o666 less the umask (as DuckDB writes the dataset's files).
FILE_MODE = 0o666

Data = bytes | str | Callable[[BinaryIO], Any]  # the bytes, text (UTF-8), or a function that writes them


def fsync(path: Path) -> None:
    """fsync a file or a directory (a rename is durable only once its directory is synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(final: Path) -> Path:
    """The staging name beside `final`: `.<name>.<8 hex>.tmp`, a dot-name that no reader (ours, DuckDB or
    polars globs of *.parquet) ever lists, and that push recognizes as a killed writer's leftover."""
    return final.parent / f".{final.name}.{uuid.uuid4().hex[:8]}.tmp"


def write_synced(path: Path, data: Data, *, mode: int = FILE_MODE) -> None:
    """Create `path` (never through someone's symlink: O_EXCL), write `data`, fsync it; on any failure the
    partial file is removed again. `mode` is less the umask, as for any new file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):  # never hide the error that got here
            path.unlink(missing_ok=True)
        raise


def stage(final: Path, data: Data, *, mode: int = FILE_MODE) -> Path:
    """`data` written and fsynced under a temporary name beside `final` (see `temp_name`); returns that name.
    The caller renames it with `replace`, or removes it."""
    tmp = temp_name(final)
    write_synced(tmp, data, mode=mode)
    return tmp


def replace(staged: Path, final: Path) -> None:
    """Rename the synced `staged` over `final` and fsync the directory (renames need no free space)."""
    os.replace(staged, final)
    fsync(final.parent)


def publish(staged: Path, final: Path) -> None:
    """fsync the staged file, rename it into place, fsync the directory: the file appears whole or not at all."""
    fsync(staged)
    final.parent.mkdir(parents=True, exist_ok=True)
    replace(staged, final)


def write_atomic(final: Path, data: Data, *, mode: int = FILE_MODE,
                 before_replace: Callable[[Path], Any] | None = None) -> None:
    """Write `final` whole or not at all: staged beside it, synced, renamed over it, its directory synced.
    A full disk or a kill never leaves a partial file nor clobbers the previous one. `before_replace(staged)`
    runs on the staged file just before the rename (a chown)."""
    tmp = stage(final, data, mode=mode)
    try:
        if before_replace is not None:
            before_replace(tmp)
        replace(tmp, final)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)  # only if not renamed
