"""What the cost model needs of a set of rollups (the whole fleet, or one GPU model's pool): the trial's totals,
the ledger, the billed demand series and the measured power, as one `Measure`. One function builds it, so a
pool is measured exactly as the fleet is."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from gpuaudit.analysis import ledger as lg
from gpuaudit.analysis import utilization as ut
from gpuaudit.analysis.fleet import Measured
from gpuaudit.analysis.result import Deployment, Ledger, Trial, Utilization
from gpuaudit.analysis.stage1.frames import Rollups
from gpuaudit.analysis.stage1.slots import HOUR_S


@dataclass(frozen=True)
class Measure:
    """One set of rollups measured: `measured` is what the cost model reads; the rest is what the report and
    the ledger sections read of the same pass."""

    measured: Measured
    totals: ut.Totals
    utilization: Utilization
    ledger: Ledger
    mapped: lg.Mapped
    demand: pl.DataFrame
    bucket_s: float
    elastic: ut.Elastic


def measure(roll: Rollups, tr: Trial, *, current: Deployment, data_residency: bool, latency_share: float
            ) -> Measure:
    """Measure `roll` over the trial `tr` (the fleet's: a pool's days and buckets line up with the fleet's)."""
    t = ut.totals(roll)
    use = ut.utilization(roll, t)
    led, mapped = lg.ledger(roll.gpu_hours, roll.holders, roll.allocations, tr.start.timestamp(),
                            tr.end.timestamp(), use.real_is_upper_bound)
    demand, bucket_s = ut.demand_series(roll)
    # In the cloud you pay for what you allocate: with allocations, the billed demand is the allocated one.
    billed, billed_r = lg.billed_demand(mapped, demand, bucket_s, t.r)
    # Only a rented GPU can be elastic: an owned one exists all the time, so its silence is a coverage gap.
    el = ut.elastic(roll, demand) if current is Deployment.CLOUD else ut.NO_ELASTIC
    idle_w, held_w = ut.power_by_load(roll)
    measured = Measured(
        w=t.w, r=billed_r, s=t.s, s_lower=t.s_lower, gpus_seen=roll.gpu_hours["gpu_uuid"].n_unique(),
        gpu_equivalents=t.gpu_equivalents, held=billed,
        reporting=demand["gpus_reporting"].to_numpy().astype(float),
        day=ut.day_of(demand["bucket_s"].to_numpy(), tr.start.timestamp(), tr.days), dt_hours=bucket_s / HOUR_S,
        measured_w=t.average_power_w, current=current, data_residency=data_residency,
        latency_share=latency_share, idle_w=idle_w, held_w=held_w,
        elastic_held=demand["elastic_gpus_held"].to_numpy().astype(float) if el.gpus else None,
        elastic_reporting=demand["elastic_gpus_reporting"].to_numpy().astype(float) if el.gpus else None,
        elastic_gpus=el.gpus, elastic_equivalents=el.equivalents,
        in_use=demand["gpus_in_use"].to_numpy().astype(float),
    )
    return Measure(measured, t, use, led, mapped, demand, bucket_s, el)
