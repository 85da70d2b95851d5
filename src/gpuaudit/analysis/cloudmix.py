"""The mix a plan's cloud GPU-hours were actually priced at, in shares a CFO can check against the bill.

The configured shares (cloud.spot_share, reserved_share, capacity_block_share) are not what a plan pays: a plan
reserves only the GPUs that are cheaper reserved (costs.best_reservation: none when a reserved hour costs more
than a flexible one), and the configured shares of what is not reserved price every other hour. So with the
default 70 % spot / 30 % reserved and a reserved hour dearer than a spot one, renting is priced as 100 % spot.
`priced_mix` takes a plan's price inputs (one pool's prices, its reserved and total cloud GPU-hours), so each
model pool can state its own mix.
"""

from __future__ import annotations

import dataclasses

from gpuaudit.analysis.config import CloudConfig
from gpuaudit.analysis.costs import CloudPrices
from gpuaudit.analysis.economics import PricedMix

_EPS = 1e-9


def priced_mix(
    prices: CloudPrices, cloud: CloudConfig, reserved_gpu_hours: float, cloud_gpu_hours: float
) -> PricedMix | None:
    """The mix `cloud_gpu_hours` (of which `reserved_gpu_hours` reserved 24/7) were priced at with `prices`;
    None when the plan rents nothing."""
    if cloud_gpu_hours <= _EPS:
        return None
    reserved = min(max(reserved_gpu_hours / cloud_gpu_hours, 0.0), 1.0)
    rest = 1.0 - cloud.reserved_share
    if rest > 1e-12:  # the flexible hours split as costs.cloud_prices prices them
        spot, block = cloud.spot_share / rest, cloud.capacity_block_share / rest
    else:  # everything configured reserved: what spills over is bought on demand
        spot, block = 0.0, 0.0
    flexible = 1.0 - reserved
    shares = (reserved, flexible * spot, flexible * block, max(0.0, flexible * (1.0 - spot - block)))
    usd = reserved * prices.reserved + flexible * prices.flexible
    mix = PricedMix(
        *shares,
        usd_per_gpu_hour=usd,
        on_demand_usd_per_gpu_hour=prices.list,
        spot_interruptions_per_hour=cloud.spot_interruptions_per_hour,
        spot_lost_hours_per_interruption=cloud.spot_lost_hours_per_interruption,
        text="",
    )
    return dataclasses.replace(mix, text=_mix_text(mix))


def combined(mixes: list[tuple[PricedMix | None, float]]) -> PricedMix | None:
    """The mix of a fleet plan made of several pools' plans, each (mix, its cloud GPU-hours): shares and prices
    weighted by the GPU-hours each pool rents. None when none rents."""
    parts = [(m, h) for m, h in mixes if m is not None and h > _EPS]
    total = sum(h for _, h in parts)
    if not parts or total <= _EPS:
        return None

    def avg(name: str) -> float:
        return float(sum(getattr(m, name) * h for m, h in parts) / total)
    mix = PricedMix(avg("reserved_share"), avg("spot_share"), avg("capacity_block_share"), avg("on_demand_share"),
                    avg("usd_per_gpu_hour"), avg("on_demand_usd_per_gpu_hour"), parts[0][0].spot_interruptions_per_hour,
                    parts[0][0].spot_lost_hours_per_interruption, text="")
    text = _mix_text(mix) + (" (the models' own, weighted by the GPU-hours each rents)" if len(parts) > 1 else "")
    return dataclasses.replace(mix, text=text)


def _pct(share: float) -> str:
    whole = round(share * 100)
    if 0 < share < 0.005:
        return "under 1 %"
    if whole == 100 and share < 1 - _EPS:
        return "over 99 %"
    return f"{whole} %"


def _mix_text(mix: PricedMix) -> str:
    """The mix actually priced, its effective price and the list price it derives from: "priced as 100 % spot
    at $3.17/GPU-h; on demand $6.88/GPU-h"."""
    parts = [
        (mix.reserved_share, "reserved 24/7"),
        (mix.spot_share, "spot"),
        (mix.capacity_block_share, "capacity blocks"),
        (mix.on_demand_share, "on demand"),
    ]
    shown = [f"{_pct(s)} {name}" for s, name in parts if s > _EPS]
    on_average = " on average" if len(shown) > 1 else ""
    return (
        f"priced as {', '.join(shown)} at ${mix.usd_per_gpu_hour:,.2f}/GPU-h{on_average}; "
        f"on demand ${mix.on_demand_usd_per_gpu_hour:,.2f}/GPU-h"
    )


def spot_caveat(label: str, mix: PricedMix | None) -> str | None:
    """The caveat for a plan that buys spot hours: long training jobs are priced as if interrupted at the
    configured rate, and a job that cannot checkpoint loses more."""
    if mix is None or mix.spot_share <= _EPS:
        return None
    return (
        f"{label} buys {_pct(mix.spot_share)} of its cloud GPU-hours on spot: long training jobs on spot are "
        f"priced as interrupted {mix.spot_interruptions_per_hour:g} times per hour "
        f"(cloud.spot_interruptions_per_hour), each interruption redoing "
        f"{mix.spot_lost_hours_per_interruption:g} h of work (cloud.spot_lost_hours_per_interruption); a job that "
        f"checkpoints less often loses more (on demand: ${mix.on_demand_usd_per_gpu_hour:,.2f}/GPU-h)"
    )
