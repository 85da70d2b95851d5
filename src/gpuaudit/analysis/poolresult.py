"""The per-model pools as the result reports them (result.Pool): each pool's utilization and its interval, its
own tree branch, its plans, and what the fleet's recommended plan does with its GPUs."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from gpuaudit.analysis.confidence import real_interval
from gpuaudit.analysis.decision import branch_for
from gpuaudit.analysis.measure import Measure
from gpuaudit.analysis.pools import Composed, Part, Pricing, action, price_note
from gpuaudit.analysis.result import Decision, DecisionInputs, Pool, RightSize
from gpuaudit.analysis.scenarios import CostBlock


def pool_results(pr: Pricing, parts: Sequence[Part], measures: Sequence[Measure], days: Sequence[pl.DataFrame],
                 comp: Composed | None, block: CostBlock, decision: Decision, inputs: DecisionInputs,
                 right_sizes: Sequence[RightSize | None] = ()) -> tuple[Pool, ...]:
    """One Pool per model pool, in the pools' order (most GPUs first). With one pool its plans are the fleet's."""
    a = pr.base.analysis
    fleet_plan = decision.recommended_scenario or block.cheapest
    out: list[Pool] = []
    for i, (part, me) in enumerate(zip(parts, measures, strict=True)):
        b = comp.blocks[i] if comp is not None else block
        plan = comp.picks[fleet_plan][i] if comp is not None else fleet_plan
        chosen = next(s for s in b.scenarios if s.id == plan)
        t = me.totals
        real = t.s / t.w if t.w > 0 else 0.0
        ci = real_interval(days[i], a.bootstrap_resamples, a.bootstrap_seed, a.confidence_level,
                           a.bootstrap_min_days) if days[i].height else None
        u = b.break_even.held
        out.append(Pool(
            model=part.spec.key, gpu_name=part.spec.gpu_name, gpus=part.spec.gpus,
            observed_gpu_hours=t.w, held_gpu_hours=t.r, real_gpu_hours=t.s,
            held_utilization=t.r / t.w if t.w > 0 else 0.0, real_utilization=real,
            real_low=ci.low if ci is not None else None, real_high=ci.high if ci is not None else None,
            real_is_upper_bound=me.utilization.real_is_upper_bound,
            branch=str(branch_for(real, inputs)),
            scenarios=b.scenarios, cheapest=b.cheapest, recommendation=plan,
            action=action(part.spec.key, chosen, b.fleet.existing), owned_gpus=chosen.owned_gpus,
            break_even_billed_utilization=u if u is not None and u <= 1.0 else None,
            usd_per_gpu_hour=b.prices.list, flexible_usd_per_gpu_hour=b.prices.flexible,
            hardware_usd_per_gpu=part.cfg.on_prem.hardware_usd_per_gpu, price_source=price_note(pr, i),
            right_size=right_sizes[i] if i < len(right_sizes) else None,
        ))
    return tuple(out)
