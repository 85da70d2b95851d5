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
cache is neither read nor written (util/privcache.py owns these rules). A cache that cannot be used or written
costs only the drawing. KEEP entries stay (the newest used)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from gpuaudit.report.model import ChartSpec
from gpuaudit.util import privcache

_VERSION = 1
SUFFIX = ".svg"
KEEP = 400  # entries (about 40 KiB each): every chart of a few dozen reports
_MAX_BYTES = 8 << 20  # no drawing comes near this; a larger file is not ours

Job = tuple[ChartSpec, bool]  # the spec, and whether it is drawn for a phone's width


_CACHE = privcache.PrivateCache("charts", SUFFIX, _MAX_BYTES)


def cache_dir() -> Path:
    return _CACHE.directory()


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


def _read(d: Path, key: str) -> str | None:
    data = _CACHE.read(d, key)
    try:
        text = data.decode("utf-8") if data is not None else None
    except UnicodeDecodeError:
        return None
    if text is None or not text.startswith("<?xml") or "</svg>" not in text[-64:]:  # torn or foreign: drawn again
        return None
    return text


def load(jobs: Sequence[Job]) -> tuple[list[str] | None, list[str | None]]:
    """Each job's key (None: no cache, the drawing code cannot be identified), and its cached SVG (None where
    there is none to use)."""
    ks = keys(jobs)
    d = _CACHE.usable_dir(create=False) if ks is not None else None
    if ks is None or d is None:
        return ks, [None] * len(jobs)
    return ks, [_read(d, k) for k in ks]


def save(items: Sequence[tuple[str, str]]) -> None:
    """Keep each (key, svg) drawn now; then only the KEEP most recently used entries."""
    _CACHE.save(items, KEEP)
