"""The analysis from end to end: stage 1 rollups (one SQL pass) → stage 2 pure functions → AnalysisResult.
This module orchestrates (what is computed from what, in which order); analysis/assemble.py turns the pieces
into the result."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gpuaudit.analysis import facts
from gpuaudit.analysis import ledger as lg
from gpuaudit.analysis import utilization as ut
from gpuaudit.analysis.assemble import assemble
from gpuaudit.analysis.columns import GrowthColumns, TornadoColumns
from gpuaudit.analysis.confidence import CostSample, bootstrap, resample_index
from gpuaudit.analysis.config import Config, load_config
from gpuaudit.analysis.consolidation import consolidate
from gpuaudit.analysis.decision import branches_between, evaluate
from gpuaudit.analysis.economics import Sensitivity
from gpuaudit.analysis.figure import Table
from gpuaudit.analysis.fleet import Measured, fleet, in_use_series, latency_floor
from gpuaudit.analysis.measure import Measure
from gpuaudit.analysis.overrides import NONE, Applied, Overrides, apply
from gpuaudit.analysis.plans import OWNING, packed_demand
from gpuaudit.analysis.poolresult import pool_results
from gpuaudit.analysis.pools import (
    Composed,
    Part,
    PoolSpec,
    Pricing,
    compose,
    compose_draws,
    pricing,
)
from gpuaudit.analysis.recommend import Evidence, keeps_what_you_have, recommend
from gpuaudit.analysis.result import (
    AnalysisResult,
    Confidence,
    Consolidation,
    DataQuality,
    Decision,
    DecisionInputs,
    Pool,
    Trial,
)
from gpuaudit.analysis.rightsize import right_size
from gpuaudit.analysis.scenarios import CostBlock, cost_block, cost_draws
from gpuaudit.analysis.sensitivity import growth_table, tornado
from gpuaudit.analysis.stage1.rollup import Rollups, load_keyed
from gpuaudit.errors import GpuauditError

_ENGINES = ("duckdb", "spark")  # what runs stage 1's SQL


def analyze(
    root: Path | str,
    config: Config | None = None,
    overrides: Overrides = NONE,
    *,
    threads: int | None = None,
    engine: str = "duckdb",
    cache: bool = True,
    stamp_of: Callable[[], str | None] | None = None,
) -> AnalysisResult:
    """Analyze the dataset at `root` (stage 1 reads it once; the rest works on small frames). `engine`: which
    SQL engine runs stage 1, `duckdb` (this machine) or `spark` (gpuaudit.analysis.stage1.spark); same rollups.
    `cache`: DuckDB's stage 1 reuses the rollup cache (stage1/cache.py) when it holds this exact snapshot, and
    stage 2 its price-free results kept for that entry (analysis/facts.py); `stamp_of` gives the dataset's
    stamp where the caller began taking it (store.reader.StampAhead)."""
    if engine not in _ENGINES:
        raise GpuauditError(f"--engine must be one of {', '.join(_ENGINES)}, got {engine!r}")
    # bad options fail before the scan (minutes on a large dataset), not after it
    applied = apply(config or load_config(), overrides)
    k = facts.knobs(applied)
    if engine == "spark":
        from gpuaudit.analysis.stage1.spark import load_rollups as load_spark_rollups  # pyspark: the `spark` extra

        return _stage2(facts.read(load_spark_rollups(root), k, str(root)), applied, root=str(root), now=None)
    known = None
    if cache:
        from gpuaudit.analysis.stage1 import cache as rcache

        known = rcache.known(root, stamp_of)
        kept = facts.recall(known.key, k)  # a re-run of this snapshot: neither scan nor rollups read
        if kept is not None:
            facts.say(kept)
            return _stage2(kept, applied, root=str(root), now=None)
    roll, token = load_keyed(root, threads=threads, cache=cache, known=known)
    # the entry found by its listing (a stamp not recorded): its memo may be there; one asked already is not
    f = facts.recall(token, k) if known is None or token != known.key else None
    if f is None:
        f = facts.read(roll, k, str(root))
        facts.keep(token, k, f)
    return _stage2(f, applied, root=str(root), now=None)


def analyze_rollups(roll: Rollups, cfg: Config, overrides: Overrides = NONE, *, root: str = "",
                    now: dt.datetime | None = None) -> AnalysisResult:
    """Stage 2 from rollups already read: no I/O."""
    applied = apply(cfg, overrides)
    return _stage2(facts.read(roll, facts.knobs(applied), root), applied, root=root, now=now)


def _stage2(f: facts.Facts, applied: Applied, *, root: str, now: dt.datetime | None) -> AnalysisResult:
    """Stage 2 from the rollups' price-free reading: the steps, in order; assemble() shapes the result."""
    cfg, t, tr, me, bd, dq = applied.cfg, f.totals, f.trial, f.me, f.breakdowns, f.data_quality
    share = cfg.decision.latency_sensitive_share
    p = _priced(f, applied)
    cfg, block = p.applied.cfg, p.block
    use = lg.believed(me.utilization, me.ledger, block.break_even.measured_billed)
    inputs = _decision_inputs(p.applied, t, share)
    sample, conf = _confidence(p, me.measured, f.days, inputs, use.real_is_upper_bound)
    sens = _sensitivity(p, sample)
    decision = _decision(p, t, tr, inputs, conf, dq, sens, sample, use.real_is_upper_bound)
    lever = _consolidation(cfg, block, me.measured, decision, t, bd)
    pools = _pools(f, p, decision, inputs)
    return assemble(cfg, root=root, now=now, t=t, trial=tr, utilization=use, breakdowns=bd,
                    data_quality=dq, decision=decision, block=block, measured=me.measured, bucket_s=me.bucket_s,
                    sensitivity=sens, confidence=conf, consolidation=lever, ledger=me.ledger,
                    applied=p.applied, pools=pools, pricing=p.pricing, composed=p.comp, jobs=f.jobs,
                    unheld_real_s=f.unheld_real_s)


@dataclasses.dataclass(frozen=True)
class _Priced:
    """The cost side of stage 2: the settings as priced (one GPU model's prices folded in), each pool's
    measurement and part, the composition of several pools (None for one), the cost block, and `build`:
    the block again under other settings or a demand growth (the tornado's and the growth table's)."""

    applied: Applied
    pricing: Pricing
    specs: tuple[PoolSpec, ...]
    pool_me: list[Measure]
    parts: list[Part]
    comp: Composed | None
    block: CostBlock
    build: Callable[[Config, float], CostBlock]


def _priced(f: facts.Facts, applied: Applied) -> _Priced:
    """The fleet priced: pool by pool at each model's prices when it holds several models, else at the one."""
    cfg, measured, specs = applied.cfg, f.me.measured, f.specs
    pr = pricing(cfg, specs)
    if pr.many:
        fleet(cfg, measured)  # a stated fleet smaller than the GPUs seen fails here, in the fleet's own terms
        pool_me = list(f.pool_me)
        parts = [Part(sp, pr.config(i), pm.measured) for i, (sp, pm) in enumerate(zip(specs, pool_me, strict=True))]
        composed = compose(cfg, parts, measured)

        def build(c: Config, growth: float) -> CostBlock:
            moved = [Part(p.spec, pr.config(i, c), p.m) for i, p in enumerate(parts)]
            return compose(c, moved, measured, growth, what_if=False).block

        return _Priced(applied, pr, specs, pool_me, parts, composed, composed.block, build)
    cfg = pr.single_config()
    block = cost_block(cfg, measured)
    if cfg.load_power is not None and block.power_source == cfg.load_power[2]:  # the fallback followed load
        idle, busy, where = cfg.load_power
        cfg = dataclasses.replace(cfg, sources={**cfg.sources, "on_prem.fallback_watts_per_gpu": (
            f"{where}: idle {idle:g} W, busy {busy:g} W, weighted by the share of GPU-hours held (no power "
            "measured)")})

    def build_one(c: Config, growth: float) -> CostBlock:
        return cost_block(c, measured, growth, what_if=False)

    return _Priced(dataclasses.replace(applied, cfg=cfg), pr, specs, [f.me],
                   [Part(specs[0], cfg, measured)] if specs else [], None, block, build_one)


def _decision_inputs(applied: Applied, t: ut.Totals, share: float) -> DecisionInputs:
    """What the decision tree reads; `share`: the latency-sensitive share as configured, before pricing."""
    cfg = applied.cfg
    return DecisionInputs(
        real_utilization=t.real_utilization, latency_sensitive=applied.latency_sensitive,
        data_residency=applied.data_residency, egress_gb_per_week=cfg.cloud.egress_gb_per_week,
        current=applied.current, cloud_below=cfg.decision.cloud_below, on_prem_above=cfg.decision.on_prem_above,
        latency_sensitive_share=share,
    )


def _confidence(p: _Priced, measured: Measured, days: Any, inputs: DecisionInputs,
                upper_bound: bool) -> tuple[CostSample, Confidence]:
    """The day-resampled costs and the confidence of the utilization, the tree and the cheapest plan."""
    a = p.applied.cfg.analysis
    # fewer days than a day-block bootstrap needs: no resamples at all (bootstrap() says so)
    draws = a.bootstrap_resamples if days.height >= a.bootstrap_min_days else 0
    sample = _cost_sample(p.applied.cfg, measured, p.block, days, draws, a.bootstrap_seed, p.comp, p.parts)
    conf = dataclasses.replace(bootstrap(days, inputs, a.bootstrap_resamples, a.bootstrap_seed, a.confidence_level,
                                         sample, a.bootstrap_min_days), real_is_upper_bound=upper_bound)
    return sample, conf


def _sensitivity(p: _Priced, sample: CostSample) -> Sensitivity:
    """The tornado and the growth table; the tornado is about the plan the recommendation names: after a tie,
    staying as is."""
    cfg, block = p.applied.cfg, p.block
    a = cfg.analysis
    tie_keep, _tie_usd = keeps_what_you_have(block.scenarios, block.cheapest, cfg.decision.tie_fraction,
                                             _spread(sample, a.confidence_level), p.applied.data_residency)
    tornado_table = tornado(cfg, p.build, a.sensitivity_fraction, base=block,
                            plan="stay-as-is" if tie_keep else block.cheapest)
    return Sensitivity(fraction=a.sensitivity_fraction, tornado=tornado_table,
                       growth=growth_table(cfg, p.build, a.growth_rates))


def _decision(p: _Priced, t: ut.Totals, tr: Trial, inputs: DecisionInputs, conf: Confidence, dq: DataQuality,
              sens: Sensitivity, sample: CostSample, upper_bound: bool) -> Decision:
    """The decision tree's rule and the one recommendation, with the evidence behind it."""
    cfg, block = p.applied.cfg, p.block
    a = cfg.analysis
    rule, fired = evaluate(inputs)
    low = t.s_lower / t.w
    possible = branches_between(low, t.real_utilization, inputs)
    evidence = Evidence(
        confidence=conf, coverage=float(dq.coverage.value or 0.0),
        sensitivity_flips=tuple(f"{r[TornadoColumns.PARAMETER]} ({r[TornadoColumns.KEY]})"
                                for r in sens.tornado.rows if r[TornadoColumns.CHANGES_CHEAPEST]),
        sensitivity_fraction=a.sensitivity_fraction, real_low=low, real_high=t.real_utilization,
        upper_bound=upper_bound, horizon_months=a.horizon_months, model_caveats=_model_caveats(cfg),
        growth_flip=_growth_flip(sens.growth, block.cheapest),
        tie_fraction=cfg.decision.tie_fraction, spread_usd=_spread(sample, a.confidence_level),
        provisional_below_days=cfg.decision.provisional_below_days,
    )
    decision = recommend(rule, fired, inputs, tr, block.scenarios, block.cheapest, possible, evidence,
                         block.fleet.existing)
    if p.comp is not None:  # several models: the plan in counts per model
        plan = next(s for s in block.scenarios if s.id == (decision.recommended_scenario or block.cheapest))
        decision = dataclasses.replace(decision, headline=f"{decision.headline} Per model: "
                                       f"{plan.description[0].lower()}{plan.description[1:]}")
    return decision


def _pools(f: facts.Facts, p: _Priced, decision: Decision, inputs: DecisionInputs) -> tuple[Pool, ...]:
    """One result per GPU-model pool, each with its right-sizing lever."""
    pr = p.pricing
    pool_days = list(f.pool_days) if pr.many else [f.days]
    sizes = [right_size(pr, part.spec.key, part.cfg, inp) for part, inp in zip(p.parts, f.sizing, strict=False)]
    return pool_results(pr, p.parts, p.pool_me, pool_days, p.comp, p.block, decision, inputs, sizes)


def _consolidation(cfg: Config, block: CostBlock, m: Measured, decision: Any, t: ut.Totals,
                   bd: Any) -> Consolidation | None:
    """The consolidation lever: the "if behaviour changes" plan in the recommended plan's shape."""
    in_use = in_use_series(m, block.fleet)
    rec = next(s for s in block.scenarios if s.id == (decision.recommended_scenario or block.cheapest))
    floor = latency_floor(m.latency_share, packed_demand(cfg, m, block.fleet, block.held))
    return consolidate(rec, block.scenarios, float(in_use.max()) if in_use is not None and in_use.size else 0.0,
                       cfg.analysis.consolidation_target, block.fleet.existing, t.runtime_utilization,
                       t.s / t.r if t.r > 0 else None, t.idle_held, bd.per_user, floor)


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
