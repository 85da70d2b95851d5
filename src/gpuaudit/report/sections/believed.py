"""Section 1, believed vs real utilization, with the four-state ledger."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuaudit import schema
from gpuaudit.analysis import headline as hl
from gpuaudit.analysis.result import (
    HOURS_PER_YEAR,
    AnalysisResult,
)
from gpuaudit.report import charts
from gpuaudit.report.model import Chart, ChartSpec, KeyFigure, ReportTable, Section, Series
from gpuaudit.report.sections.formatting import (
    figure_tile,
    headline_tiles,
    value_or_zero,
)
from gpuaudit.util import fmt


def _phantom_formula(r: AnalysisResult) -> str:
    """How the phantom dollars come about, with the numbers (the analysis computed them: costs.phantom_usd), at
    the flexible price: what an hour released would save, the price on the card in section 5."""
    rate = r.costs.cloud_flexible_usd_per_gpu_hour.value
    if rate is None:
        return ""
    trial_hours = max(r.trial.days * 24, 1e-9)
    return (
        f"phantom GPU-hours (believed − S) × the cloud flexible price (section 5) = "
        f"{fmt.hours(r.utilization.phantom_gpu_hours.value)} × "
        f"${rate:,.2f}/GPU-h; per year: × {HOURS_PER_YEAR:,.0f} h ÷ {trial_hours:,.0f} trial hours"
    )


def _phantom_parts(r: AnalysisResult) -> str:
    """The phantom GPU-hours as the ledger's states add up to them: held with the SMs idle, plus allocated with
    no process, minus the time held outside any allocation (the ledger's held states count it; believed, the
    allocated hours, does not). The tile once named the first two only, which summed to more than it showed."""
    led = r.ledger
    if led is None:
        return ""
    parts = f" = {fmt.hours(led.held_idle.value)} held, SMs idle"
    if hl.scheduled(r):
        parts += f" + {fmt.hours(led.allocated_no_process.value)} allocated, no process"
        outside = led.held_outside_allocation_gpu_hours.value or 0.0
        if outside > 0:
            parts += f" − {fmt.hours(outside)} held outside any allocation"
    return parts


def build(r: AnalysisResult, step: Callable[[str], None]) -> Section:
    u = r.utilization
    trial_usd, per_year = r.costs.phantom_usd.value, r.costs.phantom_usd_per_year.value
    formula = _phantom_formula(r)
    at_least_sign = "≥ " if u.real_is_upper_bound else ""  # S is an upper bound: believed − S is a lower bound
    gap_hours = u.phantom_gpu_hours.value
    scheduled = hl.scheduled(r)
    figs = [
        *headline_tiles(r, hl.BELIEVED, hl.HELD_HOUR, hl.REAL, hl.PHANTOM_GAP, emphasis=(hl.REAL,)),
        KeyFigure(
            "Phantom GPU-hours: believed − real",
            ("≥ " if u.real_is_upper_bound else "") + fmt.hours(gap_hours),
            f"{u.phantom_gpu_hours.formula}: the believed GPU-hours that did no SM work"
            + _phantom_parts(r) + "; section 2's idle-held hours are the part held with the SMs fully idle",
        ),
        KeyFigure("Phantom gap in dollars (trial)", at_least_sign + fmt.money(trial_usd), formula),
        KeyFigure("… per year at this rate", at_least_sign + fmt.money(per_year), formula, emphasis=True),
        figure_tile("Efficiency while held S/R", u.efficiency_while_held),
        figure_tile("Kernel busy (duty cycle) B/W", u.busy_utilization),
    ]
    led = r.ledger
    chart = Chart(
        name="utilization",
        title="Believed vs real utilization",
        spec=ChartSpec(
            "utilization",
            title=f"{hl.short_name(hl.PHANTOM_GAP)} = {hl.by_key(r)[hl.PHANTOM_GAP].text}",
            series=(
                Series("runtime", (value_or_zero(u.runtime_utilization),)),
                Series("real", (value_or_zero(u.real_utilization),)),
                Series("busy", (u.busy_utilization.value,)),
                Series(
                    "allocated",
                    (value_or_zero(u.believed_utilization) if scheduled and u.believed_utilization else None,),
                ),
            ),
        ),
        caption="Runtime hours count a GPU as used whenever a process holds it; SM active measures the share "
        "of the GPU's streaming multiprocessors doing work."
        + (" Allocated is what the scheduler shows: GPUs it gave to jobs, used or not." if scheduled else ""),
    )
    ledger_parts = _ledger_parts(r) if led is not None else ((), ())
    rows = []
    for label, f in (
        ("W observed GPU-hours", u.observed_gpu_hours),
        ("R runtime GPU-hours", u.runtime_gpu_hours),
        ("B busy GPU-hours", u.busy_gpu_hours),
        ("S real GPU-hours", u.real_gpu_hours),
        ("Idle-held GPU-hours", u.idle_held_gpu_hours),
    ):
        rows.append((label, fmt.unit_value(f.value, f.unit), f.formula, f.definition or f.source))
    table = ReportTable(
        columns=("figure", "value", "formula", "meaning"),
        rows=tuple(rows),
        numeric=(False, True, False, False),
        caption="The hours behind the ratios",
    )
    notes = []
    if u.real_is_upper_bound:
        notes.append(
            f"Part of the fleet reports no SM activity, only engine-active or the duty cycle "
            f"({fmt.pct(u.upper_bound_share.value)} of observed hours): there S uses those, so real "
            "utilization is an upper bound."
        )
    engine = [s for s in r.trial.sources if s in schema.ENGINE_ACTIVE_SOURCES]
    if engine:
        notes.append(
            f"Rows from {', '.join(engine)} measure engine-active, not SM activity: the time any SM had "
            "work (one busy SM of 132 reads 100 %), an upper bound tighter than the duty cycle. To measure "
            "SM activity, add this line to the dcgm-exporter counters CSV (it ships commented out): "
            f"{schema.DCGM_SM_ACTIVE_CSV_LINE}"
        )
    if led is not None:
        notes.extend(led.notes)
    at_most = "at most " if u.real_is_upper_bound else ""
    at_least = "at least " if u.real_is_upper_bound else ""
    lead = (
        f"The fleet looks {fmt.pct(u.runtime_utilization.value)} used if you count the hours a job held a "
        f"GPU, but its SMs were active {at_most}{fmt.pct(u.real_utilization.value)} of the time: "
        f"{at_least}{fmt.hours(gap_hours)} of held GPU time did no work."
    )
    if scheduled and u.believed_utilization is not None:
        lead = (
            f"The scheduler shows the fleet {fmt.pct(u.believed_utilization.value)} allocated; processes held "
            f"its GPUs {fmt.pct(u.runtime_utilization.value)} of the time, and its SMs were active "
            f"{at_most}{fmt.pct(u.real_utilization.value)} of it: {at_least}{fmt.hours(gap_hours)} of "
            "allocated GPU time did no work."
        )
    return Section(
        "believed-vs-real",
        "Believed vs real utilization",
        lead,
        tuple(figs),
        (chart, *ledger_parts[0]),
        (table, *ledger_parts[1]),
        tuple(notes),
    )


def _ledger_parts(r: Any) -> tuple[tuple[Chart, ...], tuple[ReportTable, ...]]:
    """The four-state ledger: the fleet's states as a table, and per week as stacked bars."""
    led = r.ledger
    w = led.observed_gpu_hours.value or 0.0
    rows = []
    for key in ("productive", "held_idle", "allocated_no_process", "unallocated"):
        f = getattr(led, key)
        share = f.value / w if w > 0 and f.value is not None else None
        rows.append((charts.LEDGER_LABELS[key], fmt.unit_value(f.value, f.unit), fmt.pct(share), f.definition))
    basis = (
        "from the scheduler's allocations"
        if led.basis == "allocations"
        else "from the scheduler's allocations where hosts have them"
        if led.basis == "mixed"
        else "no scheduler allocations imported: believed is inferred from processes"
    )
    table = ReportTable(
        columns=("state", "GPU-hours", "share of W", "meaning"),
        rows=tuple(rows),
        numeric=(False, True, True, False),
        caption=f"Every observed GPU-hour in one of four states ({basis})",
    )
    weeks = [row["week"] for row in led.per_week.rows]
    if not weeks:
        return (), (table,)
    states = {
        k: [row[k] for row in led.per_week.rows]
        for k in ("productive", "held_idle", "allocated_no_process", "unallocated")
    }
    chart = Chart(
        name="ledger",
        title="Ledger per week",
        spec=ChartSpec(
            "ledger",
            labels=tuple(str(w) for w in weeks),
            series=tuple(Series(k, tuple(v), charts.LEDGER_LABELS[k]) for k, v in states.items()),
        ),
        caption="Stacked per week, the four states sum to the observed GPU-hours: productive (SM "
        "activity), held with the SMs idle, allocated with no process, and unallocated.",
    )
    return (chart,), (table,)
