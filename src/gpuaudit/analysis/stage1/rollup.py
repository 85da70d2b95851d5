"""Stage 1: the only part of the analysis that reads the dataset.

One big scan of `samples` (sql/analysis_streams.sql) gives one row per GPU-hour per stream (a source on a host)
with what de-duplication needs, materialized once as the small table `gpu_streams` (GPU-hours where streams
overlap only in part are redone per minute from their samples alone); the per-GPU-per-hour rollup
(sql/analysis_rollup.sql) keeps each GPU-hour's winning stream, and the fleet demand series
(sql/analysis_demand.sql) is a second, narrow scan of `samples` weighted by it. One scan of `processes`
(sql/analysis_holders.sql) gives who held each GPU per hour. Everything after this works on these small
polars frames, whichever engine ran the SQL (DuckDB here; the same files run on Spark).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import polars as pl

from gpuaudit.analysis.stage1.frames import Rollups
from gpuaudit.analysis.stage1.streams import FINE, HOURLY, REFINE, STREAMS_TABLE, streams_sql
from gpuaudit.util import fmt
from gpuaudit.util.resources import load_sql

if TYPE_CHECKING:
    from gpuaudit.analysis.stage1.cache import Known

log = logging.getLogger("gpuaudit.analysis")

_QUERIES = ("analysis_rollup", "analysis_demand", "analysis_holders")
_DEDUP_DEMAND = "analysis_demand_dedup"  # replaces analysis_demand when the data holds duplicates
_HAS_DUPLICATES = f"SELECT count(*) AS n FROM {STREAMS_TABLE} WHERE pick > 1 OR overlap > 1"
_HOURS_TO_REFINE = f"SELECT count(*) AS n FROM {REFINE}"
_GPU_HOUR = ("host", "gpu_uuid", "mig_instance", "hour_s")


class Engine(Protocol):
    """What stage 1 needs from a SQL engine: views `samples` and `processes` over the dataset."""

    def materialize(self, name: str, sql: str) -> None:
        """Run `sql` once and keep its result as the relation `name` for later queries."""

    def query(self, sql: str) -> pl.DataFrame:
        """Run `sql` and return the result as a polars DataFrame."""


class DuckDBEngine:
    """Stage 1 on an open gpuaudit Dataset (DuckDB)."""

    def __init__(self, ds: object) -> None:
        self.ds = ds

    def materialize(self, name: str, sql: str) -> None:
        self.ds.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}")  # type: ignore[attr-defined]

    def query(self, sql: str) -> pl.DataFrame:
        return self.ds.query(sql)  # type: ignore[attr-defined]


def load_rollups(root: Path | str, threads: int | None = None, *, cache: bool = True) -> Rollups:
    """Stage 1 over the dataset at `root`. `cache`: use the rollup cache (stage1/cache.py) when it holds this
    exact snapshot, else read only the files an entry has not seen where de-duplication allows, and fill it;
    False (`--no-cache`): a cold run that leaves the cache alone."""
    return load_keyed(root, threads, cache=cache)[0]


def load_keyed(root: Path | str, threads: int | None = None, *, cache: bool = True,
               known: Known | None = None) -> tuple[Rollups, str | None]:
    """load_rollups, and the key of the cache entry that holds these rollups (None: none does). `known`: what
    stage1/cache.py known() found at the start of this run (its stamp is not taken again)."""
    from gpuaudit.analysis.stage1 import cache as rcache

    found = rcache.lookup(root, known) if cache else None
    if found is not None and found.hit is not None:
        for line in (*found.hit.skipped_files, *found.hit.rejected_rows):  # as a cold run says them
            log.warning("%s", line)
        return found.hit, found.key
    return _read(root, threads, found)


def _read(root: Path | str, threads: int | None, found: Any) -> tuple[Rollups, str | None]:
    """Stage 1 from the files: all of them, or (with an entry to build on) only those it has not seen. With
    `found` (the cache in use) the result is stored when no writer changed the files while they were read;
    and the key it is stored under."""
    from gpuaudit import schema
    from gpuaudit.analysis.stage1 import cache as rcache
    from gpuaudit.store import open_dataset

    with open_dataset(root, threads=threads) as ds:
        before = rcache.identities(root, rcache.dataset_files(ds)) if found is not None else None
        full = {t: list(fs) for t, fs in ds.files.items()}
        base = None
        if found is not None:
            read_now = rcache.identities(root, [str(f) for fs in full.values() for f in fs])
            base = rcache.base_for(found.directory, found.code, read_now)
        roll = None
        if base is not None:
            seen = {str(i[0]) for i in base.read}
            ds.only({t: fs if t == schema.ALLOCATIONS else [f for f in fs if str(f) not in seen]
                     for t, fs in full.items()})
            add, add_span = _stage1(ds)
            roll = rcache.merge(base.roll, add, base.span, add_span)
            span = rcache.union_span(base.span, add_span)
            new = sum(len(fs) for t, fs in ds.files.items() if t != schema.ALLOCATIONS)
            if roll is None:
                log.info("the rollup cache's entry cannot be merged with the new files here: reading all of them")
            else:
                log.info("read %d new file(s) on top of the rollup cache", new)
            left = {str(f) for fs in ds.files.values() for f in fs}  # less any new file found damaged
            full = {t: [f for f in fs if str(f) in seen or str(f) in left] for t, fs in full.items()}
            if roll is None:
                ds.only(full)
            else:
                ds.files = full
        if roll is None:
            roll, span = _stage1(ds)
        if found is None:
            return roll, None
        after = rcache.identities(root, rcache.dataset_files(ds))
        if before == after and rcache.cacheable(roll):
            read = rcache.identities(root, [str(f) for fs in ds.files.values() for f in fs])
            key = rcache.key_of(after, found.code)
            if rcache.store(found.directory, key, roll, read, found.code, span):
                rcache.remember(found, root, key)
                return roll, key
        return roll, None


def _stage1(ds: Any) -> tuple[Rollups, list[float | None]]:
    """Stage 1 over an open dataset's views, with what the reader left out; and the span of all its streams
    (what sql/analysis_elastic_gpus.sql judges absence against: the cache's merge needs it)."""
    from gpuaudit import schema

    engine = DuckDBEngine(ds)
    roll = rollups_from(engine)
    # Rows stage 1 saw through the views, against the files' footers: a clean dataset needs no extra scan.
    seen = engine.query(f"SELECT coalesce(sum(samples), 0) AS n FROM {STREAMS_TABLE}")["n"][0]
    shown = {schema.SAMPLES: int(seen), schema.PROCESSES: int(roll.holders["process_samples"].sum() or 0)}
    rows = excluded_lines(ds.rejected_rows(shown))
    span = engine.query(f"SELECT min(first_s) AS a, max(last_s) AS b FROM {STREAMS_TABLE}")
    return dataclasses.replace(roll, skipped_files=tuple(f"{p}: {why}" for p, why in ds.skipped),
                               rejected_rows=rows), [span["a"][0], span["b"][0]]


def excluded_lines(rejected: Iterable[tuple[str, str, int]]) -> tuple[str, ...]:
    """The result's warnings for rows the reader left out, (table, why, n) each: "1 gpu_samples row excluded: ..."."""
    return tuple(f"{fmt.count(n, table + ' row')} excluded: {why}" for table, why, n in rejected)


def rollups_from(engine: Engine) -> Rollups:
    """Run the stage-1 SQL through `engine` and shape the results."""
    engine.materialize(HOURLY, streams_sql())
    engine.materialize(REFINE, load_sql("analysis_refine_hours"))
    if int(engine.query(_HOURS_TO_REFINE)["n"][0]) > 0:  # a second, filtered scan only when streams overlap in part
        engine.materialize(FINE, streams_sql(fine=True))
        engine.materialize(STREAMS_TABLE, load_sql("analysis_streams_merge"))
    else:
        engine.materialize(STREAMS_TABLE, f"SELECT * FROM {HOURLY}")
    # Clean data (the usual case) needs no per-sample weights: the demand scan skips the join.
    dedup = int(engine.query(_HAS_DUPLICATES)["n"][0]) > 0
    queries = [_DEDUP_DEMAND if q == "analysis_demand" and dedup else q for q in _QUERIES]
    rollup, demand, holders = (engine.query(load_sql(q)) for q in queries)
    out = Rollups(
        gpu_hours=rollup.sort(_GPU_HOUR),
        demand=demand.drop("bucket", strict=False).sort("bucket_s", "gpu_name", nulls_last=True),
        holders=holders,
        allocations=engine.query(load_sql("analysis_allocations")),
    )
    elastic = engine.query(load_sql("analysis_elastic_gpus"))
    if elastic.height == 0:  # the usual case: no second scan
        return out
    engine.materialize("elastic_gpus", load_sql("analysis_elastic_gpus"))
    part = engine.query(load_sql("analysis_demand_elastic")).sort("bucket_s", "gpu_name", nulls_last=True)
    return dataclasses.replace(out, elastic_gpus=elastic, elastic_demand=part)
