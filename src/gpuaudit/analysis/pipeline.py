"""The analysis from end to end: stage 1 rollups (one SQL pass) → stage 2 pure functions → AnalysisResult."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import numpy as np

from gpuaudit import schema
from gpuaudit.analysis import utilization as ut
from gpuaudit.analysis.confidence import bootstrap, daily
from gpuaudit.analysis.config import Config, load_config, preset_comments
from gpuaudit.analysis.decision import evaluate
from gpuaudit.analysis.result import (
    RESULT_VERSION,
    AnalysisResult,
    Assumption,
    Branch,
    BreakEven,
    Column,
    Costs,
    Decision,
    DecisionInputs,
    Deployment,
    Figure,
    HybridSizing,
    Sensitivity,
    Table,
)
from gpuaudit.analysis.rollup import Rollups, load_rollups
from gpuaudit.analysis.scenarios import Measured, cost_block, growth_table, tornado, with_egress
from gpuaudit.errors import GpuauditError

# Scenarios that carry out each branch (for "does the cost model agree with the tree?").
_BRANCH_SCENARIOS = {
    Branch.CLOUD: {"all-cloud", "all-cloud-right-sized"},
    Branch.HYBRID: {"hybrid"},
    Branch.ON_PREM: {"all-on-prem"},
}


def analyze(
    root: Path | str,
    config: Config | None = None,
    *,
    latency_sensitive: bool = False,
    data_residency: bool = False,
    egress_gb_per_week: float | None = None,
    current: Deployment | str = Deployment.ON_PREM,
    threads: int | None = None,
) -> AnalysisResult:
    """Analyze the dataset at `root` (stage 1 reads it once; the rest works on small frames)."""
    cfg = config or load_config()
    roll = load_rollups(root, threads=threads)
    return analyze_rollups(roll, cfg, root=str(root), latency_sensitive=latency_sensitive,
                           data_residency=data_residency, egress_gb_per_week=egress_gb_per_week, current=current)


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
    now: dt.datetime | None = None,
) -> AnalysisResult:
    """Stage 2: everything from the rollups, no I/O."""
    if egress_gb_per_week is not None and (not math.isfinite(egress_gb_per_week) or egress_gb_per_week < 0):
        raise GpuauditError(f"--egress-gb-per-week must be a number >= 0, got {egress_gb_per_week:g}")
    current = _current(current)
    cfg = with_egress(cfg, egress_gb_per_week)
    ut.check_enough(roll, cfg, root)
    t = ut.totals(roll)
    tr = ut.trial(roll, t, cfg)
    use = ut.utilization(roll, t)
    demand, bucket_s = ut.demand_series(roll)
    bd = ut.breakdowns(roll, t, demand, bucket_s)
    dq = ut.data_quality(roll, t, tr, cfg, use.real_is_upper_bound)

    basis = cfg.analysis.hybrid_demand
    series = demand["gpus_held" if basis == "held" else "gpus_in_use"].to_numpy().astype(float)
    measured = Measured(
        w=t.w, r=t.r, s=t.s, trial_hours=t.trial_hours, fleet_gpus=max(1, tr.gpus),  # physical GPUs owned
        demand=series, dt_hours=bucket_s / 3600.0, measured_w=t.average_power_w, current=current,
    )
    block = cost_block(cfg, measured)

    inputs = DecisionInputs(
        real_utilization=t.real_utilization, latency_sensitive=latency_sensitive, data_residency=data_residency,
        egress_gb_per_week=cfg.cloud.egress_gb_per_week, current=current,
        cloud_below=cfg.decision.cloud_below, on_prem_above=cfg.decision.on_prem_above,
    )
    rule, fired = evaluate(inputs)
    conf = bootstrap(daily(roll.gpu_hours), inputs, cfg.analysis.bootstrap_resamples, cfg.analysis.bootstrap_seed,
                     cfg.analysis.confidence_level)
    decision = _decision(rule.caveat, fired, inputs, tr, block.cheapest, block, use.real_is_upper_bound)
    costs_ = _costs(cfg, block)
    be = _break_even(block, t)
    hybrid = _hybrid(block, series, bucket_s, basis)
    sens = Sensitivity(
        fraction=cfg.analysis.sensitivity_fraction,
        tornado=tornado(cfg, measured, cfg.analysis.sensitivity_fraction),
        growth=growth_table(cfg, measured, cfg.analysis.growth_rates),
    )
    warnings = list(dq.warnings)
    if not decision.agrees_with_costs:
        warnings.append(f"the decision tree says {decision.branch} but the cheapest scenario is {block.cheapest}")
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
        assumptions=assumptions(cfg, latency_sensitive, data_residency, egress_gb_per_week, current),
        warnings=tuple(warnings),
    )


def _decision(caveat: str, fired, inputs: DecisionInputs, tr, cheapest: str, block, upper: bool) -> Decision:  # type: ignore[no-untyped-def]
    caveats = [caveat] if caveat else []
    if tr.provisional:
        caveats.append(f"provisional: the trial covers {tr.days:.1f} days (< 90); re-run on a longer trial")
    if upper:
        caveats.append("real utilization is an upper bound (duty cycle stood in for SM activity)")
    # What the reader should do, per rule (the rule id and its figures are shown next to the headline).
    advice = {
        "low-utilization": "move to the cloud",
        "mid-utilization": "go hybrid — own the steady base, burst the rest to the cloud",
        "high-utilization": "on-prem may pay — check egress costs first",
        "high-utilization-latency": "on-prem (latency-sensitive)",
    }
    if fired.id in advice:
        headline = f"Real utilization is {inputs.real_utilization:.1%}: {advice[fired.id]}."
    else:
        headline = f"{fired.description} (real utilization {inputs.real_utilization:.1%})"
    return Decision(
        branch=fired.branch, rule=fired, inputs=inputs, caveats=tuple(caveats), provisional=tr.provisional,
        reevaluate_on=tr.reevaluate_on, cheapest_scenario=cheapest,
        agrees_with_costs=cheapest in _BRANCH_SCENARIOS[fired.branch]
        or (cheapest == "stay-as-is" and fired.branch.value == inputs.current.value),
        headline=headline,
    )


def _costs(cfg: Config, block) -> Costs:  # type: ignore[no-untyped-def]
    r = block.rates
    c = cfg.cloud
    return Costs(
        horizon_months=cfg.analysis.horizon_months,
        cloud_usd_per_gpu_hour=Figure(r.cloud_list, "USD/GPU-h", "cloud.instance_usd_per_hour ÷ "
                                      "cloud.gpus_per_instance", "config",
                                      f"${c.instance_usd_per_hour:g}/h ÷ {c.gpus_per_instance} GPUs."),
        cloud_effective_usd_per_gpu_hour=Figure(
            r.cloud_effective, "USD/GPU-h",
            "list × (spot_share × spot_multiplier × (1 + interruptions/h × hours lost) + reserved_share × "
            "reserved_multiplier + on-demand share)", "config",
            "What a cloud GPU-hour costs with the configured spot/reserved mix."),
        owned_usd_per_gpu_hour=Figure(
            r.owned_marginal, "USD/GPU-h",
            "hardware ÷ (years × 8760) + maintenance × hardware ÷ 8760 + W × PUE × $/kWh ÷ 1000 + "
            "networking per GPU ÷ horizon hours", "config + measured power",
            "Marginal cost of one owned GPU per hour (staff and fixed networking excluded)."),
        power_w_per_gpu=Figure(r.power_w, "W", "average Σ energy_j ÷ Σ seconds" if r.power_source == "measured"
                               else "on_prem.fallback_watts_per_gpu",
                               "gpu_samples" if r.power_source == "measured" else "config",
                               "Board power per GPU used for on-prem power cost."),
        power_source=r.power_source,
        scale=block.scale,
        scenarios=block.scenarios,
        cheapest=block.cheapest,
        preset=cfg.preset,
    )


def _break_even(block, t: ut.Totals) -> BreakEven:  # type: ignore[no-untyped-def]
    u = block.break_even
    never = u is not None and u > 1.0
    verdict = "cloud" if u is None or t.real_utilization < u else "on-prem"
    return BreakEven(
        real_utilization=Figure(
            u, "fraction",
            "(on-prem cost(fleet) − cloud fixed costs) ÷ (fleet GPUs × horizon hours × cloud effective $/GPU-h)",
            "cost model (config) and the fleet size",
            "Real utilization at which renting costs the same as owning today's fleet."),
        never=never, measured_real=t.real_utilization, measured_runtime=t.runtime_utilization, verdict=verdict,
    )


def _hybrid(block, series: np.ndarray, bucket_s: float, basis: str) -> HybridSizing:  # type: ignore[no-untyped-def]
    sz = block.sizing
    fractile = 1.0 / sz.u if sz.u > 0 and math.isfinite(sz.u) else 0.0
    rows = tuple(
        {"n": int(n), "owned_usd": float(o), "cloud_usd": float(c), "total_usd": float(o + c),
         "cloud_gpu_hours": float(h)}
        for n, o, c, h in zip(sz.candidates, sz.owned_usd, sz.cloud_usd, sz.overflow_gpu_hours, strict=True)
    )
    curve = Table(
        "hybrid_curve", "Total cost over the horizon by owned GPU count N.",
        (Column("n", "GPUs", "GPUs owned"), Column("owned_usd", "USD", "on-prem cost(N)"),
         Column("cloud_usd", "USD", "cloud cost of demand above N"), Column("total_usd", "USD", "sum"),
         Column("cloud_gpu_hours", "GPU-h", "horizon GPU-hours above N")),
        rows, "demand series × cost model",
    )
    src = f"fleet demand series ({basis}), {bucket_s:g} s buckets"
    return HybridSizing(
        n_star=sz.n_star, critical_fractile_n=sz.critical_fractile_n,
        cost_ratio_u=Figure(sz.u, "", "cloud effective $/GPU-h ÷ owned marginal $/GPU-h", "cost model",
                            "How many times dearer a cloud GPU-hour is than an owned one."),
        fractile=Figure(fractile, "fraction", "1 / U", "cost model",
                        "Own a GPU when demand needs it at least this share of the time."),
        agrees=abs(sz.n_star - sz.critical_fractile_n) <= 1,
        peak_demand=Figure(float(series.max()) if series.size else 0.0, "GPUs", "max over buckets", src,
                           "Peak fleet demand."),
        mean_demand=Figure(float(series.mean()) if series.size else 0.0, "GPUs", "mean over buckets", src,
                           "Average fleet demand."),
        demand_basis=basis, bucket_s=bucket_s, curve=curve,
    )


_UNITS = {
    "cloud_below": "fraction", "on_prem_above": "fraction", "right_size_target_efficiency": "fraction",
    "confidence_level": "fraction", "sensitivity_fraction": "fraction", "growth_rates": "fraction/year",
    "gpus_per_instance": "GPUs", "pue": "×", "bootstrap_resamples": "count",
}


def _unit(key: str) -> str:
    if key in _UNITS:
        return _UNITS[key]
    for suffix, unit in (("_usd_per_hour", "USD/h"), ("_usd_per_gpu", "USD/GPU"), ("_usd_per_month", "USD/month"),
                         ("_usd_per_gb", "USD/GB"), ("_usd_per_kwh", "USD/kWh"), ("_usd_once", "USD"),
                         ("_usd", "USD"), ("_per_week", "GB/week"), ("_watts_per_gpu", "W"), ("_months", "months"),
                         ("_days", "days"), ("_hours", "hours"), ("_years", "years"), ("_per_hour", "1/h"),
                         ("_share", "fraction"), ("_multiplier", "×"), ("_fraction_per_year", "fraction/year")):
        if key.endswith(suffix):
            return unit
    return ""


def assumptions(cfg: Config, latency: bool, residency: bool, egress: float | None, current: Deployment
                ) -> tuple[Assumption, ...]:
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
            out.append(Assumption(dotted, list(value) if isinstance(value, tuple) else value, _unit(key), source))
    out += [
        Assumption("input.latency_sensitive", latency, "", "--latency-sensitive"),
        Assumption("input.data_residency", residency, "", "--data-residency"),
        Assumption("input.current", current.value, "", "--current"),
    ]
    return tuple(out)
