"""Stage 1: the only part of the analysis that reads the dataset.

Three plain GROUP BY scans, each from sql/: the per-GPU-per-hour rollup of `samples`
(analysis_rollup.sql), the fleet demand series (analysis_demand.sql), and who held each GPU per hour from
`processes` (analysis_holders.sql). Everything after this works on these small polars frames.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from gpuaudit.resources import load_sql

# The demand series' bucket in sql/analysis_demand.sql.
DEMAND_BUCKET_S = 300.0
_GPU_HOUR = ("host", "gpu_uuid", "mig_instance", "hour_s")
_SUMS = ("samples", "observed_s", "held_s", "busy_s", "real_s", "real_held_s", "fallback_s", "unmeasured_s",
         "idle_held_s", "energy_j", "energy_s")
_MAXES = ("gpu_fraction", "max_mem_used_bytes", "mem_total_bytes", "last_s", "max_interval_s")


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
        roll = rollups_from(ds.query)
        return Rollups(roll.gpu_hours, roll.demand, roll.holders,
                       tuple(f"{p}: {why}" for p, why in ds.skipped))


def rollups_from(query: Callable[[str], pl.DataFrame]) -> Rollups:
    """Run the three stage-1 queries through `query` (SQL -> polars) and shape their results."""
    return Rollups(
        gpu_hours=fold_gpu_hours(query(load_sql("analysis_rollup"))),
        demand=query(load_sql("analysis_demand")).drop("bucket", strict=False).sort("bucket_s"),
        holders=query(load_sql("analysis_holders")),
    )


def fold_gpu_hours(rows: pl.DataFrame) -> pl.DataFrame:
    """One row per GPU-hour: the SQL keys also split by gpu_name and source, which change only when, say,
    an import and an agent overlap; their rows add up here (source_min/max keep what was mixed)."""
    return (
        rows.group_by(_GPU_HOUR, maintain_order=True)
        .agg(
            pl.col("hour").first(),
            pl.col("gpu_name").drop_nulls().first(),
            pl.col("source").min().alias("source_min"),
            pl.col("source").max().alias("source_max"),
            *(pl.col(c).sum() for c in _SUMS),
            *(pl.col(c).max() for c in _MAXES),
            pl.col("first_s").min(),
        )
        .sort(_GPU_HOUR)
    )
