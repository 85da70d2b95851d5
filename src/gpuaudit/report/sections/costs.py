"""Section 5, cost per scenario: the plans, the what-ifs, the components and the cash by year."""

from __future__ import annotations

from collections.abc import Callable

from gpuaudit.analysis.confidence import no_interval_reason
from gpuaudit.analysis.economics import CostScenario
from gpuaudit.analysis.result import AnalysisResult, Pool
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
                    s.description + (f" Its cloud GPU-hours are {s.priced_mix.text}." if s.priced_mix else ""),
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
        columns=(
            "scenario",
            "capex",
            "GPUs sold now (cash back in year 1)",
            f"payback vs {against}",
            *[f"year {y + 1}" for y in range(years)],
        ),
        rows=tuple(
            (
                s.label,
                fmt.money(s.capex_usd) if s.capex_usd else "—",
                f"{s.sold_gpus:,} GPU{'' if s.sold_gpus == 1 else 's'}: +{fmt.money(s.sale_usd)}"
                if s.sold_gpus
                else "none",
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
        numeric=(False, True, True, True, *[True] * years),
        caption="Cash, not present value: what each plan pays per year (capital when it is paid, resale back in the "
        "last month; the sale of the owned GPUs a plan gives up comes back in year 1, so a plan that sells can pay "
        "less than nothing that year); simple payback of each plan that buys hardware: the month its cumulative cash "
        "falls to "
        + (
            f"{against}'s, the renting plan available today (resale left out)"
            if versus
            else "renting's: none here, renting is not allowed"
        ),
    )
    tables: tuple[ReportTable, ...] = (table, plans, comp, cash)
    if len(r.pools) > 1:
        tables = (_pool_table(r), *tables)
    sized = _right_size_table(r)
    if sized is not None:
        tables = (*tables, sized)
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
        tables,
        tuple(notes),
    )


_POOL_PLANS = ("stay-as-is", "all-cloud", "all-on-prem", "hybrid")


def _pool_table(r: AnalysisResult) -> ReportTable:
    """Per GPU model, each at its own prices: what it holds and uses, its tree branch, what the recommended plan
    does with it, and its cost under each plan (the fleet-level fixed costs are the fleet's, counted once)."""
    months = r.costs.horizon_months
    fixed = sum(r.fleet_fixed_usd.values())

    def cost(p: Pool, sid: str) -> str:
        s = next((x for x in p.scenarios if x.id == sid), None)
        return fmt.money(s.total.value, exact=True) if s is not None else "—"
    return ReportTable(
        columns=("model", "GPUs", "held", "real", "utilization rule", "the recommended plan", "$ per GPU-hour",
                 "hardware $ per GPU", *[f"{x} ({months} mo)" for x in _POOL_PLANS]),
        rows=tuple(
            (p.model, f"{p.gpus:,}", fmt.share(p.held_utilization), fmt.share(p.real_utilization), p.branch,
             p.action, f"{p.usd_per_gpu_hour:,.2f}", f"{p.hardware_usd_per_gpu:,.0f}",
             *[cost(p, sid) for sid in _POOL_PLANS])
            for p in r.pools),
        numeric=(False, True, True, True, False, False, True, True, True, True, True, True),
        caption="Per GPU model, each at its own prices (present value; the fleet-level fixed costs, "
        f"{fmt.money(fixed)} of base staff, network, egress and managed services, are counted once in the fleet "
        "totals above, not in these)",
    )


def _right_size_table(r: AnalysisResult) -> ReportTable | None:
    """The right-size what-if: per pool and cheaper model, the held GPU-hours that fit it and their cost today vs
    on it, with the assumption in the caption (None: nothing fits a cheaper model)."""
    rows = []
    assumption = ""
    for p in r.pools:
        rs = p.right_size
        if rs is None:
            continue
        assumption = rs.assumption
        for t in rs.targets:
            rows.append((rs.model, t.model, f"{t.gpu_hours:,.1f} of {rs.held_gpu_hours:,.1f}",
                         f"{t.throughput_ratio:,.2f}", f"{rs.usd_per_gpu_hour:,.2f} → {t.usd_per_gpu_hour:,.2f}",
                         fmt.money(t.usd_today, exact=True), fmt.money(t.usd_on_target, exact=True),
                         fmt.money(t.saving_usd, exact=True)))
    if not rows:
        return None
    return ReportTable(
        columns=("model", "could run on", "held GPU-hours", "throughput ratio", "flexible $ per GPU-hour",
                 "cost today", "cost on it", "saving"),
        rows=tuple(rows),
        numeric=(False, False, True, True, True, True, True, True),
        caption="Right-size (what-if, never counted as cheapest): over the trial, on the GPUs measured, the held "
        f"GPU-hours that fit a cheaper model, each on the cheapest that fits, {assumption} (throughput ratio: "
        "this model's dense FP16 TFLOPS ÷ that one's; the catalogue's sources are in docs/analyzer.md)",
    )
