"""Section 2, where the waste is: idle-held hours by user, job, pod and node."""

from __future__ import annotations

from collections.abc import Callable

from gpuaudit.analysis import headline as hl
from gpuaudit.analysis.columns import HolderColumns, PerJobColumns, PerNodeColumns, PerPodColumns, PerUserColumns
from gpuaudit.analysis.result import AnalysisResult
from gpuaudit.report.model import Chart, ChartSpec, ReportTable, Section, Series
from gpuaudit.report.sections.formatting import (
    TOP_N,
    breakdown_table,
    figure_tile,
    headline_tiles,
)
from gpuaudit.util import fmt


def build(r: AnalysisResult, step: Callable[[str], None]) -> Section:
    u, b = r.utilization, r.breakdowns
    figs = [
        *headline_tiles(r, hl.IDLE_HELD, emphasis=(hl.IDLE_HELD,)),
        figure_tile("GPUs never used", u.never_used_count),
    ]
    charts_: list[Chart] = []
    tables: list[ReportTable] = []
    h = HolderColumns  # per_node carries the same names (WrsColumns, PerNodeColumns.GPUS)
    idle = h.IDLE_HELD_GPU_HOURS
    for key, table, who, label_col in (
        ("user", b.per_user, "user", PerUserColumns.USER),
        ("job", b.per_job, "job", PerJobColumns.JOB),
        ("pod", b.per_pod, "pod", PerPodColumns.POD),
        ("node", b.per_node, "node", PerNodeColumns.HOST),
    ):
        if not table.rows:
            if key != "pod":
                tables.append(breakdown_table(table, empty=f"no {who} information in the data"))
            continue
        table.require(label_col, idle)
        if key == "user":
            top = sorted(table.rows, key=lambda row: -(row.get(idle) or 0))[:TOP_N]
            charts_.append(
                Chart(
                    name=f"idle-by-{key}",
                    title=f"Idle-held GPU-hours by {who}",
                    spec=ChartSpec(
                        "ranked-bars",
                        f"Idle-held GPU-hours by {who} (top {len(top)})",
                        labels=tuple(str(row.get(label_col)) for row in top),
                        series=(Series("value", tuple(row.get(idle) or 0 for row in top)),),
                        unit="GPU-hours",
                    ),
                )
            )
        tables.append(
            breakdown_table(
                table,
                sort_by=idle,
                limit=TOP_N,
                columns=(label_col, h.GPUS, h.RUNTIME_GPU_HOURS, h.REAL_GPU_HOURS, h.EFFICIENCY_WHILE_HELD, idle),
            )
        )
    never_table = ReportTable(
        columns=("GPU",),
        rows=tuple((g,) for g in u.never_used_gpus),
        numeric=(False,),
        caption="GPUs no process used during the trial",
        empty="every GPU was used at least once",
    )
    tables.append(never_table)
    never = int(u.never_used_count.value or 0)
    lead = (
        f"{fmt.hours(u.idle_held_gpu_hours.value)} were held by a process while the SMs did nothing; "
        f"{never:,} GPU{'' if never == 1 else 's'} {'was' if never == 1 else 'were'} never used at all."
    )
    return Section("waste", "Where the waste is", lead, tuple(figs), tuple(charts_), tuple(tables))
