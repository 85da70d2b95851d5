"""What stage 1 hands to the rest of the analysis: `Rollups`, its small polars frames. Its own module because
both the stage-1 pass (rollup.py) and the rollup cache (cache.py) build it, and the pass reads the cache."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl


@dataclass(frozen=True)
class Rollups:
    """gpu_hours: one row per GPU (or MIG slice) per hour. demand: one row per DEMAND_BUCKET_S bucket and
    reported GPU name (gpu_name: each model's demand is priced at its own prices).
    holders: per GPU per hour per (user, job, pod), its process rows (the weight of its share).
    skipped_files / rejected_rows: what the reader left out (unreadable files; rows failing the contract).
    allocations: the scheduler's allocations (sql/analysis_allocations.sql), one row per job per host; None or
    empty when the dataset has none (the ledger then infers "allocated" from processes)."""

    gpu_hours: pl.DataFrame
    demand: pl.DataFrame
    holders: pl.DataFrame
    skipped_files: tuple[str, ...] = ()
    rejected_rows: tuple[str, ...] = ()
    # GPUs that report only while held (sql/analysis_elastic_gpus.sql) and their part of `demand` per bucket
    # (sql/analysis_demand_elastic.sql): empty frames when there are none.
    elastic_gpus: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(
        schema={"gpu_uuid": pl.String, "mig_instance": pl.Int64, "gpu_fraction": pl.Float64,
                "observed_s": pl.Float64}))
    elastic_demand: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(
        schema={"bucket_s": pl.Float64, "gpu_name": pl.String, "observed_s": pl.Float64, "held_s": pl.Float64,
                "max_interval_s": pl.Float64}))
    allocations: pl.DataFrame | None = None
