"""Atomic publication, the one owner: write to a staging name, fsync, rename into place, fsync the directory.
A reader or a crash sees the whole file or none of it.

Two ways in: `write_atomic(final, data)` does all of it for one file beside its destination; `stage` +
`replace` split it for a caller that must stage several files before renaming any (a report), or do
something to the staged file first (push gives it to the target's owner). `publish` renames a file staged
elsewhere (a dataset's staging directory) that a writer other than `stage` produced (DuckDB's COPY).
`publish_all` renames several staged files into place all or none (a report's files, an import's partitions):
a failure on the way puts back every file it replaced and removes every file it added."""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

log = logging.getLogger("gpuaudit")

# New files are created as any new file is: 0o666 less the umask (as DuckDB writes the dataset's files).
_FILE_MODE = 0o666

Data = bytes | str | Callable[[BinaryIO], Any]  # the bytes, text (UTF-8), or a function that writes them


def fsync(path: Path) -> None:
    """fsync a file or a directory (a rename is durable only once its directory is synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_name(final: Path) -> Path:
    """The staging name beside `final`: `.<name>.<8 hex>.tmp`, a dot-name that no reader (ours, DuckDB or
    polars globs of *.parquet) ever lists, and that push recognizes as a killed writer's leftover."""
    return final.parent / f".{final.name}.{uuid.uuid4().hex[:8]}.tmp"


def write_synced(path: Path, data: Data, *, mode: int = _FILE_MODE) -> None:
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


def stage(final: Path, data: Data, *, mode: int = _FILE_MODE) -> Path:
    """`data` written and fsynced under a temporary name beside `final` (see `temp_name`); returns that name.
    The caller renames it with `replace`, or removes it."""
    tmp = _temp_name(final)
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


def write_atomic(final: Path, data: Data, *, mode: int = _FILE_MODE,
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


def publish_all(staged: Sequence[tuple[Path, Path]], *, remove: Iterable[Path] = (), aside: Path | None = None) -> None:
    """Rename each synced (staged, final) pair into place, in order, then remove the `remove` files: all of it or
    none. The previous version of every touched file is kept aside meanwhile (a hard link, so it never leaves
    view; moved where the filesystem has no links), in `aside` (a directory on the same filesystem) or beside
    it under a dot-name (temp_name). If a rename or a removal fails, every file done so far is put back as it
    was (a replaced one restored, an added one removed), then the error is raised: a reader may have seen the
    new files for that moment, but nothing partial is left. Renames and links need no free space. The
    directories are fsynced once all of it has succeeded."""
    done: list[tuple[Path, Path | None]] = []  # (final, its previous version aside, or None: it is new)
    n = 0

    def aside_name(final: Path) -> Path:
        nonlocal n
        n += 1
        return aside / f"{n}{final.suffix}" if aside is not None else _temp_name(final)

    try:
        for tmp, final in staged:
            final.parent.mkdir(parents=True, exist_ok=True)
            done.append((final, _set_aside(final, aside_name(final))))
            os.replace(tmp, final)
        for final in remove:
            if final.exists():
                moved = aside_name(final)
                os.replace(final, moved)
                done.append((final, moved))
    except OSError:
        _restore(done)
        raise
    for _, previous in done:
        if previous is not None:
            with contextlib.suppress(OSError):
                previous.unlink(missing_ok=True)
    for d in sorted({final.parent for final, _ in done}):  # the renames are durable once their directories are
        with contextlib.suppress(OSError):  # synced; all of it is in place already: nothing to undo for this
            fsync(d)


def _set_aside(final: Path, previous: Path) -> Path | None:
    """Keep `final`'s current version at `previous` without removing it from view (a hard link); where the
    filesystem has no hard links, move it (out of view until the new version lands). None: there is none."""
    if not final.exists():
        return None
    try:
        os.link(final, previous)
    except OSError:
        os.replace(final, previous)
    return previous


def _restore(done: list[tuple[Path, Path | None]]) -> None:
    """Put every file `publish_all` touched back as it was, the last first."""
    for final, previous in reversed(done):
        try:
            if previous is not None:
                os.replace(previous, final)
                # Still there when final was never replaced: renaming a hard link over its twin does nothing.
                previous.unlink(missing_ok=True)
            else:
                final.unlink(missing_ok=True)
        except OSError as e:  # cannot happen short of the disk going away; say what is left where
            log.error("could not restore %s from %s: %s", final, previous, e)
