"""Stage 2's last step: the computed pieces (measurement, cost block, decision, sensitivity, confidence) turned
into the one AnalysisResult the report and `analyze --json` read: the cost, break-even and hybrid figures with
their formulas and sources, the warnings, and the assumptions list. No computation of its own beyond shaping."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from typing import Any

import numpy as np

from gpuaudit import schema
from gpuaudit.analysis import chargeback as cb
from gpuaudit.analysis import utilization as ut
from gpuaudit.analysis.breakeven import break_even_curve
from gpuaudit.analysis.columns import HybridCurveColumns
from gpuaudit.analysis.config import OFF_AT_ZERO, Config, preset_comments, unit_of
from gpuaudit.analysis.economics import BreakEven, Costs, HybridSizing, Sensitivity
from gpuaudit.analysis.figure import Figure, Table, TableColumn
from gpuaudit.analysis.fleet import Measured
from gpuaudit.analysis.modelsfound import models_found, warnings_for
from gpuaudit.analysis.overrides import Applied
from gpuaudit.analysis.pools import Composed, Pricing, overridden_fleet_prices
from gpuaudit.analysis.result import (
    HOURS_PER_YEAR,
    RESULT_VERSION,
    AnalysisResult,
    Assumption,
    Breakdowns,
    Confidence,
    Consolidation,
    DataQuality,
    Decision,
    Ledger,
    Pool,
    Trial,
    Utilization,
)
from gpuaudit.analysis.scenarios import CostBlock, payback_against


def assemble(cfg: Config, *, root: str, now: dt.datetime | None, t: ut.Totals, trial: Trial,
             utilization: Utilization, breakdowns: Breakdowns, data_quality: DataQuality,
             decision: Decision, block: CostBlock, measured: Measured, bucket_s: float, sensitivity: Sensitivity,
             confidence: Confidence, consolidation: Consolidation | None, ledger: Ledger,
             applied: Applied, pools: tuple[Pool, ...] = (), pricing: Pricing | None = None,
             composed: Composed | None = None, jobs: cb.JobBase, unheld_real_s: float) -> AnalysisResult:
    """The AnalysisResult of one analysis; `jobs`, `unheld_real_s`: the chargeback's price-free inputs
    (analysis/facts.py)."""
    tr, use, bd, dq, sens, conf = trial, utilization, breakdowns, data_quality, sensitivity, confidence
    costs_ = _costs(cfg, block, measured, tr.days, float(use.phantom_gpu_hours.value or 0.0))
    if composed is not None:
        costs_ = _blended(costs_)
    # waste in dollars has one price, the flexible one (an hour released saves it), as the report's phantom gap
    # in dollars: one cloud price per use
    charge = cb.priced_chargeback(jobs, float(costs_.cloud_flexible_usd_per_gpu_hour.value or 0.0), unheld_real_s,
                                  _model_prices(pricing, composed, costs_.cloud_flexible_usd_per_gpu_hour))
    be = _break_even(block, t, use.real_is_upper_bound)
    hybrid = _hybrid(block, bucket_s)
    if composed is not None:  # several models: the sizing drawn is one pool's (the most held)
        hybrid = dataclasses.replace(_hybrid(composed.blocks[composed.dominant], bucket_s),
                                     model=pools[composed.dominant].model if pools else "")
    warnings = list(dq.warnings)
    models = models_found(bd.per_gpu, cfg, pricing)
    warnings += warnings_for(models)
    if pricing is not None:
        warnings += [f"{k} = {getattr(getattr(cfg, k.split('.')[0]), k.split('.')[1]):g} ({cfg.sources.get(k)}) "
                     "is one fleet-wide figure, but this fleet mixes GPU models and each known model is priced "
                     "from the catalogue: set it per model under [models.\"<key>\"]"
                     for k in overridden_fleet_prices(pricing)]
    if not decision.agrees_with_costs:
        if decision.determined:
            plan = next(s.label for s in block.scenarios if s.id == block.cheapest).lower()
            branch = "" if decision.cost_branch in plan else f" (the {decision.cost_branch} branch)"
            warnings.append(f"the decision tree says {decision.branch} but the cheapest plan at your prices is "
                            f"{plan}{branch}")
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
        assumptions=assumptions(applied),
        warnings=tuple(warnings),
        consolidation=consolidation,
        ledger=ledger,
        chargeback=charge,
        models=models,
        pools=pools,
        fleet_fixed_usd={**composed.fixed_owned, **composed.fixed_rented} if composed is not None else {},
    )


_BLENDED = ("cloud_usd_per_gpu_hour", "cloud_effective_usd_per_gpu_hour", "cloud_reserved_usd_per_gpu_hour",
            "cloud_flexible_usd_per_gpu_hour", "owned_usd_per_gpu_hour", "power_w_per_gpu")


def _blended(c: Costs) -> Costs:
    """A fleet of several models has no one price: the fleet-wide price figures are the pools' own, averaged
    (the cloud's weighted by each pool's held demand, owned and power by its GPUs); each pool's are in `pools`."""
    out: dict[str, Any] = {}
    for name in _BLENDED:
        f: Figure = getattr(c, name)
        weight = "held demand" if name.startswith("cloud") else "GPUs"
        out[name] = dataclasses.replace(
            f, formula=f"mean of the model pools' ({weight}-weighted); each pool: {f.formula}",
            source="pools (each model's prices)", definition=f"{f.definition} Averaged over the GPU models.")
    return dataclasses.replace(c, **out)


def _model_prices(pricing: Pricing | None, composed: Composed | None, default: Figure) -> cb.Prices | None:
    """Several models: an idle hour is priced at its GPU's model's flexible price (a host's allocations at the
    mean of its GPUs')."""
    if pricing is None or composed is None:
        return None
    by_gpu = {u: b.prices.flexible for sp, b in zip(pricing.specs, composed.blocks, strict=True) for u in sp.uuids}
    hosts: dict[str, list[float]] = {}
    for sp, b in zip(pricing.specs, composed.blocks, strict=True):
        for h in sp.hosts:
            hosts.setdefault(h, []).append(b.prices.flexible)
    return cb.Prices(float(default.value or 0.0), by_gpu, {h: sum(v) / len(v) for h, v in hosts.items()})


def _costs(cfg: Config, block: CostBlock, m: Measured, trial_days: float, phantom_gpu_hours: float) -> Costs:
    p = block.prices
    c = cfg.cloud
    tl = block.timeline
    fl = block.fleet
    steady_rep = m.reporting - (m.elastic_reporting if fl.elastic > 0 and m.elastic_reporting is not None else 0.0)
    ok = steady_rep > 1e-9
    scale = float(np.mean(fl.steady / steady_rep[ok])) if ok.any() and fl.steady > 0 else 1.0
    # at the flexible price: what an hour released would save (one price per use, on its card)
    # utilization.phantom_gpu_hours (believed − S), the figure the report prints beside it
    phantom = phantom_gpu_hours * p.flexible
    phantom_src = "utilization.phantom_gpu_hours × costs.cloud_flexible_usd_per_gpu_hour"
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
        power_w_per_gpu=Figure(block.watts, "W", *_power_formula(block.power_source),
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
        payback_against=payback_against(m.current, block.scenarios),
        cloud_reserved_usd_per_gpu_hour=Figure(p.reserved, "USD/GPU-h", "list × cloud.reserved_multiplier", "config",
                                               "A reserved GPU-hour, paid every hour of the term."),
        cloud_flexible_usd_per_gpu_hour=Figure(
            p.flexible, "USD/GPU-h",
            "list × (spot share × spot multiplier × (1 + interruptions/h × hours lost) + capacity-block share × "
            "its multiplier + on-demand share) ÷ (1 − reserved share)", "config",
            "A GPU-hour above the reservation, bought as it comes."),
        phantom_usd=Figure(phantom, "USD", "phantom GPU-hours (believed − S) × cloud flexible price", phantom_src,
                           "What the held GPU time that did no work would cost in the cloud, over the trial."),
        phantom_usd_per_year=Figure(phantom * HOURS_PER_YEAR / max(trial_days * 24, 1e-9), "USD",
                                    f"phantom dollars × {HOURS_PER_YEAR:,.0f} h ÷ trial hours", phantom_src,
                                    "The same, per year at the trial's rate."),
    )


def _power_formula(source: str) -> tuple[str, str]:
    """(formula, source) of the power figure for where the watts came from (costs.power_model)."""
    if source == "measured":
        return "average Σ energy_j ÷ Σ seconds", "gpu_samples"
    if source.endswith("idle/busy by load"):
        return ("idle W + (busy W − idle W) × held ÷ observed GPU-hours (the model's board power; none measured)",
                "config" if source.startswith("[models]") else "catalogue")
    return "on_prem.fallback_watts_per_gpu", "config"


def _break_even(block: CostBlock, t: ut.Totals, upper: bool) -> BreakEven:
    b = block.break_even
    u = b.held
    never = u is not None and u > 1.0
    finite = u if u is not None and math.isfinite(u) and not never else None
    efficiency = t.s / t.r if t.r > 0 else None
    real = finite * efficiency if finite is not None and efficiency is not None and not never else None
    held = Figure(
        finite, "fraction",
        "u* = billed-hour utilization × (owning the fleet − renting's fixed part) ÷ renting's compute bill "
        "(renting k × today's billed demand costs fixed + k × compute)",
        f"cost model × fleet-scaled demand; owning: {b.own_reference}",
        "Break-even billed-hour utilization: the billed-hour utilization at which renting costs the same as "
        "owning (the cloud bills held and allocated hours, busy or not).")
    return BreakEven(
        never=never, measured_real=t.real_utilization, measured_runtime=t.runtime_utilization,
        verdict=b.verdict, break_even_billed_utilization=held,
        real_equivalent=Figure(real, "fraction", "break-even billed-hour utilization × S / R", "cost model + trial",
                               "The real utilization the break-even corresponds to at today's efficiency while held.",
                               upper_bound=upper),
        measured_billed=b.measured_billed, own_reference=b.own_reference, own_usd=b.own_usd, cloud_usd=b.cloud_usd,
        rent_fixed_usd=b.rent_fixed_usd, rent_variable_usd=b.rent_variable_usd,
        curve=break_even_curve(b, block.fleet.gpus, block.timeline.months),
    )


def _hybrid(block: CostBlock, bucket_s: float) -> HybridSizing:
    sz = block.sizing
    series = block.held
    fractile = 1.0 / sz.u if sz.u > 0 and math.isfinite(sz.u) else 0.0
    k = HybridCurveColumns
    rows = tuple(
        {k.N: int(n), k.OWNED_USD: float(o), k.CLOUD_USD: float(c), k.TOTAL_USD: float(o + c),
         k.CLOUD_GPU_HOURS: float(h)}
        for n, o, c, h in zip(sz.candidates, sz.owned_usd, sz.cloud_usd, sz.overflow_gpu_hours, strict=True)
    )
    curve = Table(
        "hybrid_curve", "Present value over the horizon by owned GPU count N (N = 0: all cloud).",
        (TableColumn(k.N, "GPUs", "GPUs owned"), TableColumn(k.OWNED_USD, "USD", "owned cost(N)"),
         TableColumn(k.CLOUD_USD, "USD", "cloud cost of demand above N"), TableColumn(k.TOTAL_USD, "USD", "sum"),
         TableColumn(k.CLOUD_GPU_HOURS, "GPU-h", "horizon GPU-hours rented")),
        rows, "fleet-scaled demand series × cost model",
    )
    basis = "held"  # what the cloud bills: every plan is priced on it
    src = f"fleet demand series ({basis}), {bucket_s:g} s buckets, scaled to the fleet"
    return HybridSizing(
        n_star=sz.n_star, critical_fractile_n=sz.critical_fractile_n, min_owned_gpus=sz.min_owned,
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
                           "Owning pays only above about this many GPUs held around the clock (None: never)."),
    )


def assumptions(applied: Applied) -> tuple[Assumption, ...]:
    """Every setting with its value, unit and source (a preset's comment, a file, or the option that set it)."""
    cfg = applied.cfg
    comments = {**preset_comments("default"), **(preset_comments(cfg.preset) if cfg.preset != "default" else {})}
    out = []
    for section in ("decision", "cloud", "on_prem", "analysis"):
        values = getattr(cfg, section)
        for key, value in vars(values).items():
            dotted = f"{section}.{key}"
            if dotted in OFF_AT_ZERO and not value:
                continue
            origin = cfg.sources.get(dotted, "default")
            source = (comments.get(dotted, "") if origin in ("default", cfg.preset) else
                      origin if origin.startswith("--") else f"set in {origin}")  # a file, or an option
            out.append(Assumption(dotted, list(value) if isinstance(value, tuple) else value, unit_of(key), source))
    out += [
        # any latency-sensitive work: read off the share, whichever way it was set (its own row names the source)
        Assumption("input.latency_sensitive", applied.latency_sensitive, "", "decision.latency_sensitive_share > 0"),
        Assumption("input.data_residency", applied.data_residency, "", "--data-residency"),
        Assumption("input.current", applied.current.value, "", "--current"),
    ]
    return tuple(out)
