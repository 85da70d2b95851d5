"""The consolidation lever: how many GPUs the measured work fits on, what that would save, and how to get there.

Shown beside the buy/rent answer, never mixed into "cheapest": it needs the team to change how it holds GPUs.
The work is the fleet-scaled SM-weighted demand (GPUs in use, Σ sm_active × gpu_fraction per bucket); it fits on
ceil(peak ÷ target utilization) GPUs, the target leaving `1 − target` headroom (analysis.consolidation_target,
0.7). The consolidated plan owns that many GPUs (keeping the owned ones first) when the fleet is owned today, or
rents the work at the target utilization when it runs in the cloud; saving = the recommended plan − it. What
rules renting out rules it out here too: under data residency (or when all work is latency-sensitive) a cloud
fleet's consolidated plan owns the GPUs the work fits on, and a latency-sensitive share keeps its peak (the latency
floor) on owned GPUs and rents only the rest. The work never fits on more GPUs than the fleet has.
"""

from __future__ import annotations

import math

import numpy as np

from gpuaudit.analysis import costs
from gpuaudit.analysis.config import Config
from gpuaudit.analysis.result import Consolidation, Deployment, Table
from gpuaudit.analysis.scenarios import CostBlock, _cloud_of, latency_floor

TOP_HOLDERS = 3


def consolidate(cfg: Config, block: CostBlock, in_use: np.ndarray, current: Deployment, recommended_usd: float,
                runtime_utilization: float, efficiency_while_held: float | None, idle_held_gpu_hours: float,
                per_user: Table, *, latency_share: float = 0.0, data_residency: bool = False) -> Consolidation:
    """`in_use`: the fleet-scaled SM-weighted demand per bucket (the same buckets as block.held)."""
    target = cfg.analysis.consolidation_target
    tl, fl = block.timeline, block.fleet
    peak = float(np.max(in_use)) if in_use.size else 0.0
    n_fit = min(max(1, math.ceil(peak / target - 1e-9)), max(fl.gpus, 1))  # never more GPUs than the fleet has
    work = np.minimum(in_use / target, float(n_fit))
    power = block.power or costs.PowerModel(block.watts, block.watts, block.watts)
    if current is Deployment.ON_PREM or data_residency or latency_share >= 1:
        n_own = n_fit  # renting it is not allowed (or the fleet is owned): own what the work fits on
    else:
        n_own = latency_floor(latency_share, work)
    parts = costs.owned_cost(cfg, tl, float(n_own), power.watts(np.minimum(work, n_own), float(n_own))
                             if n_own else block.watts, fl.existing, fl.age_years)
    usd = float(costs.owned_total(parts)[0])
    sold = (f" (keep {min(n_own, fl.existing):,} of the {fl.existing:,} owned, sell the rest)"
            if fl.existing > n_own > 0 else "")
    if n_own >= n_fit:
        plan = f"own {n_fit:,} GPUs{sold}"
    else:
        bill, _k, _mean = _cloud_of(cfg, tl, work - n_own, block.prices)
        usd += float(sum(bill.values()))
        plan = (f"own {n_own:,} GPUs{sold} for the latency-sensitive work and rent the rest at {target:.0%} "
                f"utilization (at most {n_fit:,} GPUs at once)" if n_own else
                f"rent the work at {target:.0%} utilization (at most {n_fit:,} GPUs at once)")
    holders = sorted((r for r in per_user.rows if float(r.get("idle_held_gpu_hours") or 0) > 0),
                     key=lambda r: (-float(r["idle_held_gpu_hours"]), str(r["user"])))[:TOP_HOLDERS]
    top = tuple(f"{r['user']} ({float(r['idle_held_gpu_hours']):,.0f} GPU-h)" for r in holders)
    how = []
    if idle_held_gpu_hours > 0:
        how.append(f"end idle allocations: {idle_held_gpu_hours:,.0f} GPU-hours were held with the SMs idle"
                   + (f"; most by {', '.join(top)}" if top else ""))
    if efficiency_while_held is not None and efficiency_while_held < 0.5:
        how.append(f"share GPUs (MIG slices or time-slicing): a held GPU does {efficiency_while_held:.0%} of its "
                   "compute, so several jobs fit on one")
    if runtime_utilization < 0.9:
        how.append("autoscale: release GPUs no job holds" if current is Deployment.CLOUD else
                   "pack jobs onto fewer GPUs with the scheduler and power down or sell the rest")
    return Consolidation(
        fits_on_gpus=n_fit, peak_in_use_gpus=peak, target_utilization=target, plan=plan, plan_usd=usd,
        recommended_usd=recommended_usd, saving_usd=recommended_usd - usd, how=tuple(how),
        top_idle_holders=top,
    )
