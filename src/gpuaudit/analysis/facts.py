"""Stage 2's price-free reading of the rollups: everything the analysis computes from the per-GPU-hour frames
that no price moves (the totals, the trial, the ledger and its allocation mapping, the breakdowns, the data
quality, the daily sums, each GPU-model pool's measure, the right-sizing inputs, the chargeback's job matching).
The rest of stage 2 (prices, scenarios, bootstrap, decision) reads only `Facts`, never the rollups: a cold run
and a re-run with another price go through the same code from the same Facts.

Kept for the next run (a memo, never a source of truth): a run that found its rollups in the rollup cache
(stage1/cache.py) keeps its Facts under the SHA-256 of the rollup entry's key (which names the exact snapshot
of the files and the stage-1 code), the `Knobs` it was read with (every setting the functions here take: they
take these, never a Config), and the code that computes them (every file of this package, and the versions of
polars and numpy). A re-run with another price finds the rollup entry by the tree's stamp and its Facts here,
and loads neither the entry nor its per-GPU-hour frames: seconds and a fraction of the memory at fleet scale.
Delete the memo and nothing changes but the time.

Where: `$XDG_CACHE_HOME/gpuaudit/stage2/`, this user's own cache and never beside the data: an entry is a
pickle, and whoever can write one can run code as the user who reads it, so util/privcache.py's rules apply
(owned by this user, writable by no one else, on a path no one else can change; never through a link).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from gpuaudit.analysis import chargeback as cb
from gpuaudit.analysis import ledger as lg
from gpuaudit.analysis import utilization as ut
from gpuaudit.analysis.confidence import daily
from gpuaudit.analysis.config import Reading, reading
from gpuaudit.analysis.measure import Measure, measure
from gpuaudit.analysis.overrides import Applied
from gpuaudit.analysis.pools import PoolSpec, pools_of, subset
from gpuaudit.analysis.quality import data_quality
from gpuaudit.analysis.result import Breakdowns, DataQuality, Deployment, Trial
from gpuaudit.analysis.rightsize import SizeInput, size_input
from gpuaudit.analysis.stage1.frames import Rollups
from gpuaudit.errors import GpuauditError
from gpuaudit.util import privcache

log = logging.getLogger("gpuaudit.analysis")

_VERSION = 1
SUFFIX = ".facts"
KEEP = 8  # entries (the newest used): a few datasets' re-runs under a few settings
_MAX_BYTES = 2 << 30  # tens of MB at 1,000 GPUs x 90 days; a larger file is not ours
_CACHE = privcache.PrivateCache("stage2", SUFFIX, _MAX_BYTES)
_MAGIC = b"gpuaudit-facts\0"  # then the payload's SHA-256, then the pickle
_DIGEST = 32


@dataclass(frozen=True)
class Knobs:
    """Every setting the reading of the rollups depends on: the trial and data-quality settings, and where
    the fleet runs today, whether data must stay on premises and the latency-sensitive share (the ledger and
    the billed demand read them). No price."""

    reading: Reading
    current: Deployment
    data_residency: bool
    latency_share: float


def knobs(applied: Applied) -> Knobs:
    cfg = applied.cfg
    return Knobs(reading(cfg), applied.current, applied.data_residency, cfg.decision.latency_sensitive_share)


@dataclass(frozen=True)
class Facts:
    """The rollups read, price-free. `pool_me`, `pool_days`: one per GPU-model pool where there are several
    (else empty, and `days` is the one pool's); `sizing`: one per pool, or the fleet's. `lines`: what stage 1
    left out (skipped files, rejected rows), said again on a run that reads these instead of the rollups."""

    totals: ut.Totals
    trial: Trial
    me: Measure
    breakdowns: Breakdowns
    data_quality: DataQuality
    days: pl.DataFrame
    specs: tuple[PoolSpec, ...]
    pool_me: tuple[Measure, ...]
    pool_days: tuple[pl.DataFrame, ...]
    sizing: tuple[SizeInput, ...]
    unheld_real_s: float
    jobs: cb.JobBase
    lines: tuple[str, ...]


def read(roll: Rollups, k: Knobs, root: str) -> Facts:
    """The price-free reading of `roll` (the one pass over its per-GPU-hour frames)."""
    ut.check_enough(roll, k.reading, root)
    t = ut.totals(roll)
    _check_finite(t)
    tr = ut.trial(roll, t, k.reading)
    me = _measure(roll, tr, k)
    hh = ut.holder_hours(roll)
    bd = ut.breakdowns(roll, t, me.demand, me.bucket_s, hh)
    dq = data_quality(roll, t, tr, k.reading, me.utilization.real_is_upper_bound, me.elastic)
    dq = dataclasses.replace(dq, warnings=dq.warnings + me.mapped.warnings)
    start = tr.start.timestamp()
    days = daily(roll.gpu_hours, start, tr.days)
    specs = pools_of(roll)
    pool_me: tuple[Measure, ...] = ()
    pool_days: tuple[pl.DataFrame, ...] = ()
    if len(specs) > 1:
        subs = [subset(roll, sp) for sp in specs]
        pool_me = tuple(_measure(s, tr, k) for s in subs)
        pool_days = tuple(daily(s.gpu_hours, start, tr.days) for s in subs)
        sizing = tuple(size_input(s.gpu_hours) for s in subs)
    else:
        sizing = (size_input(roll.gpu_hours),)
    return Facts(t, tr, _slim(me), bd, dq, days, specs, tuple(map(_slim, pool_me)), pool_days, sizing,
                 cb.unheld_real_s(roll.gpu_hours), cb.job_base(hh, roll.allocations, start, tr.end.timestamp()),
                 (*roll.skipped_files, *roll.rejected_rows))


def _measure(roll: Rollups, tr: Trial, k: Knobs) -> Measure:
    return measure(roll, tr, current=k.current, data_residency=k.data_residency, latency_share=k.latency_share)


def _slim(me: Measure) -> Measure:
    """The measure without the per-GPU-hour mapping (only its warnings are read after it)."""
    m = me.mapped
    empty = pl.DataFrame()
    return dataclasses.replace(me, mapped=lg.Mapped(empty, empty, m.unmapped_s, m.inferred_s, m.basis_hosts,
                                                    m.warnings))


def _check_finite(t: ut.Totals) -> None:
    """NaN or infinity in the data would make every figure meaningless: refuse with one line."""
    bad = [k for k, v in vars(t).items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        raise GpuauditError(f"the data holds non-finite values (NaN or infinity) in {', '.join(bad)}: check the "
                            "files `gpuaudit sql` lists for them")


def _code_digest() -> str | None:
    """This package's code and data files (the reading is any of them; linked directories followed, as the
    source layout's sql/ is), polars' and numpy's versions; None where the sources cannot be read (an install
    of compiled files only: no memo, rather than one that outlives an upgrade)."""
    from importlib import metadata

    import gpuaudit

    h = hashlib.sha256(f"v{_VERSION}".encode())
    base = Path(gpuaudit.__file__).parent
    found = []
    for d, dirs, files in os.walk(base, followlinks=True):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        found += [Path(d, f) for f in files if f.endswith((".py", ".sql", ".toml"))]
    if not any(p.suffix == ".py" for p in found):
        return None
    try:
        for p in sorted(found):
            h.update(str(p.relative_to(base)).encode() + b"\0" + p.read_bytes())
        for dist in ("polars", "numpy"):
            h.update(f"{dist} {metadata.version(dist)}".encode())
    except (OSError, metadata.PackageNotFoundError):
        return None
    return h.hexdigest()


def _key(token: str, k: Knobs) -> str | None:
    code = _code_digest()
    return None if code is None else hashlib.sha256(f"{code}\0{token}\0{k!r}".encode()).hexdigest()


def recall(token: str | None, k: Knobs) -> Facts | None:
    """The Facts kept for rollup entry `token` read with `k`, or None (a miss: read the rollups)."""
    key = _key(token, k) if token else None
    d = _CACHE.usable_dir(create=False) if key else None
    data = _CACHE.read(d, key) if d is not None and key else None
    if data is None:
        return None
    # The payload's digest first: a flipped bit would otherwise unpickle into other figures (or fail every run,
    # as a hit is never rewritten); a mismatch is a miss, and this run writes the entry again.
    head = len(_MAGIC) + _DIGEST
    payload = memoryview(data)[head:]  # no copy of a fleet's 100 MB
    if data[:len(_MAGIC)] != _MAGIC or hashlib.sha256(payload).digest() != data[len(_MAGIC):head]:
        log.debug("stage-2 memo %s damaged: not used", key)
        return None
    try:
        found = pickle.loads(payload)  # this user's own file (privcache's rules), written whole by keep()
    except Exception as e:  # from another build of a dependency: read the rollups instead
        log.debug("stage-2 memo %s unreadable (%s): not used", key, e)
        return None
    return found if isinstance(found, Facts) else None


def keep(token: str | None, k: Knobs, f: Facts) -> None:
    """Keep `f` for the next run over rollup entry `token` (None: the rollups are in no entry; nothing kept).
    Never fails the run: a memo not written costs the next run its reading."""
    key = _key(token, k) if token else None
    if key is None:
        return
    try:
        payload = pickle.dumps(f, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # an object pickle cannot take: no memo
        log.debug("stage-2 memo not written: %s", e)
        return
    _CACHE.save([(key, _MAGIC + hashlib.sha256(payload).digest() + payload)], KEEP)


def say(f: Facts) -> None:
    """What stage 1 left out, as a run that read the rollups says it."""
    for line in f.lines:
        log.warning("%s", line)

