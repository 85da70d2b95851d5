"""Section 5, cost per scenario: the plans, the what-ifs, the components and the cash by year."""

from __future__ import annotations

from collections.abc import Callable

from gpuaudit.analysis.confidence import no_interval_reason
from gpuaudit.analysis.result import (
    AnalysisResult,
    CostScenario,
)
from gpuaudit.report.model import Chart, ChartSpec, KeyFigure, ReportTable, Section, Series
from gpuaudit.report.sections.formatting import (
    figure_tile,
    scenario,
)
from gpuaudit.util import fmt


def build(r: AnalysisResult, step: Callable[[str], None]) -> Section:
    c = r.costs
    months = c.horizon_months
    base = [s for s in c.scenarios if not s.what_if]
    what_if = [s for s in c.scenarios if s.what_if]

    def rows_of(scenarios: list[CostScenario]) -> tuple[tuple[str, ...], ...]:
        rows = []
        for s in scenarios:
            marker = " ◀ cheapest" if s.id == c.cheapest else "" if s.allowed else " (not allowed: rents)"
            rows.append(
                (
                    s.label + marker,
                    s.description,
                    f"{s.owned_gpus:,}",
                    fmt.hours(s.cloud_gpu_hours),
                    fmt.money(s.monthly_usd),
                    fmt.money(s.total.value, exact=True),
                )
            )
        return tuple(rows)

    cols = (
        "scenario",
        "what it means",
        "owned GPUs",
        "cloud GPU-hours",
        "PV ÷ months (not cash)",
        f"total, {months} months",
    )
    rate = f"{c.discount_rate_per_year:.0%}/year"
    table = ReportTable(
        columns=cols,
        rows=rows_of(base),
        numeric=(False, False, True, True, True, True),
        caption=f"Present value per scenario over {months} months at {rate} (cost model preset: {c.preset})",
    )
    plans = ReportTable(
        columns=cols,
        rows=rows_of(what_if),
        numeric=(False, False, True, True, True, True),
        caption=f"If behaviour changes (held hours × {c.pack_factor:.2f} on both sides): plans, never "
        "counted as cheapest",
        empty="no behaviour-change plans",
    )
    parts = sorted({k for s in c.scenarios for k in s.components})
    comp = ReportTable(
        columns=("scenario", *[p.replace("_", " ") for p in parts]),
        # A component a plan does not have costs it nothing: $0, as the plans that carry it at zero spell it.
        rows=tuple((s.label, *[fmt.money(s.components.get(p, 0.0)) for p in parts]) for s in c.scenarios),
        numeric=(False, *[True] * len(parts)),
        caption="Where each total comes from (USD, present value; residual value is negative: what is owned at the end "
        "is still worth it; owned value kept: today's resale value of the owned GPUs a plan keeps, the "
        "money keeping them forgoes)",
    )
    years = max(1, -(-months // 12))
    versus = scenario(r, c.payback_against) if c.payback_against else None
    against = (versus.label if versus else c.payback_against or "renting (not allowed here)").lower()
    cash = ReportTable(
        columns=("scenario", "capex", f"payback vs {against}", *[f"year {y + 1}" for y in range(years)]),
        rows=tuple(
            (
                s.label,
                fmt.money(s.capex_usd) if s.capex_usd else "—",
                (
                    f"{s.payback_months:.1f} months"
                    if s.payback_months is not None
                    else f"not within {months} months"
                    if s.capex_usd and versus
                    else "—"
                ),
                *[fmt.money(sum(s.cash_usd_by_month[12 * y : 12 * y + 12])) for y in range(years)],
            )
            for s in base
            if s.cash_usd_by_month
        ),
        numeric=(False, True, True, *[True] * years),
        caption="Cash, not present value: what each plan pays per year (capital when it is paid, resale back in the "
        "last month); simple payback of each plan that buys hardware: the month its cumulative cash falls to "
        + (
            f"{against}'s, the renting plan available today (resale left out)"
            if versus
            else "renting's: none here, renting is not allowed"
        ),
    )
    ids = [s.id for s in base]
    chart = Chart(
        "costs",
        "Cost per scenario",
        ChartSpec(
            "scenarios",
            labels=tuple(s.label for s in base),
            series=(Series("total", tuple(s.total.value or 0 for s in base)),),
            highlight=ids.index(c.cheapest) if c.cheapest in ids else None,
            unit=f"USD over {months} months (PV)",
        ),
    )
    figs = [
        figure_tile(
            "Cloud on-demand list price per GPU-hour (the card the others derive from)", c.cloud_usd_per_gpu_hour
        ),
        figure_tile(
            "Cloud flexible price per GPU-hour: every hour not reserved (bursts, waste in dollars)",
            c.cloud_flexible_usd_per_gpu_hour,
        ),
        figure_tile(
            "Cloud reserved price per GPU-hour, billed 24/7: used only where cheaper than flexible",
            c.cloud_reserved_usd_per_gpu_hour,
        ),
        figure_tile("Owned cost per GPU-hour (marginal)", c.owned_usd_per_gpu_hour),
        figure_tile(f"Power per GPU ({c.power_source})", c.power_w_per_gpu),
        KeyFigure(
            "Fleet",
            f"{c.fleet_gpus:,} GPUs, {c.owned_gpus:,} owned",
            "analysis.fleet_gpus (0: GPUs seen) and on_prem.owned_gpus (-1: the fleet when on-prem)",
        ),
    ]
    best = scenario(r, c.cheapest)
    ci = r.confidence.cost_difference_usd
    lead = (
        f"The measured demand, scaled to the {c.fleet_gpus:,}-GPU fleet and priced over {months} months "
        f"(present value at {rate}): the cheapest allowed way to run it is "
        f"{best.label if best else c.cheapest} ({fmt.money(best.total.value if best else None)}). All-cloud "
        f"minus the cheapest owning scenario: {fmt.money(ci.point)} "
        + (
            f"({r.confidence.level:.0%} interval {fmt.money(ci.low)} to {fmt.money(ci.high)} over day-resamples)."
            if r.confidence.resamples
            else f"(no day-resamples: {no_interval_reason(r.confidence)}; no interval)."
        )
    )
    notes = []
    if not r.decision.agrees_with_costs:
        notes.append(
            "The decision tree (utilization thresholds) and the cheapest scenario of the cost model "
            "disagree: the recommendation follows the cost model; check the prices in Method and "
            "assumptions."
        )
    return Section(
        "costs",
        f"Cost per scenario over {months} months",
        lead,
        tuple(figs),
        (chart,),
        (table, plans, comp, cash),
        tuple(notes),
    )
