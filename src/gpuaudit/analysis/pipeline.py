"""The analysis from end to end: stage 1 rollups (one SQL pass) → stage 2 pure functions → AnalysisResult.
This module orchestrates (what is computed from what, in which order); analysis/assemble.py turns the pieces
into the result."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from pathlib import Path
from typing import Any

import numpy as np

from gpuaudit.analysis import ledger as lg
from gpuaudit.analysis import utilization as ut
from gpuaudit.analysis.assemble import assemble
from gpuaudit.analysis.columns import GrowthColumns, TornadoColumns
from gpuaudit.analysis.confidence import CostSample, bootstrap, daily, resample_index
from gpuaudit.analysis.config import Config, load_config
from gpuaudit.analysis.consolidation import consolidate
from gpuaudit.analysis.decision import branches_between, evaluate
from gpuaudit.analysis.economics import Sensitivity
from gpuaudit.analysis.figure import Table
from gpuaudit.analysis.fleet import Measured, fleet, fleet_series
from gpuaudit.analysis.measure import measure
from gpuaudit.analysis.overrides import NONE, Applied, Overrides, apply
from gpuaudit.analysis.plans import OWNING
from gpuaudit.analysis.poolresult import pool_results
from gpuaudit.analysis.pools import Composed, Part, compose, compose_draws, pools_of, pricing, subset
from gpuaudit.analysis.quality import data_quality
from gpuaudit.analysis.recommend import Evidence, keeps_what_you_have, recommend
from gpuaudit.analysis.result import AnalysisResult, Consolidation, DecisionInputs
from gpuaudit.analysis.rightsize import right_size
from gpuaudit.analysis.scenarios import CostBlock, cost_block, cost_draws
from gpuaudit.analysis.sensitivity import growth_table, tornado
from gpuaudit.analysis.stage1.rollup import Rollups, load_rollups
from gpuaudit.errors import GpuauditError

ENGINES = ("duckdb", "spark")  # what runs stage 1's SQL


def analyze(
    root: Path | str,
    config: Config | None = None,
    overrides: Overrides = NONE,
    *,
    threads: int | None = None,
    engine: str = "duckdb",
    cache: bool = True,
) -> AnalysisResult:
    """Analyze the dataset at `root` (stage 1 reads it once; the rest works on small frames). `engine`: which
    SQL engine runs stage 1, `duckdb` (this machine) or `spark` (gpuaudit.analysis.stage1.spark); same rollups.
    `cache`: DuckDB's stage 1 reuses the rollup cache (stage1/cache.py) when it holds this exact snapshot."""
    if engine not in ENGINES:
        raise GpuauditError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    # bad options fail before the scan (minutes on a large dataset), not after it
    applied = apply(config or load_config(), overrides)
    if engine == "spark":
        from gpuaudit.analysis.stage1.spark import load_rollups as load_spark_rollups  # pyspark: the `spark` extra

        roll = load_spark_rollups(root)
    else:
        roll = load_rollups(root, threads=threads, cache=cache)
    return _stage2(roll, applied, root=str(root), now=None)


def analyze_rollups(roll: Rollups, cfg: Config, overrides: Overrides = NONE, *, root: str = "",
                    now: dt.datetime | None = None) -> AnalysisResult:
    """Stage 2 from rollups already read: no I/O."""
    return _stage2(roll, apply(cfg, overrides), root=root, now=now)


def _stage2(roll: Rollups, applied: Applied, *, root: str, now: dt.datetime | None) -> AnalysisResult:
    """Stage 2: everything from the rollups. The steps, in order; assemble() shapes the result."""
    cfg, current, data_residency = applied.cfg, applied.current, applied.data_residency
    share = cfg.decision.latency_sensitive_share
    latency_sensitive = applied.latency_sensitive
    ut.check_enough(roll, cfg, root)
    t = ut.totals(roll)
    _check_finite(t)
    tr = ut.trial(roll, t, cfg)
    me = measure(roll, tr, current=current, data_residency=data_residency, latency_share=share)
    use, led, mapped, demand, bucket_s, el = me.utilization, me.ledger, me.mapped, me.demand, me.bucket_s, me.elastic
    bd = ut.breakdowns(roll, t, demand, bucket_s)
    dq = data_quality(roll, t, tr, cfg, use.real_is_upper_bound, el)
    dq = dataclasses.replace(dq, warnings=dq.warnings + mapped.warnings)
    measured = me.measured
    specs = pools_of(roll)
    pr = pricing(cfg, specs)
    if pr.many:
        fleet(cfg, measured)  # a stated fleet smaller than the GPUs seen fails here, in the fleet's own terms
        pool_me = [measure(subset(roll, sp), tr, current=current, data_residency=data_residency, latency_share=share)
                   for sp in specs]
        parts = [Part(sp, pr.config(i), pm.measured) for i, (sp, pm) in enumerate(zip(specs, pool_me, strict=True))]
        composed = compose(cfg, parts, measured)
        block, comp = composed.block, composed

        def build(c: Config, growth: float) -> CostBlock:
            moved = [Part(p.spec, pr.config(i, c), p.m) for i, p in enumerate(parts)]
            return compose(c, moved, measured, growth, what_if=False).block
    else:
        cfg = pr.single_config()
        applied = dataclasses.replace(applied, cfg=cfg)
        pool_me, parts, comp = [me], [Part(specs[0], cfg, measured)] if specs else [], None
        block = cost_block(cfg, measured)

        def build(c: Config, growth: float) -> CostBlock:
            return cost_block(c, measured, growth, what_if=False)
    use = lg.believed(use, led, block.break_even.measured_billed)

    inputs = DecisionInputs(
        real_utilization=t.real_utilization, latency_sensitive=latency_sensitive, data_residency=data_residency,
        egress_gb_per_week=cfg.cloud.egress_gb_per_week, current=current,
        cloud_below=cfg.decision.cloud_below, on_prem_above=cfg.decision.on_prem_above,
        latency_sensitive_share=share,
    )
    rule, fired = evaluate(inputs)
    low = t.s_lower / t.w
    possible = branches_between(low, t.real_utilization, inputs)

    days = daily(roll.gpu_hours, tr.start.timestamp(), tr.days)
    a = cfg.analysis
    # fewer days than a day-block bootstrap needs: no resamples at all (bootstrap() says so)
    draws = a.bootstrap_resamples if days.height >= a.bootstrap_min_days else 0
    sample = _cost_sample(cfg, measured, block, days, draws, a.bootstrap_seed, comp, parts)
    conf = dataclasses.replace(bootstrap(days, inputs, a.bootstrap_resamples, a.bootstrap_seed, a.confidence_level,
                                         sample, a.bootstrap_min_days), real_is_upper_bound=use.real_is_upper_bound)
    # the tornado is about the plan the recommendation names: after a tie, staying as is
    tie_keep, _tie_usd = keeps_what_you_have(block.scenarios, block.cheapest, cfg.decision.tie_fraction,
                                             _spread(sample, a.confidence_level), data_residency)
    tornado_table = tornado(cfg, build, a.sensitivity_fraction, base=block,
                            plan="stay-as-is" if tie_keep else block.cheapest)
    sens = Sensitivity(fraction=a.sensitivity_fraction, tornado=tornado_table,
                       growth=growth_table(cfg, build, a.growth_rates))
    evidence = Evidence(
        confidence=conf, coverage=float(dq.coverage.value or 0.0),
        sensitivity_flips=tuple(f"{r[TornadoColumns.PARAMETER]} ({r[TornadoColumns.KEY]})" for r in tornado_table.rows
                                if r[TornadoColumns.CHANGES_CHEAPEST]),
        sensitivity_fraction=a.sensitivity_fraction, real_low=low, real_high=t.real_utilization,
        upper_bound=use.real_is_upper_bound, horizon_months=a.horizon_months, model_caveats=_model_caveats(cfg),
        growth_flip=_growth_flip(sens.growth, block.cheapest),
        tie_fraction=cfg.decision.tie_fraction, spread_usd=_spread(sample, a.confidence_level),
    )
    decision = recommend(rule, fired, inputs, tr, block.scenarios, block.cheapest, possible, evidence,
                         block.fleet.existing)
    if comp is not None:  # several models: the plan in counts per model
        plan = next(s for s in block.scenarios if s.id == (decision.recommended_scenario or block.cheapest))
        decision = dataclasses.replace(decision, headline=f"{decision.headline} Per model: "
                                       f"{plan.description[0].lower()}{plan.description[1:]}")
    lever = _consolidation(cfg, block, measured, demand, decision, t, bd)
    pool_hours = [subset(roll, sp).gpu_hours for sp in specs] if pr.many else [roll.gpu_hours]
    pool_days = [daily(h, tr.start.timestamp(), tr.days) for h in pool_hours] if pr.many else [days]
    sizes = [right_size(pr, p.spec.key, p.cfg, h) for p, h in zip(parts, pool_hours, strict=False)]
    pools = pool_results(pr, parts, pool_me, pool_days, comp, block, decision, inputs, sizes)
    return assemble(cfg, root=root, now=now, roll=roll, t=t, trial=tr, utilization=use, breakdowns=bd,
                    data_quality=dq, decision=decision, block=block, measured=measured, bucket_s=bucket_s,
                    sensitivity=sens, confidence=conf, consolidation=lever, ledger=led,
                    applied=applied, pools=pools, pricing=pr, composed=comp)


def _consolidation(cfg: Config, block: CostBlock, m: Measured, demand: Any, decision: Any, t: ut.Totals,
                   bd: Any) -> Consolidation:
    """The consolidation lever on the fleet-scaled SM-weighted demand (scaled bucket by bucket as held demand is;
    the elastic GPUs' share of it in proportion to their share of the held GPUs)."""
    in_use = demand["gpus_in_use"].to_numpy().astype(float)
    elastic = None
    if m.elastic_held is not None:
        elastic = np.where(m.held > 1e-12, in_use * m.elastic_held / np.maximum(m.held, 1e-12), 0.0)
    scaled, _ok = fleet_series(m, block.fleet, in_use, elastic)
    rec = next(s for s in block.scenarios if s.id == (decision.recommended_scenario or block.cheapest))
    return consolidate(cfg, block, scaled, rec, t.runtime_utilization, t.s / t.r if t.r > 0 else None,
                       t.idle_held, bd.per_user, latency_share=m.latency_share, data_residency=m.data_residency,
                       held=block.held)


def _check_finite(t: ut.Totals) -> None:
    """NaN or infinity in the data would make every figure meaningless: refuse with one line."""
    bad = [k for k, v in vars(t).items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        raise GpuauditError(f"the data holds non-finite values (NaN or infinity) in {', '.join(bad)}: check the "
                            "files `gpuaudit sql` lists for them")


def _cost_sample(cfg: Config, m: Measured, block: CostBlock, days: Any, resamples: int, seed: int,
                 comp: Composed | None = None, parts: list[Part] | None = None) -> CostSample:
    ids = [s.id for s in block.scenarios if not s.what_if or s.id == "all-cloud"]
    by_id = {s.id: s for s in block.scenarios}
    day_ids = days["day"].to_numpy().astype(np.int64)
    idx = resample_index(len(day_ids), resamples, seed) if resamples and len(day_ids) else np.zeros((0, 0), int)
    if not idx.size:
        draws = np.zeros((0, len(ids)))
    elif comp is not None and parts is not None:
        draws = compose_draws(comp, parts, idx, day_ids).totals
    else:
        draws = cost_draws(cfg, m, block, idx, day_ids).totals
    owning = np.array([i in OWNING and by_id[i].allowed and by_id[i].owned_gpus > 0 for i in ids])
    return CostSample(ids, draws, np.array([by_id[i].total.value or 0.0 for i in ids]),
                      np.array([by_id[i].allowed and not by_id[i].what_if for i in ids]), owning, block.cheapest)


def _spread(sample: CostSample, level: float) -> float:
    """Half the width of the day-resample interval of staying as is − the cheapest scenario (0 without
    resamples): how far the model's own answer moves with the days observed."""
    if not sample.draws.size or "stay-as-is" not in sample.ids or sample.cheapest not in sample.ids:
        return 0.0
    d = sample.draws[:, sample.ids.index("stay-as-is")] - sample.draws[:, sample.ids.index(sample.cheapest)]
    d = d[np.isfinite(d)]
    if not d.size:
        return 0.0
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(d, [tail, 100 - tail])
    return float(hi - lo) / 2


def _growth_flip(growth: Table, cheapest: str) -> tuple[float, str] | None:
    """The lowest demand growth of the growth table at which another scenario is the cheapest, if any."""
    col = GrowthColumns
    for row in sorted(growth.rows, key=lambda x: float(x[col.GROWTH_PER_YEAR])):
        g = float(row[col.GROWTH_PER_YEAR])
        if g > 0 and row[col.CHEAPEST] != cheapest:
            return g, str(row[col.CHEAPEST])
    return None


def _model_caveats(cfg: Config) -> tuple[str, ...]:
    """What the cost model leaves out for these settings."""
    months, life = cfg.analysis.horizon_months, cfg.on_prem.amortization_years
    if months <= life * 12 + 1e-9:
        return ()
    return (f"the {months}-month horizon outlasts the hardware's {life:g}-year amortization life: GPUs run on past "
            "it and no refresh is priced (match the horizon to your refresh plan, or lengthen the life)",)
