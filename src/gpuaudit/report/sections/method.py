"""Section 7, method and assumptions: data quality, every input, the definitions, coverage and models."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gpuaudit.analysis import headline as hl
from gpuaudit.analysis.columns import GpuCoverageColumns
from gpuaudit.analysis.confidence import no_interval_reason
from gpuaudit.analysis.figure import Figure
from gpuaudit.analysis.result import AnalysisResult
from gpuaudit.report.model import ReportTable, Section
from gpuaudit.report.sections.formatting import (
    TOP_N,
    breakdown_table,
    date_text,
    figure_tile,
    in_words,
)
from gpuaudit.util import fmt


def build(r: AnalysisResult, _step: Callable[[str], None]) -> Section:
    q = r.data_quality
    figs = [
        figure_tile("Coverage", q.coverage),
        figure_tile("Gap hours", q.gap_hours),
        figure_tile("Trial length", q.trial_days, text=fmt.span(q.trial_days.value or 0.0)),
        figure_tile("Unmeasured share", q.unmeasured_share),
        figure_tile("Duplicates removed", q.overlap_gpu_hours),
    ]
    assumptions = ReportTable(
        columns=("input", "value", "unit", "source"),
        rows=tuple((a.key, _assumption_value(a.value), a.unit, a.source) for a in r.assumptions),
        numeric=(False, True, False, False),
        caption="Every price and threshold used, with its source",
    )
    defs = []
    for label, f in _definitions(r):
        defs.append((label, in_words(f.definition or ""), in_words(f.formula), in_words(f.source)))
    definitions = ReportTable(
        columns=("figure", "definition", "formula", "rows it comes from"),
        rows=tuple(defs),
        numeric=(False, False, False, False),
        caption="Definitions",
    )
    coverage = _coverage_table(r)
    models = _models_table(r)
    notes = tuple(q.warnings) + tuple(w for w in r.warnings if w not in q.warnings)
    lead = (
        "How every figure above was computed, from which rows, with which prices. Utilization is measured "
        "from SM activity (NVML GPM or DCGM), never inferred from runtime hours."
    )
    gc = GpuCoverageColumns
    gpu_table = (
        breakdown_table(
            q.gpus,
            sort_by=gc.GAP_HOURS,
            limit=TOP_N,
            caption="Per-GPU coverage, largest gaps first",
            columns=(gc.HOST, gc.GPU, gc.COVERAGE, gc.GAP_HOURS, gc.LAST_SAMPLE, gc.STOPPED_REPORTING),
        )
        if q.gpus.rows
        else None
    )
    tables = (assumptions, definitions, coverage, models) + ((gpu_table,) if gpu_table else ())
    return Section("method", "Method and assumptions", lead, tuple(figs), (), tables, notes)


def _coverage_table(r: AnalysisResult) -> ReportTable:
    """What the trial covers: its window, days, GPUs, samples, sources, versions."""
    q, t, c = r.data_quality, r.trial, r.confidence
    return ReportTable(
        columns=("item", "value"),
        rows=(
            ("trial window (UTC)", f"{date_text(t.start)} → {date_text(t.end)}"),
            ("days with data", f"{fmt.count(t.observed_days, 'day')} in a trial of {fmt.span(t.days)}"),
            ("GPUs / GPU equivalents / hosts", f"{t.gpus:,} / {t.gpu_equivalents:,.2f} / {t.hosts:,}"),
            ("samples", f"{t.samples:,}"),
            ("measurement sources", ", ".join(t.sources) or fmt.MISSING["cell"]),
            ("GPUs that stopped reporting", ", ".join(q.stopped_reporting) or "none"),
            ("confidence method", f"{c.method}: {c.resamples:,} resamples, seed {c.seed}" if c.resamples
             else f"{c.method}: none drawn, {no_interval_reason(c)}"),
            ("dataset schema version", str(r.dataset_schema_version)),
            ("result version", str(r.result_version)),
        ),
        numeric=(False, False),
        caption="Data coverage",
    )


def _models_table(r: AnalysisResult) -> ReportTable:
    """The GPU models found, as reported and as keyed, with where each price came from."""
    return ReportTable(
        columns=(
            "model",
            "GPUs",
            "reported as",
            "$ per GPU-hour",
            "price source",
            "hardware $ per GPU",
            "hardware source",
        ),
        rows=tuple(
            (
                m.model + ("" if m.known else " (not in the catalogue)"),
                f"{m.gpus:,}",
                ", ".join(m.gpu_names),
                f"{m.usd_per_gpu_hour:,.2f}",
                m.price_source,
                f"{m.hardware_usd_per_gpu:,.0f}",
                m.hardware_source,
            )
            for m in r.models
        ),
        numeric=(False, True, False, True, False, True, False),
        caption="GPU models found (prices from the catalogue, your config, or the fleet defaults, assumed)",
    )


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
        (hl.NAMES[hl.BREAK_EVEN], r.break_even.break_even_billed_utilization),
        ("Cloud steady $/GPU-h", r.costs.cloud_effective_usd_per_gpu_hour),
        ("Cloud flexible $/GPU-h", r.costs.cloud_flexible_usd_per_gpu_hour),
        ("Cloud reserved $/GPU-h", r.costs.cloud_reserved_usd_per_gpu_hour),
        ("Owned $/GPU-h", r.costs.owned_usd_per_gpu_hour),
    )
