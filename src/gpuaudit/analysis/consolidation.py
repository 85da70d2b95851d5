"""The consolidation lever: how many GPUs the measured work fits on, what that would save, and how to get there.

Shown beside the buy/rent answer, never mixed into "cheapest": it needs the team to change how it holds GPUs.
The work is the packed demand the "if behaviour changes" plans are built on (plans.Context.packed: per bucket the
fleet-scaled SM-weighted demand ÷ analysis.consolidation_target, never more than the GPUs held), and it fits on
the GPUs `all-on-prem-if-packed` owns. The consolidated plan IS the what-if in the recommended plan's shape, so
the lever and the what-if table give one size and one price for it (issue 26.4), and the saving (the recommended
plan − it) is consolidation's alone: a plan that rents nothing becomes all-on-prem-if-packed, one that owns
nothing all-cloud-if-packed, a hybrid hybrid-if-packed (re-sized on the packed work, its latency floor kept).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuaudit.analysis.economics import CostScenario
from gpuaudit.analysis.figure import Table
from gpuaudit.analysis.plans import is_cloud_used
from gpuaudit.analysis.result import Consolidation

_TOP_HOLDERS = 3


# The recommended plan's shape on the packed work: which "if behaviour changes" plan consolidation is.
_SHAPES = {(False, True): "all-on-prem-if-packed", (True, False): "all-cloud-if-packed",
           (True, True): "hybrid-if-packed", (False, False): "all-on-prem-if-packed"}


def consolidate(recommended: CostScenario, scenarios: Sequence[CostScenario], in_use_peak: float, target: float,
                existing: int, runtime_utilization: float, efficiency_while_held: float | None,
                idle_held_gpu_hours: float, per_user: Table, latency_floor: int = 0) -> Consolidation | None:
    """`recommended`: the recommended plan, whose shape the consolidated plan keeps; `scenarios`: the block's
    plans with its "if behaviour changes" ones (None when they were not built); `in_use_peak`: the fleet-scaled
    SM-weighted demand's peak, the tile's source; `latency_floor`: the packed work's latency floor (what a plan
    that rents must own)."""
    by_id = {s.id: s for s in scenarios}
    rents, owns = is_cloud_used(recommended), recommended.owned_gpus > 0
    shaped = by_id.get(_SHAPES[(rents, owns)])
    fits = by_id.get("all-on-prem-if-packed")
    if shaped is None or fits is None:
        return None
    recommended_usd = float(recommended.total.value or 0.0)
    n_fit, n_own = fits.owned_gpus, shaped.owned_gpus
    usd = float(shaped.total.value or 0.0)
    rented_gpu_hours = float(shaped.cloud_gpu_hours) if is_cloud_used(shaped) else 0.0
    sold = (f" (keep {min(n_own, existing):,} of the {existing:,} owned, sell the rest)"
            if existing > n_own > 0 else "")
    if not is_cloud_used(shaped):
        plan = f"own {n_own:,} GPUs{sold}"
    elif n_own:
        why = " for the latency-sensitive work" if n_own == latency_floor > 0 else ""
        plan = (f"own {n_own:,} GPUs{sold}{why} and rent the work above them at {target:.0%} utilization (at most "
                f"{n_fit:,} GPUs at once)")
    else:
        plan = f"rent the work at {target:.0%} utilization (at most {n_fit:,} GPUs at once)"
    holders = sorted((r for r in per_user.rows if float(r.get("idle_held_gpu_hours") or 0) > 0),
                     key=lambda r: (-float(r["idle_held_gpu_hours"]), str(r["user"])))[:_TOP_HOLDERS]
    top = tuple(f"{r['user']} ({float(r['idle_held_gpu_hours']):,.0f} GPU-h)" for r in holders)
    how = []
    if idle_held_gpu_hours > 0:
        how.append(f"release idle holds: {idle_held_gpu_hours:,.0f} GPU-hours were held with the SMs idle"
                   + (f"; most by {', '.join(top)}" if top else ""))
    if efficiency_while_held is not None and efficiency_while_held < 0.5:
        how.append(f"share GPUs (MIG slices or time-slicing): a held GPU does {efficiency_while_held:.0%} of its "
                   "compute, so several jobs fit on one")
    if runtime_utilization < 0.9:
        how.append("autoscale: release GPUs no job holds" if n_own == 0 else  # the plan rents it all
                   "pack jobs onto fewer GPUs with the scheduler and power down or sell the rest")
    return Consolidation(
        fits_on_gpus=n_fit, peak_in_use_gpus=in_use_peak, target_utilization=target, plan=plan, plan_usd=usd,
        recommended_usd=recommended_usd, saving_usd=recommended_usd - usd, how=tuple(how),
        top_idle_holders=top, owned_gpus=n_own, cloud_gpu_hours=rented_gpu_hours,
        recommended_owned_gpus=recommended.owned_gpus, recommended_cloud_gpu_hours=recommended.cloud_gpu_hours,
    )
