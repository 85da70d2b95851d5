"""Drawn charts kept for the next report: a re-run whose chart shows the same data (another price leaves the
utilization, the ledger and the heatmap as they were; an unchanged dataset leaves every chart) reads the SVG
instead of drawing it again. About 80 ms of matplotlib per drawing, 20 drawings: most of a small report.

An optimisation, never a source of truth: the drawings are deterministic (charts._STYLE's hash salt, no date),
so an entry is the bytes a drawing would give, and deleting the cache changes nothing but the time. The key is
the SHA-256 of the spec's repr (frozen data: numbers, labels, thresholds; repr keeps every float exactly),
the width, and the drawing code: charts.py and the text-safety module it uses, and matplotlib's version.

Where: `$XDG_CACHE_HOME/gpuaudit/charts/` (util.paths.user_cache_dir), this user's own cache and never the
dataset's directory: an entry is pasted into report.html as markup, so whoever can write an entry can put
script into the report. An entry is used only from a directory and a file owned by this user and writable by
no one else (a shared or planted cache is not read, and not written); files are opened without following a
link. A cache that cannot be used or written costs only the drawing. KEEP entries stay (the newest used)."""

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


def _code_digest() -> str:
    """The drawing code's identity (read as files: importing matplotlib to ask would cost what a hit saves)."""
    from importlib import metadata, resources

    h = hashlib.sha256(f"v{_VERSION}".encode())
    pkg = resources.files("gpuaudit")
    for rel in ("report/charts.py", "util/textsafe.py"):
        h.update(rel.encode() + b"\0" + pkg.joinpath(rel).read_bytes())
    try:
        h.update(b"matplotlib " + metadata.version("matplotlib").encode())
    except metadata.PackageNotFoundError:  # no drawing possible either: the draw reports it
        h.update(b"no matplotlib")
    return h.hexdigest()


def keys(jobs: Sequence[Job]) -> list[str]:
    code = _code_digest()
    return [hashlib.sha256(f"{code}\0{narrow}\0{spec!r}".encode()).hexdigest() for spec, narrow in jobs]


def _trusted(st: os.stat_result) -> bool:
    """Owned by this user and writable by no one else."""
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _usable_dir(create: bool) -> Path | None:
    d = cache_dir()
    try:
        if create:
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(d)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or not _trusted(st):
        log.debug("chart cache %s is not this user's alone: not used", d)
        return None
    return d


def _read(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _trusted(st) or st.st_size > _MAX_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            text = f.read(_MAX_BYTES + 1).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)
    if not text.startswith("<?xml") or "</svg>" not in text[-64:]:  # torn or foreign: drawn again
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: kept by the pruning
    return text


def load(jobs: Sequence[Job]) -> tuple[list[str], list[str | None]]:
    """Each job's key, and its cached SVG (None where there is none to use)."""
    ks = keys(jobs)
    d = _usable_dir(create=False)
    if d is None:
        return ks, [None] * len(ks)
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
            entries.append((p.stat().st_mtime_ns, p))
    entries.sort(reverse=True)
    for _, p in entries[KEEP:]:
        with contextlib.suppress(OSError):
            p.unlink()
