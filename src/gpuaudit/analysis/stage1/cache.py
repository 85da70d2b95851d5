"""The stage-1 rollup cache: stage 1's results kept beside the data, so that a re-run with another
price or config pays no scan. An optimisation, never a source of truth: an entry is used only when it was made
from exactly the files a cold run would read now, by exactly this stage-1 code; anything else is a cold run.

Where it lives: `<data>/.rollups/` for a local dataset (a dot-name: no reader lists it as data); for an
s3:// dataset `$XDG_CACHE_HOME/gpuaudit/rollups/<sha256 of the URL, 16 hex>/` (default `~/.cache/...`) on
this machine. Deleting either directory only costs the next run its scan.

The key (whole snapshot: if any file changed, recompute):
- every file the reader lists for stage 1 (readable or not, and the ones it leaves out by name: copies, stray
  links), each by its path, size, mtime_ns and the SHA-256 of its Parquet footer (which holds the row count and
  every column chunk's statistics): a compaction, a re-import, a push or a file re-written under the same name
  changes the listing or an identity, so an entry of a file that is gone is never used. On s3:// an object is
  its key, size, ETag and LastModified;
- the stage-1 code: the SQL files, the stage-1 modules, the reader's contract (conformance.py, schema.py), and
  CACHE_VERSION.
A warm run finds the key without the listing: `<stamp digest>.stamp` maps the tree's stamp
(store.reader.tree_stamp: lstat identities, no file opened) to the key, recorded only where the tree was the
same before and after the run that found or made the entry. A stamp not recorded costs the full listing.
`known` answers the stamp's key without reading the entry: a re-run whose stage-2 results are kept by that key
(analysis/facts.py) reads no rollup at all.
An entry is one file `<key>.rollup` (a zip of Arrow IPC frames and meta.json) published with util/atomic.py:
a reader sees a whole entry or none, two writers of one key publish the same thing. An entry is written only
when the listing after the run equals the one before it (no writer changed the dataset meanwhile) and no row
was left out for its timestamp (the "more than a day in the future" rule moves with the clock). Where the
cache cannot be written (a read-only dataset) the run is a cold one, with a note on stderr. KEEP entries stay
(the newest), the others are removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import logging
import os
import stat
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from gpuaudit.analysis.stage1.frames import Rollups
from gpuaudit.util import atomic, paths

log = logging.getLogger("gpuaudit.analysis")

_CACHE_VERSION = 1
DIR = ".rollups"
SUFFIX = ".rollup"
STAMP_SUFFIX = ".stamp"  # a small file: a tree's stamp (store.reader.tree_stamp) -> the key of its entry
_KEEP = 4  # entries kept per dataset (the newest)
_FRAMES = ("gpu_hours", "demand", "holders", "elastic_gpus", "elastic_demand", "allocations")
_TIME_RULE = "in the future"  # a reason conformance.row_checks gives for a ts it rejects relative to "now"


def cache_dir(root: Path | str) -> Path:
    """Where the entries of the dataset at `root` live (see the module docstring)."""
    url = paths.as_url(root)
    if not url:
        return Path(root) / DIR
    return paths.user_cache_dir() / "rollups" / hashlib.sha256(url.encode()).hexdigest()[:16]


def _code_digest() -> str:
    """The stage-1 code's identity: its SQL, every module of this package (read as files: the pass that reads
    this cache is one of them), the reader's contract, CACHE_VERSION."""
    from importlib import resources

    from gpuaudit import schema
    from gpuaudit.store import conformance, reader

    h = hashlib.sha256(f"v{_CACHE_VERSION}".encode())
    sql = resources.files("gpuaudit") / "sql"
    for item in sorted(sql.iterdir(), key=lambda p: p.name):
        if item.name.startswith("analysis_") and item.name.endswith(".sql"):
            h.update(item.name.encode() + b"\0" + item.read_bytes())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    for module in (conformance, reader, schema):
        h.update(Path(module.__file__ or "").read_bytes())
    return h.hexdigest()


def _footer_digest(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if size < 12:
                return "short"
            f.seek(size - 8)
            n = int.from_bytes(f.read(4), "little")
            if not 0 < n <= size - 12:
                return "bad-footer"
            f.seek(size - 8 - n)
            return hashlib.sha256(f.read(n)).hexdigest()
    except OSError as e:
        return f"error:{e.errno}"


def _local_identity(f: Path) -> list[Any]:
    try:
        st = os.lstat(f)
        linked = stat.S_ISLNK(st.st_mode)
        if linked:
            st = os.stat(f)
    except OSError as e:
        return [str(f), "missing", e.errno]
    out: list[Any] = [str(f), st.st_size, st.st_mtime_ns, _footer_digest(f)]
    # A link: where its chain ends too. The reader leaves out a link that ends outside the root, and a chain
    # re-pointed at another name of the same file changes nothing else here.
    return [*out, os.path.realpath(f)] if linked else out


def _s3_identities(url: str) -> dict[str, list[Any]]:
    from gpuaudit import schema
    from gpuaudit.store import remote

    scheme, base = paths.split(url)
    fs = remote.filesystem(url, cache_listings=True)
    out: dict[str, list[Any]] = {}
    for table in schema.TABLES:
        try:
            listing = fs.find(f"{base}/{table}", detail=True)
        except FileNotFoundError:
            continue
        for key, info in listing.items():
            name = f"{scheme}://{key}"
            out[name] = [name, int(info.get("size") or 0), str(info.get("ETag") or info.get("etag") or ""),
                         str(info.get("LastModified") or info.get("last_modified") or "")]
    return out


def identities(root: Path | str, files: list[str]) -> list[list[Any]]:
    """The identity of each of `files` (paths or URLs) of the dataset at `root`, sorted by path."""
    url = paths.as_url(root)
    if url:
        known = _s3_identities(url)
        return [known.get(f, [f, "missing"]) for f in sorted(set(files))]
    return [_local_identity(Path(f)) for f in sorted(set(files))]


def _listed_files(root: Path | str) -> list[str]:
    """Every path a reader's listing names now (readable, unreadable, or left out by name), as Dataset lists."""
    from gpuaudit import schema
    from gpuaudit.store import readers
    from gpuaudit.store.reader import Excluded, table_files

    excluded: Excluded = []
    url = paths.as_url(root)
    with contextlib.nullcontext() if url else readers.listing(Path(root)):
        listed = [table_files(root, table, excluded) for table in schema.TABLES]
    out = [str(f) for good, bad in listed for f in [*good, *(p for p, _ in bad)]]
    return out + [str(p) for p, _, _ in excluded]


def dataset_files(ds: Any) -> list[str]:
    """Every path an open Dataset's snapshot names: the files it reads and those it left out."""
    return [str(f) for fs in ds.files.values() for f in fs] + [str(p) for p, _ in ds.skipped]


def key_of(ids: list[list[Any]], code: str) -> str:
    return hashlib.sha256(json.dumps([code, ids], separators=(",", ":")).encode()).hexdigest()[:32]


def load(directory: Path, key: str) -> Rollups | None:
    """The Rollups of entry `key`, or None when there is none (or it cannot be read: a miss, never an error)."""
    path = directory / f"{key}{SUFFIX}"
    try:
        with zipfile.ZipFile(path) as z:
            meta = json.loads(z.read("meta.json"))
            if meta.get("key") != key or meta.get("version") != _CACHE_VERSION:
                return None
            frames = {n: pl.read_ipc(io.BytesIO(z.read(f"{n}.arrow")))
                      for n in _FRAMES if f"{n}.arrow" in z.namelist()}
        roll = Rollups(gpu_hours=frames["gpu_hours"], demand=frames["demand"], holders=frames["holders"],
                       elastic_gpus=frames["elastic_gpus"], elastic_demand=frames["elastic_demand"],
                       allocations=frames.get("allocations"), skipped_files=tuple(meta["skipped_files"]),
                       rejected_rows=tuple(meta["rejected_rows"]))
    except FileNotFoundError:
        return None
    except (OSError, zipfile.BadZipFile, KeyError, ValueError, TypeError, pl.exceptions.PolarsError) as e:
        log.info("rollup cache entry %s unreadable (%s): a cold run", path, e)
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: kept by the eviction
    return roll


def cacheable(roll: Rollups) -> bool:
    """Whether `roll` stays what a cold run gives as time passes: no row was left out for its timestamp."""
    return not any(_TIME_RULE in r for r in roll.rejected_rows)


def store(directory: Path, key: str, roll: Rollups, read: list[list[Any]] | None = None, code: str = "",
          span: list[float | None] | None = None) -> bool:
    """Publish `roll` as entry `key` (atomically); False, with a note on stderr, where it cannot be written.
    `read`: the identities of the files stage 1 read (what a later, bigger snapshot may build on); `code`: the
    stage-1 code's digest."""
    def write(f: Any) -> None:
        with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED) as z:
            for name in _FRAMES:
                frame = getattr(roll, name)
                if frame is None:
                    continue
                buf = io.BytesIO()
                frame.write_ipc(buf, compression="lz4")
                z.writestr(f"{name}.arrow", buf.getvalue())
            z.writestr("meta.json", json.dumps({"key": key, "version": _CACHE_VERSION, "code": code,
                                                "read": read or [], "span": span,
                                                "skipped_files": list(roll.skipped_files),
                                                "rejected_rows": list(roll.rejected_rows)}))

    try:
        directory.mkdir(parents=True, exist_ok=True)
        atomic.write_atomic(directory / f"{key}{SUFFIX}", write)
    except OSError as e:
        note(f"the rollup cache cannot be written in {directory} ({e.strerror or e}): this run and the next "
             "are cold runs (read the whole dataset)")
        return False
    evict(directory)
    return True


def evict(directory: Path, keep: int = _KEEP) -> None:
    """Remove all but the `keep` most recently used entries (a reader that opened one keeps reading it)."""
    entries = []
    for p in directory.glob(f"*{SUFFIX}"):
        with contextlib.suppress(OSError):
            entries.append((p.stat().st_mtime_ns, p))
    for _, p in sorted(entries, reverse=True)[keep:]:
        with contextlib.suppress(OSError):
            p.unlink()
    for p in directory.glob(f"*{STAMP_SUFFIX}"):  # a stamp of an entry removed: never of use again
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if not (directory / f"{p.read_text(encoding='ascii').strip()}{SUFFIX}").exists():
                p.unlink()


def note(message: str) -> None:
    print(f"gpuaudit: note: {message}", file=sys.stderr, flush=True)


@dataclasses.dataclass
class _Lookup:
    """One run's use of the cache: where, the code's identity, the key the listing before the run gave, and
    the tree's stamp before it (store.reader.tree_stamp; None on s3://)."""

    directory: Path
    code: str
    key: str
    hit: Rollups | None = None
    stamp: str | None = None


@dataclasses.dataclass(frozen=True)
class Known:
    """The tree's stamp taken at the start of a run (None on s3://) and the key of the entry it maps to (None:
    none recorded, or the entry is gone)."""

    stamp: str | None
    key: str | None


def lookup(root: Path | str, known_: Known | None = None) -> _Lookup:
    """The entry of the snapshot at `root`, if any. First by the tree's stamp (no file opened: what a warm run
    of a big dataset would otherwise spend reading footers), else by the full listing's key. `known_`: the
    stamp this run already took (known()), not taken twice."""
    from gpuaudit.store.reader import tree_stamp

    code = _code_digest()
    directory = cache_dir(root)
    stamp = known_.stamp if known_ is not None else tree_stamp(root)
    key = _stamped(directory, stamp, code)
    hit = load(directory, key) if key else None
    if key is not None and hit is not None:
        return _Lookup(directory, code, key, hit, stamp)
    key = key_of(identities(root, _listed_files(root)), code)
    found = _Lookup(directory, code, key, load(directory, key), stamp)
    if found.hit is not None:
        remember(found, root, key)  # found by its listing (a copied dataset: new inodes): by its stamp next time
    return found


def known(root: Path | str, stamp_of: Callable[[], str | None] | None = None) -> Known:
    """The tree's stamp and the key of the entry it maps to, where that entry is there, without reading it (a
    run whose stage-2 results are kept by this key, analysis/facts.py, needs nothing else). `stamp_of`: where
    the stamp comes from when this run began taking it already (store.reader.StampAhead)."""
    from gpuaudit.store.reader import tree_stamp

    directory = cache_dir(root)
    stamp = stamp_of() if stamp_of is not None else tree_stamp(root)
    key = _stamped(directory, stamp, _code_digest())
    entry = directory / f"{key}{SUFFIX}"
    try:
        if key is None or not stat.S_ISREG(os.lstat(entry).st_mode):
            return Known(stamp, None)
    except OSError:
        return Known(stamp, None)
    with contextlib.suppress(OSError):  # recently used: kept by the eviction (a read-only cache keeps it anyway)
        os.utime(entry)
    return Known(stamp, key)


def _stamp_path(directory: Path, stamp: str, code: str) -> Path:
    name = hashlib.sha256(f"{code}:{stamp}".encode()).hexdigest()[:32]
    return directory / f"{name}{STAMP_SUFFIX}"


def _stamped(directory: Path, stamp: str | None, code: str) -> str | None:
    """The key a stamp file maps `stamp` to, or None (no stamp, none recorded, or not a key)."""
    if stamp is None:
        return None
    try:
        key = _stamp_path(directory, stamp, code).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return key if len(key) == 32 and all(c in "0123456789abcdef" for c in key) else None


def remember(found: _Lookup, root: Path | str, key: str) -> None:
    """Map the stamp taken at lookup to entry `key`, where the tree is still the one stamped then (no writer
    changed it while the run listed or read it): the next run finds the entry without opening a file."""
    from gpuaudit.store.reader import tree_stamp

    if found.stamp is None or tree_stamp(root) != found.stamp:
        return
    with contextlib.suppress(OSError):  # read-only: the next run takes the full listing again
        atomic.write_atomic(_stamp_path(found.directory, found.stamp, found.code), key)


@dataclasses.dataclass(frozen=True)
class Base:
    """An entry a bigger snapshot can build on: its rollups and the identities of the files it read."""

    roll: Rollups
    read: frozenset[tuple[Any, ...]]
    span: list[float | None]


def base_for(directory: Path, code: str, read_now: list[list[Any]]) -> Base | None:
    """The newest entry of this code whose every file read is still read now, unchanged (the dataset only
    grew since: one more day, a push of new files), or None."""
    now = {tuple(i) for i in read_now}
    entries = []
    for p in directory.glob(f"*{SUFFIX}"):
        with contextlib.suppress(OSError):
            entries.append((p.stat().st_mtime_ns, p))
    for _, p in sorted(entries, reverse=True):
        try:
            with zipfile.ZipFile(p) as z:
                meta = json.loads(z.read("meta.json"))
        except (OSError, zipfile.BadZipFile, KeyError, ValueError):
            continue
        read = {tuple(i) for i in meta.get("read") or []}
        if meta.get("code") != code or meta.get("version") != _CACHE_VERSION or not read or not read <= now:
            continue
        span = meta.get("span")
        if not isinstance(span, list) or len(span) != 2:
            continue
        roll = load(directory, str(meta.get("key")))
        if roll is not None:
            return Base(roll, frozenset(read), span)
    return None


_GPU_HOUR = ["gpu_uuid", "mig_instance", "hour_s"]  # the de-duplication's unit (analysis_streams.sql windows)
_HOLDER = ["host", "gpu_uuid", "mig_instance", "hour_s", "user", "job_id", "k8s_namespace", "k8s_pod", "pod_uid"]


def union_span(a: list[float | None], b: list[float | None]) -> list[float | None]:
    """The span (first start, last end) of two sets of streams together."""
    firsts = [x for x in (a[0], b[0]) if x is not None]
    lasts = [x for x in (a[1], b[1]) if x is not None]
    return [min(firsts) if firsts else None, max(lasts) if lasts else None]


def _maybe_elastic(gpu_hours: pl.DataFrame, span: list[float | None]) -> bool:
    """Whether any GPU of `gpu_hours` could be one sql/analysis_elastic_gpus.sql lists (the same sums: the
    winning streams' observed and held seconds per GPU), judged with a margin so that rounding never hides
    one: then its demand needs a scan, and the merge gives way."""
    if span[0] is None or span[1] is None or gpu_hours.height == 0:
        return False
    per = gpu_hours.group_by(["gpu_uuid", "mig_instance"]).agg(
        pl.col("observed_s").sum(), pl.col("held_s").sum(), pl.col("gpu_fraction").max())
    slack = 1e-6
    hit = per.filter((pl.col("observed_s") > 0)
                     & (pl.col("held_s") >= 0.99 * pl.col("observed_s") * (1 - slack))
                     & (pl.col("observed_s") / pl.col("gpu_fraction") < 0.95 * (span[1] - span[0]) * (1 + slack)))
    return hit.height > 0


# How two parts of one GPU-hour's single stream add up: each column of sql/analysis_rollup.sql by its aggregate
# there. A column not listed (the SQL grew one) makes a shared GPU-hour unmergeable: never a guess.
_HOUR_PARTS: dict[str, str] = {
    "hour": "first", "gpu_name": "min", "source_min": "min", "source_max": "max", "gpu_fraction": "max",
    **{c: "sum" for c in ("samples", "observed_s", "held_s", "busy_s", "real_s", "real_held_s", "fallback_s",
                          "fallback_real_s", "unmeasured_s", "idle_held_s", "energy_j", "energy_s",
                          "energy_estimated_s", "overlap_s")},
    "max_mem_used_bytes": "max", "mem_total_bytes": "max", "first_s": "min", "last_s": "max",
    "max_interval_s": "max",
}
_NO_OVERLAP = 1e-9  # overlap_s (GPU-seconds de-duplication removed) at most this share of observed_s: none


def _merge_gpu_hours(old: pl.DataFrame, add: pl.DataFrame) -> pl.DataFrame | None:
    """old's and add's GPU-hours together, or None where a GPU-hour in both cannot be added up. One in both is
    the usual case (an agent's next flush, the next day's first sample, end inside an hour the entry began); it
    adds up where, on each side, it is one stream (overlap_s 0: no other stream and no self-overlap in the hour)
    of the same host, source and reported GPU name, and the two sides' samples lie apart in time: then the cold
    run's window sums (sql/analysis_streams.sql) are the two parts' sums, its overlap factor stays 1 and the
    stream wins alike."""
    shared = old.select(_GPU_HOUR).join(add.select(_GPU_HOUR), on=_GPU_HOUR, how="semi")
    if shared.height == 0:
        return pl.concat([old, add]).sort(["host", *_GPU_HOUR])
    rest = [c for c in old.columns if c not in ("host", *_GPU_HOUR)]
    if any(c not in _HOUR_PARTS for c in rest):
        return None
    o = old.join(shared, on=_GPU_HOUR, how="semi")
    a = add.join(shared, on=_GPU_HOUR, how="semi")
    if o.select(_GPU_HOUR).is_duplicated().any() or a.select(_GPU_HOUR).is_duplicated().any():
        return None  # a GPU-hour under two hosts on one side: not one stream
    pair = o.join(a, on=_GPU_HOUR, how="inner", suffix="_add")

    def single(suffix: str) -> pl.Expr:
        src_min, src_max = pl.col("source_min" + suffix), pl.col("source_max" + suffix)
        overlap = pl.col("overlap_s" + suffix).abs() <= _NO_OVERLAP * pl.col("observed_s" + suffix).abs().clip(1.0)
        return (src_min == src_max) & overlap

    apart = (pl.col("last_s") <= pl.col("first_s_add")) | (pl.col("last_s_add") <= pl.col("first_s"))
    ok = (single("") & single("_add") & (pl.col("host") == pl.col("host_add"))
          & (pl.col("source_min") == pl.col("source_min_add")) & apart
          # The same name on both sides (NULL too): a name that changes at the seam is rare enough to read
          # again, and the rows then need no rule for which name the hour keeps.
          & pl.col("gpu_name").eq_missing(pl.col("gpu_name_add")))
    if not bool(pair.select(ok.all()).item()):
        return None
    aggs = {"first": pl.Expr.first, "min": pl.Expr.min, "max": pl.Expr.max, "sum": pl.Expr.sum}
    joined = (pl.concat([o, a]).group_by(["host", *_GPU_HOUR], maintain_order=True)
              .agg(*[aggs[_HOUR_PARTS[c]](pl.col(c)) for c in rest]).select(old.columns))
    apart_rows = [old.join(shared, on=_GPU_HOUR, how="anti"), add.join(shared, on=_GPU_HOUR, how="anti")]
    return pl.concat([*apart_rows, joined]).sort(["host", *_GPU_HOUR])


def merge(old: Rollups, add: Rollups, old_span: list[float | None] | None = None,
          add_span: list[float | None] | None = None) -> Rollups | None:
    """The rollups of old's files and add's together, where de-duplication allows: a GPU-hour in both only where
    its two parts add up (`_merge_gpu_hours`: streams are ranked and overlaps measured per GPU-hour), no GPU
    that reports only while held, in either or in both together (judged over the whole trial: `*_span`, each
    part's streams' first start and last end), no row left out of either; demand buckets and holders are sums.
    None: it does not allow, read everything."""
    if old.rejected_rows or add.rejected_rows or old.elastic_gpus.height or add.elastic_gpus.height:
        return None
    if old.demand.columns != add.demand.columns or old.gpu_hours.columns != add.gpu_hours.columns:
        return None
    if old.holders.columns != add.holders.columns:
        return None
    gpu_hours = _merge_gpu_hours(old.gpu_hours, add.gpu_hours)
    if gpu_hours is None:
        return None
    if old_span is None or add_span is None or _maybe_elastic(gpu_hours, union_span(old_span, add_span)):
        return None
    keys = ["bucket_s", "gpu_name"]
    sums = [c for c in old.demand.columns if c not in (*keys, "max_interval_s")]
    demand = (pl.concat([old.demand, add.demand]).group_by(keys, maintain_order=True)
              .agg(*[pl.col(c).sum() for c in sums], pl.col("max_interval_s").max())
              .select(old.demand.columns).sort(keys, nulls_last=True))
    holders = (pl.concat([old.holders, add.holders])
               .group_by(_HOLDER, maintain_order=True)
               .agg(pl.col("process_samples").sum(), pl.col("hour").first())
               .select(old.holders.columns))
    return dataclasses.replace(add, gpu_hours=gpu_hours, demand=demand, holders=holders)
