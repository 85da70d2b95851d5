"""The analysis from end to end: stage 1 rollups (one SQL pass) → stage 2 pure functions → AnalysisResult."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from pathlib import Path
from typing import Any

import numpy as np

from gpuaudit import schema
from gpuaudit.analysis import utilization as ut
from gpuaudit.analysis.confidence import CostSample, bootstrap, daily, resample_index
from gpuaudit.analysis.config import Config, bounds, load_config, preset_comments, unit_of
from gpuaudit.analysis.decision import branches_between, evaluate
from gpuaudit.analysis.recommend import Evidence, recommend
from gpuaudit.analysis.result import (
    RESULT_VERSION,
    AnalysisResult,
    Assumption,
    BreakEven,
    Column,
    Costs,
    DecisionInputs,
    Deployment,
    Figure,
    HybridSizing,
    Sensitivity,
    Table,
)
from gpuaudit.analysis.scenarios import (
    OWNING,
    CostBlock,
    Measured,
    cost_block,
    cost_draws,
    growth_table,
    tornado,
    with_egress,
)
from gpuaudit.analysis.stage1.rollup import Rollups, load_rollups
from gpuaudit.errors import GpuauditError

ENGINES = ("duckdb", "spark")  # what runs stage 1's SQL


def analyze(
    root: Path | str,
    config: Config | None = None,
    *,
    latency_sensitive: bool = False,
    data_residency: bool = False,
    egress_gb_per_week: float | None = None,
    current: Deployment | str = Deployment.ON_PREM,
    fleet_gpus: int | None = None,
    threads: int | None = None,
    engine: str = "duckdb",
) -> AnalysisResult:
    """Analyze the dataset at `root` (stage 1 reads it once; the rest works on small frames). `engine`: which
    SQL engine runs stage 1, `duckdb` (this machine) or `spark` (gpuaudit.analysis.stage1.spark); same rollups."""
    if engine not in ENGINES:
        raise GpuauditError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    cfg = config or load_config()
    if engine == "spark":
        from gpuaudit.analysis.stage1.spark import load_rollups as load_spark_rollups  # pyspark: the `spark` extra

        roll = load_spark_rollups(root)
    else:
        roll = load_rollups(root, threads=threads)
    return analyze_rollups(roll, cfg, root=str(root), latency_sensitive=latency_sensitive,
                           data_residency=data_residency, egress_gb_per_week=egress_gb_per_week, current=current,
                           fleet_gpus=fleet_gpus)


def _current(value: Deployment | str) -> Deployment:
    try:
        return Deployment(value)
    except ValueError:
        raise GpuauditError(
            f"--current must be one of {', '.join(d.value for d in Deployment)}, got {value!r}"
        ) from None


def analyze_rollups(
    roll: Rollups,
    cfg: Config,
    *,
    root: str = "",
    latency_sensitive: bool = False,
    data_residency: bool = False,
    egress_gb_per_week: float | None = None,
    current: Deployment | str = Deployment.ON_PREM,
    fleet_gpus: int | None = None,
    now: dt.datetime | None = None,
) -> AnalysisResult:
    """Stage 2: everything from the rollups, no I/O."""
    # The flags set config values: the config's ranges hold for them (a fleet of 0 GPUs means "the GPUs seen").
    lo, hi = bounds("cloud", "egress_gb_per_week")
    if egress_gb_per_week is not None and (not math.isfinite(egress_gb_per_week) or not lo <= egress_gb_per_week
                                           <= hi):
        raise GpuauditError(f"--egress-gb-per-week must be a number between {lo:g} and {hi:.0e}".replace("e+", "e")
                            + f", got {egress_gb_per_week:g}")
    if fleet_gpus is not None:
        hi = bounds("analysis", "fleet_gpus")[1]
        if not 0 < fleet_gpus <= hi:
            raise GpuauditError(f"--fleet-gpus must be between 1 and {hi:,.0f}, got {fleet_gpus}")
        cfg = cfg.replace("analysis", fleet_gpus=int(fleet_gpus))
    current = _current(current)
    cfg = with_egress(cfg, egress_gb_per_week)
    ut.check_enough(roll, cfg, root)
    t = ut.totals(roll)
    _check_finite(t)
    tr = ut.trial(roll, t, cfg)
    use = ut.utilization(roll, t)
    demand, bucket_s = ut.demand_series(roll)
    bd = ut.breakdowns(roll, t, demand, bucket_s)
    dq = ut.data_quality(roll, t, tr, cfg, use.real_is_upper_bound)

    measured = Measured(
        w=t.w, r=t.r, s=t.s, s_lower=t.s_lower, gpus_seen=tr.gpus, gpu_equivalents=t.gpu_equivalents,
        held=demand["gpus_held"].to_numpy().astype(float),
        reporting=demand["gpus_reporting"].to_numpy().astype(float),
        day=(demand["bucket_s"].to_numpy() // 86400).astype(np.int64), dt_hours=bucket_s / 3600.0,
        measured_w=t.average_power_w, current=current, data_residency=data_residency,
    )
    block = cost_block(cfg, measured)

    inputs = DecisionInputs(
        real_utilization=t.real_utilization, latency_sensitive=latency_sensitive, data_residency=data_residency,
        egress_gb_per_week=cfg.cloud.egress_gb_per_week, current=current,
        cloud_below=cfg.decision.cloud_below, on_prem_above=cfg.decision.on_prem_above,
    )
    rule, fired = evaluate(inputs)
    low = t.s_lower / t.w
    possible = branches_between(low, t.real_utilization, inputs)

    days = daily(roll.gpu_hours)
    a = cfg.analysis
    sample = _cost_sample(cfg, measured, block, days, a.bootstrap_resamples, a.bootstrap_seed)
    conf = dataclasses.replace(bootstrap(days, inputs, a.bootstrap_resamples, a.bootstrap_seed, a.confidence_level,
                                         sample), real_is_upper_bound=use.real_is_upper_bound)
    tornado_table = tornado(cfg, measured, a.sensitivity_fraction, base=block)
    sens = Sensitivity(fraction=a.sensitivity_fraction, tornado=tornado_table,
                       growth=growth_table(cfg, measured, a.growth_rates))
    evidence = Evidence(
        confidence=conf, coverage=float(dq.coverage.value or 0.0),
        sensitivity_flips=tuple(r["parameter"] for r in tornado_table.rows if r["changes_cheapest"]),
        sensitivity_fraction=a.sensitivity_fraction, real_low=low, real_high=t.real_utilization,
        upper_bound=use.real_is_upper_bound, horizon_months=a.horizon_months, model_caveats=_model_caveats(cfg),
        growth_flip=_growth_flip(sens.growth, block.cheapest),
    )
    decision = recommend(rule, fired, inputs, tr, block.scenarios, block.cheapest, possible, evidence)
    costs_ = _costs(cfg, block, measured)
    be = _break_even(block, t, use.real_is_upper_bound)
    hybrid = _hybrid(block, bucket_s)
    warnings = list(dq.warnings)
    fl = block.fleet
    if fl.existing > fl.gpus:
        warnings.append(f"on_prem.owned_gpus ({fl.existing:,}) is more than the fleet's {fl.gpus:,} GPUs: set "
                        f"--fleet-gpus if some had no agent; owning the fleet keeps {fl.gpus:,} and sells the rest")
    if not decision.agrees_with_costs:
        if decision.determined:
            warnings.append(f"the decision tree says {decision.branch} but the cheapest scenario at your prices is "
                            f"{block.cheapest} ({decision.cost_branch})")
        else:
            warnings.append("real utilization is only bounded: the decision tree could say "
                            + " or ".join(decision.possible_branches))
    return AnalysisResult(
        result_version=RESULT_VERSION,
        dataset_schema_version=schema.SCHEMA_VERSION,
        generated_at=now or dt.datetime.now(dt.UTC),
        data_root=root,
        trial=tr,
        utilization=use,
        breakdowns=bd,
        data_quality=dq,
        decision=decision,
        costs=costs_,
        break_even=be,
        hybrid=hybrid,
        sensitivity=sens,
        confidence=conf,
        assumptions=assumptions(cfg, latency_sensitive, data_residency, egress_gb_per_week, current,
                                fleet_gpus),
        warnings=tuple(warnings),
    )


def _check_finite(t: ut.Totals) -> None:
    """NaN or infinity in the data would make every figure meaningless: refuse with one line."""
    bad = [k for k, v in vars(t).items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        raise GpuauditError(f"the data holds non-finite values (NaN or infinity) in {', '.join(bad)}: check the "
                            "files `gpuaudit sql` lists for them")


def _cost_sample(cfg: Config, m: Measured, block: CostBlock, days: Any, resamples: int, seed: int) -> CostSample:
    ids = [s.id for s in block.scenarios if not s.what_if]
    by_id = {s.id: s for s in block.scenarios}
    day_ids = days["day"].to_numpy().astype(np.int64)
    idx = resample_index(len(day_ids), resamples, seed) if resamples and len(day_ids) else np.zeros((0, 0), int)
    draws = cost_draws(cfg, m, block, idx, day_ids).totals if idx.size else np.zeros((0, len(ids)))
    owning = np.array([i in OWNING and by_id[i].allowed and by_id[i].owned_gpus > 0 for i in ids])
    return CostSample(ids, draws, np.array([by_id[i].total.value or 0.0 for i in ids]),
                      np.array([by_id[i].allowed for i in ids]), owning, block.cheapest)


def _costs(cfg: Config, block: CostBlock, m: Measured) -> Costs:
    p = block.prices
    c = cfg.cloud
    tl = block.timeline
    ok = m.reporting > 1e-9
    scale = float(np.mean(block.fleet.capacity / m.reporting[ok])) if ok.any() else 1.0
    return Costs(
        horizon_months=cfg.analysis.horizon_months,
        cloud_usd_per_gpu_hour=Figure(p.list, "USD/GPU-h", "cloud.instance_usd_per_hour ÷ cloud.gpus_per_instance",
                                      "config", f"On demand: ${c.instance_usd_per_hour:g}/h ÷ {c.gpus_per_instance} "
                                      "GPUs."),
        cloud_effective_usd_per_gpu_hour=Figure(
            p.blended, "USD/GPU-h",
            "reserved_share × reserved + (1 − reserved_share) × flexible", "config",
            "What a GPU-hour of perfectly steady demand costs with the configured mix (real demand pays more: "
            "reservations idle, or more flexible hours)."),
        owned_usd_per_gpu_hour=Figure(
            block.owned_marginal, "USD/GPU-h",
            "(PV of owning one node of GPUs − fixed costs) ÷ GPUs per node ÷ (730 h × PV of $1 a month over the "
            "horizon)", "config + measured power",
            "What one more new owned GPU costs per hour, levelized (the constant $/h with the same present value, "
            "comparable with a cloud list price): hardware net of resale, power, maintenance, its share of per-node "
            "staff and space (base staff and the fixed network excluded)."),
        power_w_per_gpu=Figure(block.watts, "W", "average Σ energy_j ÷ Σ seconds" if block.power_source == "measured"
                               else "on_prem.fallback_watts_per_gpu",
                               "gpu_samples" if block.power_source == "measured" else "config",
                               "Board power per GPU used for on-prem power cost."),
        power_source=block.power_source,
        scale=scale,
        scenarios=block.scenarios,
        cheapest=block.cheapest,
        preset=cfg.preset,
        discount_rate_per_year=tl.rate,
        annuity_months=tl.annuity,
        fleet_gpus=block.fleet.gpus,
        fleet_capacity=block.fleet.capacity,
        owned_gpus=block.fleet.existing,
        pack_factor=block.pack_factor,
        reserved_gpus=block.plan.reserved_gpus,
        cloud_reserved_usd_per_gpu_hour=Figure(p.reserved, "USD/GPU-h", "list × cloud.reserved_multiplier", "config",
                                               "A reserved GPU-hour, paid every hour of the term."),
        cloud_flexible_usd_per_gpu_hour=Figure(
            p.flexible, "USD/GPU-h",
            "list × (spot share × spot multiplier × (1 + interruptions/h × hours lost) + capacity-block share × "
            "its multiplier + on-demand share) ÷ (1 − reserved share)", "config",
            "A GPU-hour above the reservation, bought as it comes."),
    )


def _growth_flip(growth: Table, cheapest: str) -> tuple[float, str] | None:
    """The lowest demand growth of the growth table at which another scenario is the cheapest, if any."""
    for row in sorted(growth.rows, key=lambda x: float(x["growth_per_year"])):  # type: ignore[arg-type]
        g = float(row["growth_per_year"])  # type: ignore[arg-type]
        if g > 0 and row["cheapest"] != cheapest:
            return g, str(row["cheapest"])
    return None


def _model_caveats(cfg: Config) -> tuple[str, ...]:
    """What the cost model leaves out for these settings."""
    months, life = cfg.analysis.horizon_months, cfg.on_prem.amortization_years
    if months <= life * 12 + 1e-9:
        return ()
    return (f"the {months}-month horizon outlasts the hardware's {life:g}-year amortization life: GPUs run on past "
            "it and no refresh is priced (match the horizon to your refresh plan, or lengthen the life)",)


def _break_even(block: CostBlock, t: ut.Totals, upper: bool) -> BreakEven:
    b = block.break_even
    u = b.held
    never = u is not None and u > 1.0
    finite = u if u is None or math.isfinite(u) else None
    efficiency = t.s / t.r if t.r > 0 else None
    real = finite * efficiency if finite is not None and efficiency is not None and not never else None
    held = Figure(
        finite, "fraction",
        "u* = measured held-hour utilization × (owning the fleet − renting's fixed part) ÷ renting's compute bill "
        "(renting k × today's held demand costs fixed + k × compute)",
        f"cost model × fleet-scaled demand; owning: {b.own_reference}",
        "Share of the fleet's hours held by jobs at which renting costs the same as owning: the cloud bills held "
        "hours, so this is what to compare with the measured held-hour utilization.")
    return BreakEven(
        real_utilization=held, never=never, measured_real=t.real_utilization, measured_runtime=t.runtime_utilization,
        verdict=b.verdict, held_utilization=held,
        real_equivalent=Figure(real, "fraction", "break-even held-hour utilization × S / R", "cost model + trial",
                               "The real utilization the break-even corresponds to at today's efficiency while held.",
                               upper_bound=upper),
        measured_held=b.measured_held, own_reference=b.own_reference, own_usd=b.own_usd, cloud_usd=b.cloud_usd,
        rent_fixed_usd=b.rent_fixed_usd, rent_variable_usd=b.rent_variable_usd,
    )


def _hybrid(block: CostBlock, bucket_s: float) -> HybridSizing:
    sz = block.sizing
    series = block.held
    fractile = 1.0 / sz.u if sz.u > 0 and math.isfinite(sz.u) else 0.0
    rows = tuple(
        {"n": int(n), "owned_usd": float(o), "cloud_usd": float(c), "total_usd": float(o + c),
         "cloud_gpu_hours": float(h)}
        for n, o, c, h in zip(sz.candidates, sz.owned_usd, sz.cloud_usd, sz.overflow_gpu_hours, strict=True)
    )
    curve = Table(
        "hybrid_curve", "Present value over the horizon by owned GPU count N (N = 0: all cloud).",
        (Column("n", "GPUs", "GPUs owned"), Column("owned_usd", "USD", "owned cost(N)"),
         Column("cloud_usd", "USD", "cloud cost of demand above N"), Column("total_usd", "USD", "sum"),
         Column("cloud_gpu_hours", "GPU-h", "horizon GPU-hours rented")),
        rows, "fleet-scaled demand series × cost model",
    )
    basis = "held"  # what the cloud bills: every plan is priced on it
    src = f"fleet demand series ({basis}), {bucket_s:g} s buckets, scaled to the fleet"
    return HybridSizing(
        n_star=sz.n_star, critical_fractile_n=sz.critical_fractile_n,
        cost_ratio_u=Figure(sz.u, "", "cloud flexible $/GPU-h ÷ owned marginal $/GPU-h", "cost model",
                            "How many times dearer a flexible cloud GPU-hour is than a new owned one."),
        fractile=Figure(fractile, "fraction", "1 / U", "cost model",
                        "Own a GPU when demand needs it at least this share of the time (fixed costs left out)."),
        agrees=sz.agrees,
        peak_demand=Figure(float(series.max()) if series.size else 0.0, "GPUs", "max over buckets", src,
                           "Peak fleet demand."),
        mean_demand=Figure(float(series.mean()) if series.size else 0.0, "GPUs", "mean over buckets", src,
                           "Average fleet demand."),
        demand_basis=basis, bucket_s=bucket_s, curve=curve, n_owning=sz.n_owning, tolerance=sz.tolerance,
        fixed_cost_usd=sz.fixed_usd,
        hurdle_gpus=Figure(sz.hurdle_gpus, "GPUs", "fixed costs of owning ÷ ((flexible cloud − owned marginal) "
                           "$/GPU-h × 730 h × PV of $1 a month over the horizon)", "cost model",
                           "Owning pays only above about this many GPUs busy around the clock (None: never)."),
    )


def assumptions(cfg: Config, latency: bool, residency: bool, egress: float | None, current: Deployment,
                fleet_gpus: int | None = None) -> tuple[Assumption, ...]:
    comments = {**preset_comments("default"), **(preset_comments(cfg.preset) if cfg.preset != "default" else {})}
    out = []
    for section in ("decision", "cloud", "on_prem", "analysis"):
        values = getattr(cfg, section)
        for key, value in vars(values).items():
            dotted = f"{section}.{key}"
            origin = cfg.sources.get(dotted, "default")
            source = comments.get(dotted, "") if origin in ("default", cfg.preset) else f"set in {origin}"
            if dotted == "cloud.egress_gb_per_week" and egress is not None:
                source = "--egress-gb-per-week"
            if dotted == "analysis.fleet_gpus" and fleet_gpus is not None:
                source = "--fleet-gpus"
            out.append(Assumption(dotted, list(value) if isinstance(value, tuple) else value, unit_of(key), source))
    out += [
        Assumption("input.latency_sensitive", latency, "", "--latency-sensitive"),
        Assumption("input.data_residency", residency, "", "--data-residency"),
        Assumption("input.current", current.value, "", "--current"),
    ]
    return tuple(out)
