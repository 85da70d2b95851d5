"""Drawn charts kept for the next report: a re-run whose chart shows the same data (another price leaves the
utilization, the ledger and the heatmap as they were; an unchanged dataset leaves every chart) reads the SVG
instead of drawing it again. About 80 ms of matplotlib per drawing, 20 drawings: most of a small report.

An optimisation, never a source of truth: the drawings are deterministic (charts._STYLE's hash salt, no date),
so an entry is the bytes a drawing would give, and deleting the cache changes nothing but the time. The key is
the SHA-256 of the spec's repr (frozen data: numbers, labels, thresholds; repr keeps every float exactly),
the width, and the drawing code: charts.py, the chart model and the text-safety module it uses, and matplotlib's
and numpy's versions (charts._figure draws on matplotlib's defaults, whatever a matplotlibrc says).

Where: `$XDG_CACHE_HOME/gpuaudit/charts/` (util.paths.user_cache_dir), this user's own cache and never the
dataset's directory: an entry is pasted into report.html as markup, so whoever can write an entry can put
script into the report. An entry is used only from a directory and a file owned by this user and writable by
no one else, below directories that only this user or root can change (or sticky ones): a shared or planted
cache is neither read nor written, and no part of its path can be swapped between a check and a use. Files are
opened without following a link or waiting on a FIFO. A cache that cannot be used or written costs only the
drawing. KEEP entries stay (the newest used)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from gpuaudit.report.model import ChartSpec
from gpuaudit.util import atomic, paths

log = logging.getLogger("gpuaudit.report")

_VERSION = 1
SUFFIX = ".svg"
KEEP = 400  # entries (about 40 KiB each): every chart of a few dozen reports
_MAX_BYTES = 8 << 20  # no drawing comes near this; a larger file is not ours

Job = tuple[ChartSpec, bool]  # the spec, and whether it is drawn for a phone's width


def cache_dir() -> Path:
    return paths.user_cache_dir() / "charts"


def _code_digest() -> str | None:
    """The drawing code's identity (read as files: importing matplotlib to ask would cost what a hit saves); None
    where it cannot be read (an install without sources): no cache."""
    from importlib import metadata, resources

    h = hashlib.sha256(f"v{_VERSION}".encode())
    pkg = resources.files("gpuaudit")
    try:
        for rel in ("report/charts.py", "report/model.py", "util/textsafe.py"):
            h.update(rel.encode() + b"\0" + pkg.joinpath(rel).read_bytes())
    except OSError:
        return None
    for dist in ("matplotlib", "numpy"):
        try:
            h.update(f"{dist} {metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:  # no drawing possible either: the draw reports it
            h.update(f"no {dist}".encode())
    return h.hexdigest()


def keys(jobs: Sequence[Job]) -> list[str] | None:
    code = _code_digest()
    if code is None:
        return None
    return [hashlib.sha256(f"{code}\0{narrow}\0{spec!r}".encode()).hexdigest() for spec, narrow in jobs]


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


def _usable_dir(create: bool) -> Path | None:
    """The cache directory, resolved, where it and every directory above it are safe: then nobody else can
    rename, replace or redirect any part of the paths used below between a check and a use."""
    try:
        if create:
            _makedirs(cache_dir())
        d = cache_dir().resolve(strict=True)
        st = os.lstat(d)
        chain = [os.lstat(p) for p in d.parents]
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or not _trusted(st) or not all(map(_safe_ancestor, chain)):
        log.debug("chart cache %s is not this user's alone: not used", d)
        return None
    return d


def _read(path: Path) -> str | None:
    try:  # never through a link; never blocked by a FIFO planted under the name
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _trusted(st) or st.st_size > _MAX_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            text = f.read(_MAX_BYTES + 1).decode("utf-8")
        if not text.startswith("<?xml") or "</svg>" not in text[-64:]:  # torn or foreign: drawn again
            return None
        with contextlib.suppress(OSError):
            os.utime(fd)  # recently used: kept by the pruning
        return text
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def load(jobs: Sequence[Job]) -> tuple[list[str] | None, list[str | None]]:
    """Each job's key (None: no cache, the drawing code cannot be identified), and its cached SVG (None where
    there is none to use)."""
    ks = keys(jobs)
    d = _usable_dir(create=False) if ks is not None else None
    if ks is None or d is None:
        return ks, [None] * len(jobs)
    return ks, [_read(d / f"{k}{SUFFIX}") for k in ks]


def save(items: Sequence[tuple[str, str]]) -> None:
    """Keep each (key, svg) drawn now; then only the KEEP most recently used entries."""
    if not items:
        return
    d = _usable_dir(create=True)
    if d is None:
        return
    try:
        for k, svg in items:
            atomic.write_atomic(d / f"{k}{SUFFIX}", svg, mode=0o600)
        _prune(d)
    except OSError as e:  # a full disk: the next report draws again
        log.debug("chart cache %s not written: %s", d, e)


def _prune(d: Path) -> None:
    entries = []
    for p in d.glob(f"*{SUFFIX}"):
        with contextlib.suppress(OSError):
            entries.append((os.lstat(p).st_mtime_ns, p))
    entries.sort(reverse=True)
    for _, p in entries[KEEP:]:
        with contextlib.suppress(OSError):
            p.unlink()
