"""Build the report model from the analyzer's result: ordered sections, in the order the issue asks.

Nothing here measures or estimates anything: every number is a field of `AnalysisResult` (or a direct
product of two of its fields, with the formula printed next to it). Breakdown tables are rendered from
their own column lists, so a column the analyzer adds shows up without a change here. Columns are read
by the names in `gpuaudit.analysis.result` (`*Columns`), never guessed: a column the analyzer stops
writing raises `ResultContractError` instead of dropping a chart.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gpuaudit import schema
from gpuaudit.analysis import headline as hl
from gpuaudit.analysis.confidence import no_interval_reason
from gpuaudit.analysis.recommend import constraint_text
from gpuaudit.analysis.result import (
    HOURS_PER_YEAR,
    AnalysisResult,
    BreakEvenCurveColumns,
    Condition,
    Consolidation,
    CostScenario,
    DemandDurationColumns,
    Figure,
    GpuCoverageColumns,
    GrowthColumns,
    HolderColumns,
    HourOfWeekColumns,
    HybridCurveColumns,
    PerJobColumns,
    PerNodeColumns,
    PerPodColumns,
    PerUserColumns,
    PerWeekColumns,
    ResultContractError,
    Table,
    TableColumn,
    TornadoColumns,
)
from gpuaudit.report import charts
from gpuaudit.report.model import Chart, KeyFigure, Report, ReportTable, Section, Verdict
from gpuaudit.util import fmt

TOP_N = 10

_HEADLINES = {
    ("cloud", "cloud"): "Stay in the cloud",
    ("cloud", "on-prem"): "Move to the cloud",
    ("on-prem", "on-prem"): "Keep the GPUs on-prem",
    ("on-prem", "cloud"): "Bring the GPUs on-prem",
}


def build_report(result: AnalysisResult, *, version: str, title: str = "GPU utilization audit",
                 progress: Callable[[str], None] | None = None) -> Report:
    """The report model for one analysis result. `progress` gets a short message per chart drawn."""
    step = progress or (lambda _msg: None)
    sections = (
        _believed_vs_real(result, step),
        _waste(result, step),
        _when(result, step),
        _demand(result, step),
        _costs(result, step),
        _sensitivity(result, step),
        _method(result),
    )
    trial = result.trial
    subtitle = (
        f"{trial.gpus:,} GPU{'' if trial.gpus == 1 else 's'} on {trial.hosts:,} host{'' if trial.hosts == 1 else 's'}"
        f" · trial {_date(trial.start)} → {_date(trial.end)} UTC "
        f"({fmt.span(trial.days)}) · {trial.samples:,} samples"
    )
    return Report(
        title=title,
        subtitle=subtitle,
        verdict=_verdict(result),
        sections=sections,
        generated_at=_iso(result.generated_at),
        version=version,
        schema_version=int(result.dataset_schema_version),
    )


# -- helpers -------------------------------------------------------------------------------------------

def _iso(t: dt.datetime) -> str:
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _date(t: dt.datetime | dt.date) -> str:
    if isinstance(t, dt.datetime):
        t = t.astimezone(dt.UTC) if t.tzinfo else t
        return t.strftime("%Y-%m-%d %H:%M")
    return t.isoformat()


def _fig(label: str, figure: Figure, *, emphasis: bool = False, text: str | None = None) -> KeyFigure:
    value_text = text if text is not None else fmt.unit_value(figure.value, figure.unit)
    if figure.upper_bound and figure.value is not None:
        value_text = "≤ " + value_text
    elif figure.lower_bound and figure.value is not None:
        value_text = "≥ " + value_text
    source = figure.formula if not figure.source else f"{figure.formula} — {figure.source}"
    return KeyFigure(label=label, text=value_text, source=_in_words(source), emphasis=emphasis)


def _headline(h: hl.HeadlineFigure, *, emphasis: bool = False) -> KeyFigure:
    """A headline figure as a tile: its one name and its one text (analysis.headline)."""
    f = h.figure
    source = f.formula if not f.source else f"{f.formula} — {f.source}"
    return KeyFigure(label=h.name, text=h.text, source=_in_words(source), emphasis=emphasis)


def _headlines(r: AnalysisResult, *keys: str, emphasis: tuple[str, ...] = ()) -> list[KeyFigure]:
    figs = hl.by_key(r)
    return [_headline(figs[k], emphasis=k in emphasis) for k in keys if k in figs]


def _cell(value: Any, unit: str) -> str:
    if value is None:
        return fmt.MISSING["cell"]
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        if not unit and isinstance(value, float):
            return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:,.4g}"
        if not unit:
            return f"{value}"
        return fmt.unit_value(float(value), unit)
    if isinstance(value, dt.datetime):
        return _iso(value)
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def _is_numeric(table: Table, col: TableColumn) -> bool:
    if col.unit:
        return True
    return any(isinstance(r.get(col.name), int | float) and not isinstance(r.get(col.name), bool)
               for r in table.rows[:5])


def _label(col: TableColumn) -> str:
    name = col.name.removesuffix("_usd").replace("_", " ")  # cells already say "$"
    return name


def _table(table: Table, *, sort_by: str | None = None, limit: int | None = None, caption: str | None = None,
           columns: Sequence[str] | None = None, empty: str = "nothing to show") -> ReportTable:
    """A breakdown table as display strings (all its columns, or `columns` in that order), optionally the top
    rows by one column. A named column the table lacks raises ResultContractError."""
    if columns is None:
        cols = list(table.columns)
    else:
        table.require(*columns)
        by_name = {c.name: c for c in table.columns}
        cols = [by_name[name] for name in columns]
    rows = list(table.rows)
    if sort_by is not None:
        table.require(sort_by)
        rows.sort(key=lambda r: -(r.get(sort_by) or 0))
    total = len(rows)
    if limit is not None:
        rows = rows[:limit]
    cap = _in_words(caption if caption is not None else table.description).rstrip(". ")
    if limit is not None and total > limit:
        cap = f"{cap} (top {limit} of {total:,})"
    return ReportTable(
        columns=tuple(_label(c) + (f" ({_unit_label(c.unit)})" if _unit_label(c.unit) else "") for c in cols),
        rows=tuple(tuple(_cell(r.get(c.name), c.unit) for c in cols) for r in rows),
        numeric=tuple(_is_numeric(table, c) for c in cols),
        caption=cap,
        empty=empty,
    )


def _unit_label(unit: str) -> str:
    # Every formatted cell carries its unit ("%", "$", "GPU-h", "W"), so headers stay short.
    return ""


# -- the verdict -----------------------------------------------------------------------------------------

def _verdict(r: AnalysisResult) -> Verdict:
    d = r.decision
    rec = d.recommendation
    current = d.inputs.current.value
    rule_branch = d.branch.value
    headline = "Go hybrid" if rec == "hybrid" else _HEADLINES.get((rec, current), rec)
    if d.action:  # the plan in counts: what to sell, keep, buy, reserve and rent
        headline += f": {d.action}"
    elif rec == "hybrid":
        headline += f": own {r.hybrid.n_owning:,} GPUs, burst the rest to the cloud"
    if not d.determined:
        headline += " (the utilization rule cannot tell: measure SM activity)"
    elif not d.agrees_with_costs:
        headline += f" — your prices say so; the utilization rule says {rule_branch}"
    conds = "; ".join(_condition(c) for c in d.rule.conditions)
    description = d.rule.description.rstrip(". ")
    rule = f"{description} ({conds})" if conds else description
    if not d.determined:
        rule += ". Possible branches while SM activity is unmeasured: " + " or ".join(d.possible_branches)
    caveats = [c for c in d.caveats if not c.lower().startswith("provisional")]  # said on its own line
    if caveats:
        rule += ". Caveats: " + "; ".join(caveats)
    c = r.confidence
    conf = d.confidence
    what = "the upper bound of real utilization" if c.real_is_upper_bound else "real utilization"
    if c.resamples:
        confidence = (
            f"{conf.level} — {what} {fmt.pct(c.real_utilization.low)} to {fmt.pct(c.real_utilization.high)} "
            f"({c.level:.0%} interval); the rule's branch changes in {c.flip_share:.0%} and the cheapest scenario in "
            f"{c.cheapest_flip_share:.0%} of {c.resamples:,} resamples of the {c.days} observed days"
        )
    else:
        confidence = (f"{conf.level} — {what} {fmt.pct(c.real_utilization.point)}; no day-resamples "
                      f"({no_interval_reason(c)}), no interval")
    if conf.reasons:
        confidence += ". Not higher because: " + "; ".join(conf.reasons)
    figs = [*_headlines(r, hl.REAL, hl.BELIEVED, hl.PHANTOM_GAP, emphasis=(hl.REAL,)), _cheapest_figure(r)]
    lever = _lever_figure(r)
    if lever is not None:
        figs.append(lever)
    reason = (f"the trial covers {fmt.span(r.trial.days)}, less than the minimum for a firm decision; "
              f"collect more data and re-run")
    return Verdict(
        branch=rec,
        headline=headline,
        why=d.headline,
        rule=rule,
        confidence=confidence,
        provisional=bool(d.provisional),
        provisional_reason=reason,
        reevaluate_on=d.reevaluate_on.isoformat(),
        figures=tuple(figs),
        cost_note=_cost_note(r),
    )


def _lever_figure(r: AnalysisResult) -> KeyFigure | None:
    """The consolidation lever beside the buy/rent answer: how many GPUs the work fits on, what that saves and
    how (never part of "cheapest": it changes how GPUs are held)."""
    c = r.consolidation
    # a saving inside the cost model's own uncertainty (the tie tolerance) is no lever
    if c is None or c.saving_usd <= max(r.decision.tie_usd, 0.0):
        return None
    how = "; ".join(c.how) if c.how else "pack the work onto fewer GPUs"
    return KeyFigure(
        "Biggest lever: consolidation (not in “cheapest”)",
        f"packed, the recommended plan {_lever_change(c)}: {fmt.money(c.saving_usd)} less",
        f"the work packed at {c.target_utilization:.0%} SM activity fits on {c.fits_on_gpus:,} GPUs (ceil(peak "
        f"SM-weighted demand {c.peak_in_use_gpus:,.1f} GPUs ÷ {c.target_utilization:.0%} target)); the recommended "
        f"plan on the packed work: {c.plan}, {fmt.money(c.plan_usd)} against {fmt.money(c.recommended_usd)}. "
        f"How: {how}")


def _lever_change(c: Consolidation) -> str:
    """What consolidation changes in the recommended plan, in its own terms: the GPUs it owns and the GPU-hours
    it rents (the packed work's GPU count is the tile's source, labelled as such)."""
    parts = []
    if c.owned_gpus != c.recommended_owned_gpus:
        parts.append(f"owns {c.owned_gpus:,} GPUs instead of {c.recommended_owned_gpus:,}")
    fewer = c.recommended_cloud_gpu_hours - c.cloud_gpu_hours
    if abs(fewer) >= 0.5:
        parts.append(f"rents {fmt.num(abs(fewer))} {'fewer' if fewer > 0 else 'more'} GPU-hours")
    return " and ".join(parts) if parts else "keeps its GPUs and uses them fully"


def _cost_note(r: AnalysisResult) -> str:
    d = r.decision
    if d.agrees_with_costs:
        return ""
    best = _scenario(r, r.costs.cheapest)
    name = best.label if best else r.costs.cheapest
    if not d.determined:
        return (f"The utilization rule could land on {' or '.join(d.possible_branches)}: real utilization is only "
                f"bounded. The cost model, which bills held hours (measured), finds {name} cheapest. See section 5.")
    return (f"The utilization rule says {d.branch.value}; the cost "
            f"model finds {name} cheaper by {fmt.money(d.versus_tree_usd)} over {r.costs.horizon_months} months "
            "with your prices. The recommendation follows the prices; check them in Method and assumptions.")


def _condition(c: Condition) -> str:
    def show(v: Any) -> str:
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float) and c.fact.endswith(("utilization", "share")):
            return fmt.pct(v)
        if isinstance(v, float):
            return f"{v:,.4g}"
        return str(v)

    return f"{c.fact.replace('_', ' ')} = {show(c.actual)} {c.op} {show(c.threshold)}"


def _scenario(r: AnalysisResult, sid: str) -> CostScenario | None:
    return next((s for s in r.costs.scenarios if s.id == sid), None)


def _cheapest_figure(r: AnalysisResult) -> KeyFigure:
    best = _scenario(r, r.costs.cheapest)
    stay = _scenario(r, "stay-as-is")
    months = r.costs.horizon_months
    if best is None:
        return KeyFigure("Cheapest scenario", r.costs.cheapest, "cost model")
    if stay is not None and stay.id != best.id and stay.total.value is not None and best.total.value is not None:
        saving = r.decision.saving_usd  # stay-as-is minus the cheapest
        return KeyFigure(
            label=f"Cheapest over {months} months: {best.label}",
            text=f"saves {fmt.money(saving)}" if saving >= 0 else f"costs {fmt.money(-saving)} more",
            source=f"vs today: {stay.label} {fmt.money(stay.total.value)} − {best.label} "
                   f"{fmt.money(best.total.value)}",
            emphasis=True,
        )
    return KeyFigure(f"Cheapest over {months} months: {best.label}", fmt.money(best.total.value),
                     best.total.formula)


# -- 1. believed vs real -----------------------------------------------------------------------------------

def _phantom_formula(r: AnalysisResult) -> str:
    """How the phantom dollars come about, with the numbers (the analysis computed them: costs.phantom_usd), at
    the flexible price: what an hour released would save, the price on the card in section 5."""
    rate = r.costs.cloud_flexible_usd_per_gpu_hour.value
    if rate is None:
        return ""
    trial_hours = max(r.trial.days * 24, 1e-9)
    return (f"phantom GPU-hours (believed − S) × the cloud flexible price (section 5) = "
            f"{fmt.hours(r.utilization.phantom_gpu_hours.value)} × "
            f"${rate:,.2f}/GPU-h; per year: × {HOURS_PER_YEAR:,.0f} h ÷ {trial_hours:,.0f} trial hours")


def _believed_vs_real(r: AnalysisResult, step: Callable[[str], None]) -> Section:
    u = r.utilization
    trial_usd, per_year = r.costs.phantom_usd.value, r.costs.phantom_usd_per_year.value
    formula = _phantom_formula(r)
    at_least_sign = "≥ " if u.real_is_upper_bound else ""  # S is an upper bound: believed − S is a lower bound
    gap_hours = u.phantom_gpu_hours.value
    scheduled = hl.scheduled(r)
    figs = [
        *_headlines(r, hl.BELIEVED, hl.HELD_HOUR, hl.REAL, hl.PHANTOM_GAP, emphasis=(hl.REAL,)),
        KeyFigure("Phantom GPU-hours: believed − real", ("≥ " if u.real_is_upper_bound else "") + fmt.hours(gap_hours),
                  f"{u.phantom_gpu_hours.formula}: the believed GPU-hours that did no SM work (held but idle"
                  + (", and allocated with no process" if scheduled else "") + "; section 2's idle-held hours are "
                  "the part held with the SMs fully idle)"),
        KeyFigure("Phantom gap in dollars (trial)", at_least_sign + fmt.money(trial_usd), formula),
        KeyFigure("… per year at this rate", at_least_sign + fmt.money(per_year), formula, emphasis=True),
        _fig("Efficiency while held S/R", u.efficiency_while_held),
        _fig("Kernel busy (duty cycle) B/W", u.busy_utilization),
    ]
    led = r.ledger
    step("chart: believed vs real")
    chart = Chart(
        name="utilization",
        title="Believed vs real utilization",
        **_svgs(charts.utilization_bars, _v(u.runtime_utilization), _v(u.real_utilization), u.busy_utilization.value,
                                    _v(u.allocated_utilization) if scheduled and u.allocated_utilization else None),
        caption="Runtime hours count a GPU as used whenever a process holds it; SM active measures the share "
                "of the GPU's streaming multiprocessors doing work."
                + (" Allocated is what the scheduler shows: GPUs it gave to jobs, used or not." if scheduled else ""),
    )
    ledger_parts = _ledger_parts(r, step) if led is not None else ((), ())
    rows = []
    for label, f in (
        ("W observed GPU-hours", u.observed_gpu_hours),
        ("R runtime GPU-hours", u.runtime_gpu_hours),
        ("B busy GPU-hours", u.busy_gpu_hours),
        ("S real GPU-hours", u.real_gpu_hours),
        ("Idle-held GPU-hours", u.idle_held_gpu_hours),
    ):
        rows.append((label, fmt.unit_value(f.value, f.unit), f.formula, f.definition or f.source))
    table = ReportTable(columns=("figure", "value", "formula", "meaning"), rows=tuple(rows),
                  numeric=(False, True, False, False), caption="The hours behind the ratios")
    notes = []
    if u.real_is_upper_bound:
        notes.append(f"Part of the fleet reports no SM activity, only engine-active or the duty cycle "
                     f"({fmt.pct(u.upper_bound_share.value)} of observed hours): there S uses those, so real "
                     "utilization is an upper bound.")
    engine = [s for s in r.trial.sources if s in schema.ENGINE_ACTIVE_SOURCES]
    if engine:
        notes.append(f"Rows from {', '.join(engine)} measure engine-active, not SM activity: the time any SM had "
                     "work (one busy SM of 132 reads 100 %), an upper bound tighter than the duty cycle. To measure "
                     "SM activity, add this line to the dcgm-exporter counters CSV (it ships commented out): "
                     f"{schema.DCGM_SM_ACTIVE_CSV_LINE}")
    if led is not None:
        notes.extend(led.notes)
    at_most = "at most " if u.real_is_upper_bound else ""
    at_least = "at least " if u.real_is_upper_bound else ""
    lead = (f"The fleet looks {fmt.pct(u.runtime_utilization.value)} used if you count the hours a job held a "
            f"GPU, but its SMs were active {at_most}{fmt.pct(u.real_utilization.value)} of the time: "
            f"{at_least}{fmt.hours(gap_hours)} of held GPU time did no work.")
    if scheduled and u.allocated_utilization is not None:
        lead = (f"The scheduler shows the fleet {fmt.pct(u.allocated_utilization.value)} allocated; processes held "
                f"its GPUs {fmt.pct(u.runtime_utilization.value)} of the time, and its SMs were active "
                f"{at_most}{fmt.pct(u.real_utilization.value)} of it: {at_least}{fmt.hours(gap_hours)} of "
                "allocated GPU time did no work.")
    return Section("believed-vs-real", "Believed vs real utilization", lead, tuple(figs),
                   (chart, *ledger_parts[0]), (table, *ledger_parts[1]), tuple(notes))


def _ledger_parts(r: Any, step: Callable[[str], None]) -> tuple[tuple[Chart, ...], tuple[ReportTable, ...]]:
    """The four-state ledger: the fleet's states as a table, and per week as stacked bars."""
    led = r.ledger
    w = led.observed_gpu_hours.value or 0.0
    rows = []
    for key in ("productive", "held_idle", "allocated_no_process", "unallocated"):
        f = getattr(led, key)
        share = f.value / w if w > 0 and f.value is not None else None
        rows.append((charts.LEDGER_LABELS[key], fmt.unit_value(f.value, f.unit), fmt.pct(share), f.definition))
    basis = ("from the scheduler's allocations" if led.basis == "allocations" else
             "from the scheduler's allocations where hosts have them" if led.basis == "mixed" else
             "no scheduler allocations imported: believed is inferred from processes")
    table = ReportTable(columns=("state", "GPU-hours", "share of W", "meaning"), rows=tuple(rows),
                        numeric=(False, True, True, False),
                        caption=f"Every observed GPU-hour in one of four states ({basis})")
    weeks = [row["week"] for row in led.per_week.rows]
    if not weeks:
        return (), (table,)
    step("chart: ledger per week")
    states = {k: [row[k] for row in led.per_week.rows]
              for k in ("productive", "held_idle", "allocated_no_process", "unallocated")}
    chart = Chart(name="ledger", title="Ledger per week", **_svgs(charts.ledger_weekly, weeks, states),
                  caption="Stacked per week, the four states sum to the observed GPU-hours: productive (SM "
                          "activity), held with the SMs idle, allocated with no process, and unallocated.")
    return (chart,), (table,)


def _svgs(draw: Callable[..., str], *args: Any) -> dict[str, Any]:
    """A chart's SVG, and how to draw it again for a phone (only the HTML report asks, when it renders)."""
    return {"svg": draw(*args), "narrow_svg": functools.partial(charts.narrow, draw, *args)}


def _v(f: Figure) -> float:
    return float(f.value) if f.value is not None else 0.0


# -- 2. where the waste is -------------------------------------------------------------------------------

def _waste(r: AnalysisResult, step: Callable[[str], None]) -> Section:
    u, b = r.utilization, r.breakdowns
    figs = [
        *_headlines(r, hl.IDLE_HELD, emphasis=(hl.IDLE_HELD,)),
        _fig("GPUs never used", u.never_used_count),
    ]
    charts_: list[Chart] = []
    tables: list[ReportTable] = []
    h = HolderColumns  # per_node carries the same names (WrsColumns, PerNodeColumns.GPUS)
    idle = h.IDLE_HELD_GPU_HOURS
    for key, table, who, label_col in (("user", b.per_user, "user", PerUserColumns.USER),
                                       ("job", b.per_job, "job", PerJobColumns.JOB),
                                       ("pod", b.per_pod, "pod", PerPodColumns.POD),
                                       ("node", b.per_node, "node", PerNodeColumns.HOST)):
        if not table.rows:
            if key != "pod":
                tables.append(_table(table, empty=f"no {who} information in the data"))
            continue
        table.require(label_col, idle)
        if key == "user":
            top = sorted(table.rows, key=lambda row: -(row.get(idle) or 0))[:TOP_N]
            step(f"chart: idle-held hours by {who}")
            charts_.append(Chart(
                name=f"idle-by-{key}",
                title=f"Idle-held GPU-hours by {who}",
                **_svgs(charts.top_bars, [str(row.get(label_col)) for row in top], [row.get(idle) or 0 for row in top],
                                    f"Idle-held GPU-hours by {who} (top {len(top)})", "GPU-hours"),
            ))
        tables.append(_table(table, sort_by=idle, limit=TOP_N, columns=(
            label_col, h.GPUS, h.RUNTIME_GPU_HOURS, h.REAL_GPU_HOURS, h.EFFICIENCY_WHILE_HELD, idle)))
    never_table = ReportTable(columns=("GPU",), rows=tuple((g,) for g in u.never_used_gpus), numeric=(False,),
                  caption="GPUs no process used during the trial", empty="every GPU was used at least once")
    tables.append(never_table)
    never = int(u.never_used_count.value or 0)
    lead = (f"{fmt.hours(u.idle_held_gpu_hours.value)} were held by a process while the SMs did nothing; "
            f"{never:,} GPU{'' if never == 1 else 's'} {'was' if never == 1 else 'were'} never used at all.")
    return Section("waste", "Where the waste is", lead, tuple(figs), tuple(charts_), tuple(tables))


_DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


# -- 3. when ---------------------------------------------------------------------------------------------------

def _when(r: AnalysisResult, step: Callable[[str], None]) -> Section:
    b = r.breakdowns
    charts_: list[Chart] = []
    how = b.hour_of_week
    val, day, hour = HourOfWeekColumns.REAL_UTILIZATION, HourOfWeekColumns.DAY_OF_WEEK, HourOfWeekColumns.HOUR_OF_DAY
    how.require(val, day, hour)
    if how.rows:
        grid: list[list[float | None]] = [[None] * 24 for _ in range(7)]
        for row in how.rows:
            grid[int(row[day])][int(row[hour])] = row.get(val)
        step("chart: hour-of-week heatmap")
        charts_.append(Chart("hour-of-week", "Real utilization by hour of week",
                             **_svgs(charts.hour_of_week_heatmap, grid, "Real utilization by hour of week (UTC)"),
                             caption="Each cell: SM-active share of observed GPU time in that hour of the week, "
                                     "averaged over the trial. The colour scale spans the lowest to the highest "
                                     "cell (see the bar), not 0-100 %."))
    wk, w = b.per_week, PerWeekColumns
    week, rt, rl = w.WEEK, w.RUNTIME_UTILIZATION, w.REAL_UTILIZATION
    wk.require(week, rt, rl)
    if wk.rows:
        step("chart: weekly trend")
        charts_.append(Chart("weekly-trend", "Weekly trend",
                             **_svgs(charts.weekly_trend, [str(x[week]) for x in wk.rows],
                                                 [x.get(rt) or 0 for x in wk.rows],
                                                 [x.get(rl) or 0 for x in wk.rows])))
    lead = "When the GPUs work: idle nights and weekends are capacity the cloud would not bill."
    cells = [row for row in how.rows if row.get(val) is not None]
    if cells:
        hi = max(cells, key=lambda row: row[val])
        lo = min(cells, key=lambda row: row[val])

        def when(row: dict[str, Any]) -> str:
            return f"{_DAY_NAMES[int(row[day])]} {int(row[hour]):02d}:00 UTC"

        lead = (f"Busiest hour of the week: {when(hi)} at {fmt.pct(hi[val])} real utilization; quietest: "
                f"{when(lo)} at {fmt.pct(lo[val])}. Hours when owned GPUs sit idle are hours the cloud would "
                f"not bill.")
    week_table = _table(wk, columns=(week, w.GPUS, rt, rl, w.EFFICIENCY_WHILE_HELD, w.IDLE_HELD_GPU_HOURS))
    return Section("when", "When", lead, (), tuple(charts_), (week_table,))


# -- 4. demand and sizing --------------------------------------------------------------------------------

def _demand(r: AnalysisResult, step: Callable[[str], None]) -> Section:
    h, be, c = r.hybrid, r.break_even, r.costs
    hurdle = h.hurdle_gpus.value
    figs = [
        KeyFigure("GPUs to own (the recommended plan)", f"{_owned_by_recommendation(r):,}",
                  f"the owned GPUs of the recommended plan ({_recommended_label(r)}); the figures below are checks",
                  emphasis=True),
        KeyFigure("Check: best hybrid (own N ≥ 1, rent above)", f"{h.n_owning:,}",
                  "N ≥ 1 minimizing owned cost(N) + cloud cost of demand above N over the fleet-scaled demand "
                  f"series ({h.demand_basis}); " + (
                      f"the best N ≥ 0 (written N*) is {h.n_star:,} (0 = renting everything is cheapest)"
                      if not h.min_owned_gpus else
                      f"N is at least {h.min_owned_gpus:,}, the latency-sensitive share's peak (it never bursts): "
                      f"the best such N (written N*) is {h.n_star:,}")),
        KeyFigure("Check: critical fractile (fixed costs left out)", f"{h.critical_fractile_n:,}",
                  f"largest N with demand ≥ N at least c_own/c_cloud of the time (fixed costs left out; "
                  f"U = {h.cost_ratio_u.value:,.2f}); {'within' if h.agrees else 'more than'} {h.tolerance} GPU(s) of "
                  "the best N ≥ 1"),
        KeyFigure("Check: owning pays only above", "never at these prices" if hurdle is None
                  else f"~{hurdle:,.1f} GPUs held around the clock",
                  f"{h.hurdle_gpus.formula}; fixed costs {fmt.money(h.fixed_cost_usd)}"),
        _fig("Peak demand", h.peak_demand),
        _fig("Mean demand", h.mean_demand),
        *_headlines(r, hl.BREAK_EVEN, hl.BILLED_HOUR, emphasis=(hl.BREAK_EVEN,)),
        _fig("… as real utilization at today's efficiency", be.real_equivalent,
             text="never" if be.never else None),
    ]
    charts_: list[Chart] = []
    dur, share = r.breakdowns.demand_duration, DemandDurationColumns.SHARE_OF_HOURS
    dcol = _BASIS_COLUMN.get(h.demand_basis)
    if dcol is None:
        raise ResultContractError(f"hybrid.demand_basis {h.demand_basis!r}: no duration curve of that series")
    dur.require(dcol, share)
    if dur.rows:
        xs, ys = dur.values(dcol), dur.values(share)
        step("chart: demand")
        charts_.append(Chart("demand", "Demand duration curve",
                             **_svgs(charts.demand_duration, xs, ys, float(h.n_owning), float(r.trial.gpu_equivalents),
                                                    _DEMAND_LABELS.get(dcol, dcol.replace("_", " "))),
                             caption=f"From the fleet demand series ({dcol.replace('_', ' ')}, hourly means of "
                                     f"{h.bucket_s:,.0f} s buckets); the marked N is the hybrid's best N ≥ 1."))
    u_star = be.billed_utilization.value
    k = BreakEvenCurveColumns
    be.curve.require(k.BILLED_UTILIZATION, k.CLOUD_USD_PER_GPU_YEAR, k.OWNED_USD_PER_GPU_YEAR)
    if be.curve.rows:
        years = c.horizon_months / 12
        step("chart: break-even")
        charts_.append(Chart("break-even", "Break-even curve",
                             **_svgs(charts.break_even_curve, be.curve.values(k.BILLED_UTILIZATION),
                                                     be.curve.values(k.CLOUD_USD_PER_GPU_YEAR),
                                                     be.curve.values(k.OWNED_USD_PER_GPU_YEAR), be.measured_billed,
                                                     None if be.never else u_star, "USD per GPU-year (PV)",
                                                     "billed-hour utilization"),
                             caption=f"Owning ({_REFERENCE_WORDS.get(be.own_reference, be.own_reference)}): "
                                     f"{fmt.money(be.own_usd)} over "
                                     f"{c.horizon_months} months ÷ {c.fleet_gpus:,} GPUs ÷ {years:g} years. Renting: "
                                     f"{fmt.money(be.rent_fixed_usd)} fixed + {fmt.money(be.rent_variable_usd)} "
                                     "compute at today's billed hours, in proportion to them; equal to owning at u* "
                                     f"({be.billed_utilization.formula})."))
    n_col, cost_col = HybridCurveColumns.N, HybridCurveColumns.TOTAL_USD
    h.curve.require(n_col, cost_col)
    if h.curve.rows:
        step("chart: hybrid cost curve")
        charts_.append(Chart("hybrid-curve", "Hybrid cost by owned GPUs",
                             **_svgs(charts.cost_curve, [float(x[n_col]) for x in h.curve.rows],
                                               [float(x.get(cost_col) or 0) for x in h.curve.rows],
                                               float(h.n_star), f"USD over {c.horizon_months} months (PV)"),
                             caption="Owned cost of N GPUs plus the cloud cost of the demand above N, for each N "
                                     "(N = 0: all cloud)."))
    tables = ()
    whole = _REFERENCE_WORDS.get(be.own_reference, be.own_reference)
    verdict = (f"renting all of it is cheaper than {whole}" if be.verdict == "cloud"
               else f"{whole} is cheaper than renting all of it")
    lead = (f"Demand peaked at {fmt.unit_value(h.peak_demand.value, 'count')} GPUs and averaged "
            f"{fmt.num(h.mean_demand.value, 1)}. The cloud bills the hours a GPU is held or allocated, busy or not: "
            f"{whole} ({c.fleet_gpus:,} GPUs) pays against renting all of its demand above "
            f"{fmt.pct(u_star)} billed-hour utilization (u*); the fleet's is {fmt.pct(be.measured_billed)}, "
            f"so {verdict}. "
            f"This compares the two extremes; the recommended plan ({_recommended_label(r)}) is the cheapest of all "
            "the plans, in section 5.")
    if be.never:
        lead = (f"Renting all of the demand is cheaper than {whole} even with every GPU held all the time, at these "
                f"prices; the recommended plan is {_recommended_label(r)}.")
    rule_out = constraint_text(r.decision.inputs)
    if rule_out:  # the comparison is still shown, and why it does not decide is said beside it
        lead += (f" Renting all of it is not allowed here ({rule_out}), so the recommended plan "
                 f"({_recommended_label(r)}) is the cheapest of the plans that are.")
    return Section("demand", "Demand and sizing", lead, tuple(figs), tuple(charts_), tables)


# What the break-even's own_reference means, in words (the result keeps the machine key).
_REFERENCE_WORDS = {
    "buy-the-fleet": "buying the whole fleet",
    "keep-the-owned-fleet": "keeping the GPUs owned today",
    "keep-owned-and-buy-the-rest": "keeping the GPUs owned today and buying the rest of the fleet",
}


def _in_words(text: str) -> str:
    """`text` (a formula or source the analyzer wrote) with each reference-plan key in words: a CFO reads
    "keeping the GPUs owned today", not "keep-the-owned-fleet". Longest key first, so none eats a longer one."""
    for key in sorted(_REFERENCE_WORDS, key=len, reverse=True):
        text = text.replace(key, _REFERENCE_WORDS[key])
    return text


def _recommended_label(r: AnalysisResult) -> str:
    sid = r.decision.recommended_scenario or r.costs.cheapest
    s = _scenario(r, sid)
    return (s.label if s else sid).lower()


def _owned_by_recommendation(r: AnalysisResult) -> int:
    sid = r.decision.recommended_scenario or r.costs.cheapest
    s = _scenario(r, sid)
    return int(s.owned_gpus) if s else 0


# hybrid.demand_basis -> the duration curve's column (the curve is of the series the hybrid is sized on)
_BASIS_COLUMN = {"held": DemandDurationColumns.GPUS_HELD}
_DEMAND_LABELS = {DemandDurationColumns.GPUS_HELD: "GPUs held by a process"}


# -- 5. costs --------------------------------------------------------------------------------------------------

def _costs(r: AnalysisResult, step: Callable[[str], None]) -> Section:
    c = r.costs
    months = c.horizon_months
    base = [s for s in c.scenarios if not s.what_if]
    what_if = [s for s in c.scenarios if s.what_if]

    def rows_of(scenarios: list[CostScenario]) -> tuple[tuple[str, ...], ...]:
        rows = []
        for s in scenarios:
            marker = " ◀ cheapest" if s.id == c.cheapest else "" if s.allowed else " (not allowed: rents)"
            rows.append((s.label + marker, s.description, f"{s.owned_gpus:,}", fmt.hours(s.cloud_gpu_hours),
                         fmt.money(s.monthly_usd), fmt.money(s.total.value, exact=True)))
        return tuple(rows)

    cols = ("scenario", "what it means", "owned GPUs", "cloud GPU-hours", "PV ÷ months (not cash)",
            f"total, {months} months")
    rate = f"{c.discount_rate_per_year:.0%}/year"
    table = ReportTable(columns=cols, rows=rows_of(base), numeric=(False, False, True, True, True, True),
                  caption=f"Present value per scenario over {months} months at {rate} (cost model preset: {c.preset})")
    plans = ReportTable(columns=cols, rows=rows_of(what_if), numeric=(False, False, True, True, True, True),
                  caption=f"If behaviour changes (held hours × {c.pack_factor:.2f} on both sides): plans, never "
                          "counted as cheapest", empty="no behaviour-change plans")
    parts = sorted({k for s in c.scenarios for k in s.components})
    comp = ReportTable(
        columns=("scenario", *[p.replace("_", " ") for p in parts]),
        # A component a plan does not have costs it nothing: $0, as the plans that carry it at zero spell it.
        rows=tuple((s.label, *[fmt.money(s.components.get(p, 0.0)) for p in parts])
                   for s in c.scenarios),
        numeric=(False, *[True] * len(parts)),
        caption="Where each total comes from (USD, present value; residual value is negative: what is owned at the end "
                "is still worth it; owned value kept: today's resale value of the owned GPUs a plan keeps, the "
                "money keeping them forgoes)",
    )
    years = max(1, -(-months // 12))
    versus = _scenario(r, c.payback_against) if c.payback_against else None
    against = (versus.label if versus else c.payback_against or "renting (not allowed here)").lower()
    cash = ReportTable(
        columns=("scenario", "capex", f"payback vs {against}", *[f"year {y + 1}" for y in range(years)]),
        rows=tuple((s.label, fmt.money(s.capex_usd) if s.capex_usd else "—",
                    (f"{s.payback_months:.1f} months" if s.payback_months is not None else
                     f"not within {months} months" if s.capex_usd and versus else "—"),
                    *[fmt.money(sum(s.cash_usd_by_month[12 * y:12 * y + 12])) for y in range(years)])
                   for s in base if s.cash_usd_by_month),
        numeric=(False, True, True, *[True] * years),
        caption="Cash, not present value: what each plan pays per year (capital when it is paid, resale back in the "
                "last month); simple payback of each plan that buys hardware: the month its cumulative cash falls to "
                + (f"{against}'s, the renting plan available today (resale left out)" if versus else
                   "renting's: none here, renting is not allowed"),
    )
    step("chart: cost per scenario")
    ids = [s.id for s in base]
    chart = Chart("costs", "Cost per scenario",
                  **_svgs(charts.cost_scenarios, [s.label for s in base], [s.total.value or 0 for s in base],
                                        ids.index(c.cheapest) if c.cheapest in ids else None,
                                        f"USD over {months} months (PV)"))
    figs = [
        _fig("Cloud on-demand list price per GPU-hour (the card the others derive from)", c.cloud_usd_per_gpu_hour),
        _fig("Cloud flexible price per GPU-hour: every hour not reserved (bursts, waste in dollars)",
             c.cloud_flexible_usd_per_gpu_hour),
        _fig("Cloud reserved price per GPU-hour, billed 24/7: used only where cheaper than flexible",
             c.cloud_reserved_usd_per_gpu_hour),
        _fig("Owned cost per GPU-hour (marginal)", c.owned_usd_per_gpu_hour),
        _fig(f"Power per GPU ({c.power_source})", c.power_w_per_gpu),
        KeyFigure("Fleet", f"{c.fleet_gpus:,} GPUs, {c.owned_gpus:,} owned",
                  "analysis.fleet_gpus (0: GPUs seen) and on_prem.owned_gpus (-1: the fleet when on-prem)"),
    ]
    best = _scenario(r, c.cheapest)
    ci = r.confidence.cost_difference_usd
    lead = (f"The measured demand, scaled to the {c.fleet_gpus:,}-GPU fleet and priced over {months} months "
            f"(present value at {rate}): the cheapest allowed way to run it is "
            f"{best.label if best else c.cheapest} ({fmt.money(best.total.value if best else None)}). All-cloud "
            f"minus the cheapest owning scenario: {fmt.money(ci.point)} "
            + (f"({r.confidence.level:.0%} interval {fmt.money(ci.low)} to {fmt.money(ci.high)} over day-resamples)."
               if r.confidence.resamples else f"(no day-resamples: {no_interval_reason(r.confidence)}; no interval)."))
    notes = []
    if not r.decision.agrees_with_costs:
        notes.append("The decision tree (utilization thresholds) and the cheapest scenario of the cost model "
                     "disagree: the recommendation follows the cost model; check the prices in Method and "
                     "assumptions.")
    return Section("costs", f"Cost per scenario over {months} months", lead, tuple(figs), (chart,),
                   (table, plans, comp, cash), tuple(notes))


# -- 6. sensitivity ----------------------------------------------------------------------------------------

def _sensitivity(r: AnalysisResult, step: Callable[[str], None]) -> Section:
    s = r.sensitivity
    t, tc = s.tornado, TornadoColumns
    charts_: list[Chart] = []
    # The recommended plan's margin over the runner-up moves the right way with every input (all-cloud − the
    # cheapest owning plan did not: a dearer spot price looked better for renting when that plan rented most).
    name, low, high, base = tc.PARAMETER, tc.LOW_MARGIN_USD, tc.HIGH_MARGIN_USD, tc.BASE_MARGIN_USD
    t.require(name, low, high, base, tc.PLAN, tc.LOW_PLAN_USD, tc.HIGH_PLAN_USD, tc.BASE_PLAN_USD)
    if t.rows:
        plan = _scenario(r, str(t.rows[0].get(tc.PLAN, "")))
        plan_name = (plan.label if plan else str(t.rows[0].get(tc.PLAN, ""))).lower()
        sides = f"with one input at −{s.fraction:.0%} (green) or +{s.fraction:.0%} (purple); the solid line is the " \
                "configured inputs"
        margins = [x.get(k) for x in t.rows for k in (low, high, base)]
        if all(v is None for v in margins):  # no allowed plan differs from it anywhere: its own cost moves
            low, high, base = tc.LOW_PLAN_USD, tc.HIGH_PLAN_USD, tc.BASE_PLAN_USD
            axis = f"{plan_name}: cost over the horizon, USD"
            caption = (f"What {plan_name} (the recommended plan) costs over the horizon, {sides}. No other allowed "
                       "plan differs from it, so there is no runner-up to compare with.")
        else:
            axis = f"{plan_name}: margin over the next cheapest plan, USD"
            caption = (f"How much cheaper {plan_name} (the recommended plan) is than the next cheapest different "
                       f"plan over the horizon, {sides}. Below $0 another plan becomes the cheapest"
                       + (" (where no other plan differs from it, $0)" if None in margins else "") + ".")
            if r.decision.tie:  # kept on a tie: a plan cheaper by up to the tolerance does not replace it
                caption += (f" It is kept on a tie: another plan cheaper by up to {fmt.money(r.decision.tie_usd)} "
                            "(the cost model's uncertainty) does not replace it, so the solid line may sit below $0.")
        step("chart: sensitivity")
        charts_.append(Chart(
            "sensitivity", "Sensitivity",
            **_svgs(charts.tornado, [str(x[name]) for x in t.rows], [float(x.get(low) or 0) for x in t.rows],
                    [float(x.get(high) or 0) for x in t.rows], float(t.rows[0].get(base) or 0), axis,
                    f"What moves the answer: each input ±{s.fraction:.0%}", s.fraction),
            caption=caption))
    lead = (f"Each input moved by ±{s.fraction:.0%} on its own, and demand growth per year: does the "
            f"recommendation survive?")
    tornado_table = _table(t, caption=f"Each input ±{s.fraction:.0%}: value, cheapest scenario and break-even "
                           "billed-hour utilization (— = never: renting is cheaper even with every GPU billed)",
                           columns=(name, tc.LOW_VALUE, tc.BASE_VALUE, tc.HIGH_VALUE, tc.CHEAPEST_LOW,
                                    tc.CHEAPEST_HIGH, tc.BREAK_EVEN_LOW, tc.BREAK_EVEN_HIGH))
    g = GrowthColumns
    growth_table = _table(s.growth, caption="Demand growth per year: cost of each scenario over the horizon",
                          columns=(g.GROWTH_PER_YEAR, *(g.scenario_usd(sid) for sid in _GROWTH_SCENARIOS),
                                   g.CHEAPEST, g.HYBRID_GPUS))
    return Section("sensitivity", "Sensitivity", lead, (), tuple(charts_), (tornado_table, growth_table))


_GROWTH_SCENARIOS = ("stay-as-is", "all-cloud", "all-on-prem", "hybrid")  # the growth table's columns shown


# -- 7. method and assumptions ---------------------------------------------------------------------------

def _method(r: AnalysisResult) -> Section:
    q, t, c = r.data_quality, r.trial, r.confidence
    figs = [
        _fig("Coverage", q.coverage),
        _fig("Gap hours", q.gap_hours),
        _fig("Trial length", q.trial_days),
        _fig("Unmeasured share", q.unmeasured_share),
        _fig("Duplicates removed", q.overlap_gpu_hours),
    ]
    assumptions = ReportTable(
        columns=("input", "value", "unit", "source"),
        rows=tuple((a.key, _assumption_value(a.value), a.unit, a.source) for a in r.assumptions),
        numeric=(False, True, False, False),
        caption="Every price and threshold used, with its source",
    )
    defs = []
    for label, f in _definitions(r):
        defs.append((label, _in_words(f.definition or ""), _in_words(f.formula), _in_words(f.source)))
    definitions = ReportTable(columns=("figure", "definition", "formula", "rows it comes from"), rows=tuple(defs),
                        numeric=(False, False, False, False), caption="Definitions")
    coverage = ReportTable(
        columns=("item", "value"),
        rows=(
            ("trial window (UTC)", f"{_date(t.start)} → {_date(t.end)}"),
            ("days with data", f"{t.observed_days:,} of {t.days:.1f}"),
            ("GPUs / GPU equivalents / hosts", f"{t.gpus:,} / {t.gpu_equivalents:,.2f} / {t.hosts:,}"),
            ("samples", f"{t.samples:,}"),
            ("measurement sources", ", ".join(t.sources) or fmt.MISSING["cell"]),
            ("GPUs that stopped reporting", ", ".join(q.stopped_reporting) or "none"),
            ("confidence method", f"{c.method}: {c.resamples:,} resamples, seed {c.seed}"),
            ("dataset schema version", str(r.dataset_schema_version)),
            ("result version", str(r.result_version)),
        ),
        numeric=(False, False),
        caption="Data coverage",
    )
    models = ReportTable(
        columns=("model", "GPUs", "reported as", "$ per GPU-hour", "price source", "hardware $ per GPU",
                 "hardware source"),
        rows=tuple((m.model + ("" if m.known else " (not in the catalogue)"), f"{m.gpus:,}", ", ".join(m.gpu_names),
                    f"{m.usd_per_gpu_hour:,.2f}", m.price_source, f"{m.hardware_usd_per_gpu:,.0f}", m.hardware_source)
                   for m in r.models),
        numeric=(False, True, False, True, False, True, False),
        caption="GPU models found (prices from the catalogue, your config, or the fleet defaults, assumed)",
    )
    notes = tuple(q.warnings) + tuple(w for w in r.warnings if w not in q.warnings)
    lead = ("How every figure above was computed, from which rows, with which prices. Utilization is measured "
            "from SM activity (NVML GPM or DCGM), never inferred from runtime hours.")
    gc = GpuCoverageColumns
    gpu_table = (_table(q.gpus, sort_by=gc.GAP_HOURS, limit=TOP_N, caption="Per-GPU coverage, largest gaps first",
                        columns=(gc.HOST, gc.GPU, gc.COVERAGE, gc.GAP_HOURS, gc.LAST_SAMPLE, gc.STOPPED_REPORTING))
                 if q.gpus.rows else None)
    tables = (assumptions, definitions, coverage, models) + ((gpu_table,) if gpu_table else ())
    return Section("method", "Method and assumptions", lead, tuple(figs), (), tables, notes)


def _assumption_value(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.6g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _definitions(r: AnalysisResult) -> Iterable[tuple[str, Figure]]:
    u = r.utilization
    return (
        ("W observed GPU-hours", u.observed_gpu_hours),
        ("R runtime GPU-hours", u.runtime_gpu_hours),
        ("B busy GPU-hours", u.busy_gpu_hours),
        ("S real GPU-hours", u.real_gpu_hours),
        *((h.name, h.figure) for h in hl.headline_figures(r) if h.key != hl.BREAK_EVEN),
        ("Efficiency while held", u.efficiency_while_held),
        ("Energy", u.energy_kwh),
        ("Average power per GPU", u.average_power_w),
        (hl.NAMES[hl.BREAK_EVEN], r.break_even.billed_utilization),
        ("Cloud steady $/GPU-h", r.costs.cloud_effective_usd_per_gpu_hour),
        ("Cloud flexible $/GPU-h", r.costs.cloud_flexible_usd_per_gpu_hour),
        ("Cloud reserved $/GPU-h", r.costs.cloud_reserved_usd_per_gpu_hour),
        ("Owned $/GPU-h", r.costs.owned_usd_per_gpu_hour),
    )
