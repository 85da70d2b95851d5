"""The consolidation lever: how many GPUs the measured work fits on, what that would save, and how to get there.

Shown beside the buy/rent answer, never mixed into "cheapest": it needs the team to change how it holds GPUs.
The work is the fleet-scaled SM-weighted demand (GPUs in use, Σ sm_active × gpu_fraction per bucket) at the
target utilization (analysis.consolidation_target, 0.7: `1 − target` headroom), never more than the GPUs held in
the bucket (it is their work); it fits on the peak of that, never more GPUs than the fleet has. The consolidated
plan is the recommended plan's shape on the packed work, so the saving (the recommended plan − it) is
consolidation's alone: a plan that rents nothing owns the GPUs the work fits on (keeping the owned ones first), a
plan that owns nothing rents the work, a plan that does both (hybrid) is re-sized on the packed work (the best N,
as hybrid.size does). What rules renting out rules it out here too: under data residency (or when all work is
latency-sensitive) the consolidated plan owns what the work fits on, and a latency-sensitive share keeps its peak
(the latency floor) on owned GPUs.
"""

from __future__ import annotations

import math

import numpy as np

from gpuaudit.analysis import costs
from gpuaudit.analysis.config import Config
from gpuaudit.analysis.economics import CostScenario
from gpuaudit.analysis.figure import Table
from gpuaudit.analysis.fleet import latency_floor
from gpuaudit.analysis.hybrid import size
from gpuaudit.analysis.plans import cloud_of, is_cloud_used
from gpuaudit.analysis.result import Consolidation
from gpuaudit.analysis.scenarios import CostBlock

_TOP_HOLDERS = 3


def consolidate(cfg: Config, block: CostBlock, in_use: np.ndarray, recommended: CostScenario,
                runtime_utilization: float, efficiency_while_held: float | None, idle_held_gpu_hours: float,
                per_user: Table, *, held: np.ndarray, latency_share: float = 0.0,
                data_residency: bool = False) -> Consolidation:
    """`in_use`: the fleet-scaled SM-weighted demand per bucket and `held` the held GPUs in the same buckets
    (block.held); `recommended`: the recommended plan, whose shape the consolidated plan keeps."""
    recommended_usd = float(recommended.total.value or 0.0)
    recommended_rents, recommended_owns = is_cloud_used(recommended), recommended.owned_gpus > 0
    target = cfg.analysis.consolidation_target
    tl, fl = block.timeline, block.fleet
    peak = float(np.max(in_use)) if in_use.size else 0.0
    # the packed work never needs more GPUs than were held in the bucket (it is those GPUs' work)
    work = np.minimum(in_use / target, held)
    n_fit = min(max(1, math.ceil(float(work.max(initial=0.0)) - 1e-9)), max(fl.gpus, 1))
    work = np.minimum(work, float(n_fit))
    power = block.power or costs.PowerModel(block.watts, block.watts, block.watts)
    floor = n_fit if data_residency or latency_share >= 1 else latency_floor(latency_share, work)
    # The recommended plan's shape on the packed work, so the saving is consolidation's alone: owning only when it
    # rents nothing (or renting is ruled out), renting only when it owns nothing, else its hybrid split re-sized.
    if floor >= n_fit or not recommended_rents:
        n_own = n_fit
    elif recommended_owns:
        bill0, _k0, _m0 = cloud_of(cfg, tl, work, block.prices)
        rent_all = float(sum(bill0.values())) + float(costs.owned_total(costs.owned_cost(
            cfg, tl, 0.0, block.watts, fl.existing, fl.age_years))[0])
        n_own = max(size(cfg, tl, work, rent_all, power, fl.existing, fl.age_years, min_owned=floor).n_owning,
                    floor, 1)
    else:
        n_own = floor
    parts = costs.owned_cost(cfg, tl, float(n_own), power.watts(np.minimum(work, n_own), float(n_own))
                             if n_own else block.watts, fl.existing, fl.age_years)
    usd = float(costs.owned_total(parts)[0])
    rented_gpu_hours = 0.0
    sold = (f" (keep {min(n_own, fl.existing):,} of the {fl.existing:,} owned, sell the rest)"
            if fl.existing > n_own > 0 else "")
    if n_own >= n_fit:
        plan = f"own {n_fit:,} GPUs{sold}"
    else:
        bill, _k, mean = cloud_of(cfg, tl, work - n_own, block.prices)
        usd += float(sum(bill.values()))
        rented_gpu_hours = mean * costs.HOURS_PER_MONTH * tl.months  # as a scenario's cloud_gpu_hours
        why = " for the latency-sensitive work" if n_own == floor and floor > 0 else ""
        plan = (f"own {n_own:,} GPUs{sold}{why} and rent the work above them at {target:.0%} utilization (at most "
                f"{n_fit:,} GPUs at once)" if n_own else
                f"rent the work at {target:.0%} utilization (at most {n_fit:,} GPUs at once)")
    holders = sorted((r for r in per_user.rows if float(r.get("idle_held_gpu_hours") or 0) > 0),
                     key=lambda r: (-float(r["idle_held_gpu_hours"]), str(r["user"])))[:_TOP_HOLDERS]
    top = tuple(f"{r['user']} ({float(r['idle_held_gpu_hours']):,.0f} GPU-h)" for r in holders)
    how = []
    if idle_held_gpu_hours > 0:
        how.append(f"end idle allocations: {idle_held_gpu_hours:,.0f} GPU-hours were held with the SMs idle"
                   + (f"; most by {', '.join(top)}" if top else ""))
    if efficiency_while_held is not None and efficiency_while_held < 0.5:
        how.append(f"share GPUs (MIG slices or time-slicing): a held GPU does {efficiency_while_held:.0%} of its "
                   "compute, so several jobs fit on one")
    if runtime_utilization < 0.9:
        how.append("autoscale: release GPUs no job holds" if n_own == 0 else  # the plan rents it all
                   "pack jobs onto fewer GPUs with the scheduler and power down or sell the rest")
    return Consolidation(
        fits_on_gpus=n_fit, peak_in_use_gpus=peak, target_utilization=target, plan=plan, plan_usd=usd,
        recommended_usd=recommended_usd, saving_usd=recommended_usd - usd, how=tuple(how),
        top_idle_holders=top, owned_gpus=n_own, cloud_gpu_hours=rented_gpu_hours,
        recommended_owned_gpus=recommended.owned_gpus, recommended_cloud_gpu_hours=recommended.cloud_gpu_hours,
    )
