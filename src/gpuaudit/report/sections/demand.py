"""Section 4, demand and sizing: GPUs to own, the checks, the duration, break-even and hybrid curves."""

from __future__ import annotations

from collections.abc import Callable

from gpuaudit.analysis import headline as hl
from gpuaudit.analysis.columns import BreakEvenCurveColumns, DemandDurationColumns, HybridCurveColumns
from gpuaudit.analysis.figure import ResultContractError
from gpuaudit.analysis.recommend import constraint_text
from gpuaudit.analysis.result import AnalysisResult
from gpuaudit.report.model import Chart, ChartSpec, KeyFigure, Section, Series, Threshold
from gpuaudit.report.sections.formatting import (
    REFERENCE_WORDS,
    figure_tile,
    headline_tiles,
    owned_by_recommendation,
    recommended_label,
)
from gpuaudit.util import fmt

# hybrid.demand_basis -> the duration curve's column (the curve is of the series the hybrid is sized on)
_BASIS_COLUMN = {"held": DemandDurationColumns.GPUS_HELD}


_DEMAND_LABELS = {DemandDurationColumns.GPUS_HELD: "GPUs held by a process"}


def build(r: AnalysisResult, step: Callable[[str], None]) -> Section:
    h, be, c = r.hybrid, r.break_even, r.costs
    hurdle = h.hurdle_gpus.value
    figs = [
        KeyFigure(
            "GPUs to own (the recommended plan)",
            f"{owned_by_recommendation(r):,}",
            f"the owned GPUs of the recommended plan ({recommended_label(r)}); the figures below are checks",
            emphasis=True,
        ),
        KeyFigure(
            "Check: best hybrid (own N ≥ 1, rent above)",
            f"{h.n_owning:,}",
            "N ≥ 1 minimizing owned cost(N) + cloud cost of demand above N over the fleet-scaled demand "
            f"series ({h.demand_basis}); "
            + (
                f"the best N ≥ 0 (written N*) is {h.n_star:,} (0 = renting everything is cheapest)"
                if not h.min_owned_gpus
                else f"N is at least {h.min_owned_gpus:,}, the latency-sensitive share's peak (it never bursts): "
                f"the best such N (written N*) is {h.n_star:,}"
            ),
        ),
        KeyFigure(
            "Check: critical fractile (fixed costs left out)",
            f"{h.critical_fractile_n:,}",
            f"largest N with demand ≥ N at least c_own/c_cloud of the time (fixed costs left out; "
            f"U = {h.cost_ratio_u.value:,.2f}); {'within' if h.agrees else 'more than'} "
            f"{fmt.count(h.tolerance, 'GPU')} of the best N ≥ 1",
        ),
        KeyFigure(
            "Check: owning pays only above",
            "never at these prices" if hurdle is None else f"~{hurdle:,.1f} GPUs held around the clock",
            f"{h.hurdle_gpus.formula}; fixed costs {fmt.money(h.fixed_cost_usd)}",
        ),
        figure_tile("Peak demand", h.peak_demand),
        figure_tile("Mean demand", h.mean_demand),
        *headline_tiles(r, hl.BREAK_EVEN, hl.BILLED_HOUR, emphasis=(hl.BREAK_EVEN,)),
        figure_tile(
            "… as real utilization at today's efficiency", be.real_equivalent, text="never" if be.never else None
        ),
    ]
    charts_: list[Chart] = []
    dur, share = r.breakdowns.demand_duration, DemandDurationColumns.SHARE_OF_HOURS
    dcol = _BASIS_COLUMN.get(h.demand_basis)
    if dcol is None:
        raise ResultContractError(f"hybrid.demand_basis {h.demand_basis!r}: no duration curve of that series")
    dur.require(dcol, share)
    if dur.rows:
        xs, ys = dur.values(dcol), dur.values(share)
        charts_.append(
            Chart(
                "demand",
                "Demand duration curve",
                ChartSpec(
                    "duration",
                    x=tuple(xs),
                    series=(Series("share", tuple(ys)),),
                    x_label=_DEMAND_LABELS.get(dcol, dcol.replace("_", " ")),
                    thresholds=(
                        Threshold("owned", float(h.n_owning)),
                        Threshold("fleet", float(r.trial.gpu_equivalents)),
                    ),
                ),
                caption=f"From the fleet demand series ({dcol.replace('_', ' ')}, hourly means of "
                f"{h.bucket_s:,.0f} s buckets); the marked N is the hybrid's best N ≥ 1.",
            )
        )
    u_star = be.break_even_billed_utilization.value
    k = BreakEvenCurveColumns
    be.curve.require(k.BILLED_UTILIZATION, k.CLOUD_USD_PER_GPU_YEAR, k.OWNED_USD_PER_GPU_YEAR)
    if be.curve.rows:
        years = c.horizon_months / 12
        charts_.append(
            Chart(
                "break-even",
                "Break-even curve",
                ChartSpec(
                    "break-even",
                    x=tuple(be.curve.values(k.BILLED_UTILIZATION)),
                    series=(
                        Series("cloud", tuple(be.curve.values(k.CLOUD_USD_PER_GPU_YEAR))),
                        Series("on-prem", tuple(be.curve.values(k.OWNED_USD_PER_GPU_YEAR))),
                    ),
                    unit="USD per GPU-year (PV)",
                    x_label="billed-hour utilization",
                    thresholds=(
                        Threshold("today", be.measured_billed),
                        *(() if be.never or u_star is None else (Threshold("break-even", u_star),)),
                    ),
                ),
                caption=f"Owning ({REFERENCE_WORDS.get(be.own_reference, be.own_reference)}): "
                f"{fmt.money(be.own_usd)} over "
                f"{c.horizon_months} months ÷ {c.fleet_gpus:,} GPUs ÷ {years:g} years. Renting: "
                f"{fmt.money(be.rent_fixed_usd)} fixed + {fmt.money(be.rent_variable_usd)} "
                "compute at today's billed hours, in proportion to them; equal to owning at u* "
                f"({be.break_even_billed_utilization.formula}).",
            )
        )
    n_col, cost_col = HybridCurveColumns.N, HybridCurveColumns.TOTAL_USD
    h.curve.require(n_col, cost_col)
    if h.curve.rows:
        charts_.append(
            Chart(
                "hybrid-curve",
                "Hybrid cost by owned GPUs",
                ChartSpec(
                    "cost-curve",
                    x=tuple(float(x[n_col]) for x in h.curve.rows),
                    series=(Series("total", tuple(float(x.get(cost_col) or 0) for x in h.curve.rows)),),
                    unit=f"USD over {c.horizon_months} months (PV)",
                    thresholds=(Threshold("n-star", float(h.n_star)),),
                ),
                caption="Owned cost of N GPUs plus the cloud cost of the demand above N, for each N "
                "(N = 0: all cloud).",
            )
        )
    tables = ()
    whole = REFERENCE_WORDS.get(be.own_reference, be.own_reference)
    verdict = (
        f"renting all of it is cheaper than {whole}"
        if be.verdict == "cloud"
        else f"{whole} is cheaper than renting all of it"
    )
    lead = (
        f"Demand peaked at {fmt.unit_value(h.peak_demand.value, 'count')} GPUs and averaged "
        f"{fmt.num(h.mean_demand.value, 1)}. The cloud bills the hours a GPU is held or allocated, busy or not: "
        f"{whole} ({c.fleet_gpus:,} GPUs) pays against renting all of its demand above "
        f"{fmt.pct(u_star)} billed-hour utilization (u*); the fleet's is {fmt.pct(be.measured_billed)}, "
        f"so {verdict}. "
        f"This compares the two extremes; the recommended plan ({recommended_label(r)}) is the cheapest of all "
        "the plans, in section 5."
    )
    if be.never:
        lead = (
            f"Renting all of the demand is cheaper than {whole} even with every GPU held all the time, at these "
            f"prices; the recommended plan is {recommended_label(r)}."
        )
    rule_out = constraint_text(r.decision.inputs)
    if rule_out:  # the comparison is still shown, and why it does not decide is said beside it
        lead += (
            f" Renting all of it is not allowed here ({rule_out}), so the recommended plan "
            f"({recommended_label(r)}) is the cheapest of the plans that are."
        )
    return Section("demand", "Demand and sizing", lead, tuple(figs), tuple(charts_), tables)
