"""Section 6, sensitivity: each input moved on its own (the tornado) and demand growth."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from gpuaudit.analysis.columns import GrowthColumns, TornadoColumns
from gpuaudit.analysis.figure import Table
from gpuaudit.analysis.result import AnalysisResult
from gpuaudit.report.model import Chart, ChartSpec, ReportTable, Section, Series, Threshold
from gpuaudit.report.sections.formatting import (
    breakdown_table,
    scenario,
)
from gpuaudit.util import fmt


def build(r: AnalysisResult, step: Callable[[str], None]) -> Section:
    s = r.sensitivity
    t, tc = s.tornado, TornadoColumns
    name = tc.PARAMETER
    t.require(name, tc.LOW_MARGIN_USD, tc.HIGH_MARGIN_USD, tc.BASE_MARGIN_USD, tc.PLAN, tc.LOW_PLAN_USD,
              tc.HIGH_PLAN_USD, tc.BASE_PLAN_USD)
    charts_ = [_tornado_chart(r)] if t.rows else []
    lead = (
        f"Each input moved by ±{s.fraction:.0%} on its own, and demand growth per year: does the "
        f"recommendation survive?"
    )
    tornado_table = _with_limits(
        t,
        breakdown_table(
            t,
            caption=f"Each input ±{s.fraction:.0%}: value, cheapest scenario and break-even "
            "billed-hour utilization (— = never: renting is cheaper even with every GPU billed)",
            columns=(
                name,
                tc.LOW_VALUE,
                tc.BASE_VALUE,
                tc.HIGH_VALUE,
                tc.CHEAPEST_LOW,
                tc.CHEAPEST_HIGH,
                tc.BREAK_EVEN_LOW,
                tc.BREAK_EVEN_HIGH,
            ),
        ),
    )
    g = GrowthColumns
    growth_table = breakdown_table(
        s.growth,
        caption="Demand growth per year: cost of each scenario over the horizon",
        columns=(g.GROWTH_PER_YEAR, *(g.scenario_usd(sid) for sid in _GROWTH_SCENARIOS), g.CHEAPEST, g.HYBRID_GPUS),
    )
    return Section("sensitivity", "Sensitivity", lead, (), tuple(charts_), (tornado_table, growth_table))


def _tornado_chart(r: AnalysisResult) -> Chart:
    """The tornado of the recommended plan: its margin over the runner-up (or, with no runner-up, its own
    cost) with each input moved on its own."""
    s = r.sensitivity
    t, tc = s.tornado, TornadoColumns
    # The recommended plan's margin over the runner-up moves the right way with every input (all-cloud − the
    # cheapest owning plan did not: a dearer spot price looked better for renting when that plan rented most).
    name, low, high, base = tc.PARAMETER, tc.LOW_MARGIN_USD, tc.HIGH_MARGIN_USD, tc.BASE_MARGIN_USD
    plan = scenario(r, str(t.rows[0].get(tc.PLAN, "")))
    plan_name = (plan.label if plan else str(t.rows[0].get(tc.PLAN, ""))).lower()
    sides = (
        f"with one input at −{s.fraction:.0%} (green) or +{s.fraction:.0%} (purple); the solid line is the "
        "configured inputs"
    )
    margins = [x.get(k) for x in t.rows for k in (low, high, base)]
    if all(v is None for v in margins):  # no allowed plan differs from it anywhere: its own cost moves
        low, high, base = tc.LOW_PLAN_USD, tc.HIGH_PLAN_USD, tc.BASE_PLAN_USD
        axis = f"{plan_name}: cost over the horizon, USD"
        caption = (
            f"What {plan_name} (the recommended plan) costs over the horizon, {sides}. No other allowed "
            "plan differs from it, so there is no runner-up to compare with."
        )
    else:
        axis = f"{plan_name}: margin over the next cheapest plan, USD"
        caption = (
            f"How much cheaper {plan_name} (the recommended plan) is than the next cheapest different "
            f"plan over the horizon, {sides}. Below $0 another plan becomes the cheapest"
            + (" (where no other plan differs from it, $0)" if None in margins else "")
            + "."
        )
        if r.decision.tie:  # kept on a tie: a plan cheaper by up to the tolerance does not replace it
            caption += (
                f" It is kept on a tie: another plan cheaper by up to {fmt.money(r.decision.tie_usd)} "
                "(the cost model's uncertainty) does not replace it, so the solid line may sit below $0."
            )
    return Chart(
        "sensitivity",
        "Sensitivity",
        ChartSpec(
            "tornado",
            f"What moves the answer: each input ±{s.fraction:.0%}",
            labels=tuple(str(x[name]) for x in t.rows),
            unit=axis,
            series=(
                Series("low", tuple(float(x.get(low) or 0) for x in t.rows), f"input −{s.fraction:.0%}"),
                Series("high", tuple(float(x.get(high) or 0) for x in t.rows), f"input +{s.fraction:.0%}"),
            ),
            thresholds=(Threshold("base", float(t.rows[0].get(base) or 0)),),
        ),
        caption=caption,
    )


def _with_limits(t: Table, table: ReportTable) -> ReportTable:
    """The tornado table with, in the row of each input that could not move the full fraction, why (a spot share
    capped by the other shares reads "high = base" otherwise)."""
    t.require(TornadoColumns.LIMIT)
    rows = tuple(
        (f"{cells[0]} ({row[TornadoColumns.LIMIT]})", *cells[1:]) if row.get(TornadoColumns.LIMIT) else cells
        for row, cells in zip(t.rows, table.rows, strict=True)
    )
    return dataclasses.replace(table, rows=rows)


_GROWTH_SCENARIOS = ("stay-as-is", "all-cloud", "all-on-prem", "hybrid")  # the growth table's columns shown
