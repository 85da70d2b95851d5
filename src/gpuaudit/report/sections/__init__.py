"""Build the report model from the analyzer's result: ordered sections, in the order the issue asks.

Nothing here measures or estimates anything: every number is a field of `AnalysisResult` (or a direct
product of two of its fields, with the formula printed next to it). Breakdown tables are rendered from
their own column lists, so a column the analyzer adds shows up without a change here. Columns are read
by the names in `gpuaudit.analysis.result` (`*Columns`), never guessed: a column the analyzer stops
writing raises `ResultContractError` instead of dropping a chart.

One module per section, each with a `build(result, step)`: believed.py (1, believed vs real), waste.py (2),
when.py (3), demand.py (4, demand and sizing), costs.py (5), sensitivity.py (6), method.py (7, method and
assumptions); verdict.py builds the verdict above them, and formatting.py holds what they share (tiles,
breakdown tables, cells, the words for reference plans). `SECTIONS` is the registry `build_report` walks,
in report order.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuaudit.analysis.result import AnalysisResult
from gpuaudit.report.model import Report, Section
from gpuaudit.report.sections import believed, costs, demand, method, sensitivity, verdict, waste, when
from gpuaudit.report.sections.formatting import date_text, iso_time
from gpuaudit.util import fmt

SectionBuilder = Callable[[AnalysisResult, Callable[[str], None]], Section]

# The report's sections, in the order they are read.
SECTIONS: tuple[SectionBuilder, ...] = (
    believed.build,
    waste.build,
    when.build,
    demand.build,
    costs.build,
    sensitivity.build,
    method.build,
)


def build_report(
    result: AnalysisResult,
    *,
    version: str,
    title: str = "GPU utilization audit",
    progress: Callable[[str], None] | None = None,
) -> Report:
    """The report model for one analysis result: data only (charts are specs, drawn when rendering). `progress`
    is handed to each section's builder."""
    step = progress or (lambda _msg: None)
    sections = tuple(build(result, step) for build in SECTIONS)
    trial = result.trial
    subtitle = (
        f"{trial.gpus:,} GPU{'' if trial.gpus == 1 else 's'} on {trial.hosts:,} host{'' if trial.hosts == 1 else 's'}"
        f" · trial {date_text(trial.start)} → {date_text(trial.end)} UTC "
        f"({fmt.span(trial.days)}) · {trial.samples:,} samples"
    )
    return Report(
        title=title,
        subtitle=subtitle,
        verdict=verdict.build(result),
        sections=sections,
        generated_at=iso_time(result.generated_at),
        version=version,
        schema_version=int(result.dataset_schema_version),
    )
