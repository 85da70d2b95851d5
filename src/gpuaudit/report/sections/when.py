"""Section 3, when: the hour-of-week heatmap and the weekly trend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuaudit.analysis.columns import HourOfWeekColumns, PerWeekColumns
from gpuaudit.analysis.result import AnalysisResult
from gpuaudit.report.model import Chart, ChartSpec, Section, Series
from gpuaudit.report.sections.formatting import (
    breakdown_table,
)
from gpuaudit.util import fmt

_DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def build(r: AnalysisResult, step: Callable[[str], None]) -> Section:
    b = r.breakdowns
    charts_: list[Chart] = []
    how = b.hour_of_week
    val, day, hour = HourOfWeekColumns.REAL_UTILIZATION, HourOfWeekColumns.DAY_OF_WEEK, HourOfWeekColumns.HOUR_OF_DAY
    how.require(val, day, hour)
    if how.rows:
        grid: list[list[float | None]] = [[None] * 24 for _ in range(7)]
        for row in how.rows:
            grid[int(row[day])][int(row[hour])] = row.get(val)
        charts_.append(
            Chart(
                "hour-of-week",
                "Real utilization by hour of week",
                ChartSpec(
                    "heatmap",
                    "Real utilization by hour of week (UTC)",
                    series=tuple(Series(d, tuple(cells)) for d, cells in zip(_DAY_NAMES, grid, strict=True)),
                ),
                caption="Each cell: SM-active share of observed GPU time in that hour of the week, "
                "averaged over the trial. The colour scale spans the lowest to the highest "
                "cell (see the bar), not 0-100 %.",
            )
        )
    wk, w = b.per_week, PerWeekColumns
    week, rt, rl = w.WEEK, w.RUNTIME_UTILIZATION, w.REAL_UTILIZATION
    wk.require(week, rt, rl)
    if wk.rows:
        charts_.append(
            Chart(
                "weekly-trend",
                "Weekly trend",
                ChartSpec(
                    "trend",
                    labels=tuple(str(x[week]) for x in wk.rows),
                    series=(
                        Series("runtime", tuple(x.get(rt) or 0 for x in wk.rows)),
                        Series("real", tuple(x.get(rl) or 0 for x in wk.rows)),
                    ),
                ),
            )
        )
    lead = "When the GPUs work: idle nights and weekends are capacity the cloud would not bill."
    cells = [row for row in how.rows if row.get(val) is not None]
    if cells:
        hi = max(cells, key=lambda row: row[val])
        lo = min(cells, key=lambda row: row[val])

        def when(row: dict[str, Any]) -> str:
            return f"{_DAY_NAMES[int(row[day])]} {int(row[hour]):02d}:00 UTC"

        lead = (
            f"Busiest hour of the week: {when(hi)} at {fmt.pct(hi[val])} real utilization; quietest: "
            f"{when(lo)} at {fmt.pct(lo[val])}. Hours when owned GPUs sit idle are hours the cloud would "
            f"not bill."
        )
    week_table = breakdown_table(wk, columns=(week, w.GPUS, rt, rl, w.EFFICIENCY_WHILE_HELD, w.IDLE_HELD_GPU_HOURS))
    return Section("when", "When", lead, (), tuple(charts_), (week_table,))
