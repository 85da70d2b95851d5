"""Stage 1: the only part of the analysis that reads the dataset.

One scan of `samples` (sql/analysis_rollup.sql, GROUPING SETS) gives the per-GPU-per-hour rollup and
the fleet demand series; one scan of `processes` (sql/analysis_holders.sql) gives who held each GPU per
hour. Everything after this works on these small polars frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from gpuaudit.resources import load_sql

# The demand series' bucket in sql/analysis_rollup.sql.
DEMAND_BUCKET_S = 300.0


@dataclass(frozen=True)
class Rollups:
    """gpu_hours: one row per GPU (or MIG slice) per hour. demand: one row per DEMAND_BUCKET_S bucket.
    holders: per GPU per hour per (user, job, pod), its process rows (the weight of its share)."""

    gpu_hours: pl.DataFrame
    demand: pl.DataFrame
    holders: pl.DataFrame
    skipped_files: tuple[str, ...] = ()


def load_rollups(root: Path | str, threads: int | None = None) -> Rollups:
    from gpuaudit.store import open_dataset

    with open_dataset(root, threads=threads) as ds:
        both = ds.query(load_sql("analysis_rollup"))
        holders = ds.query(load_sql("analysis_holders"))
        skipped = tuple(f"{p}: {why}" for p, why in ds.skipped)
    return split_rollup(both, holders, skipped)


def split_rollup(both: pl.DataFrame, holders: pl.DataFrame, skipped: tuple[str, ...] = ()) -> Rollups:
    gpu_hours = both.filter(pl.col("level") == "gpu_hour").drop("level", "bucket_s", "bucket", strict=False)
    demand = (
        both.filter(pl.col("level") == "demand")
        .select("bucket_s", "samples", "observed_s", "held_s", "real_s", "max_interval_s")
        .sort("bucket_s")
    )
    return Rollups(gpu_hours=gpu_hours, demand=demand, holders=holders, skipped_files=skipped)
