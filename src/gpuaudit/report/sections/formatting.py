"""Shared formatting of the report sections: tiles, breakdown tables, cells and words.

Every section module takes its figures and tables through these, so a value is spelled one way throughout."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from gpuaudit.analysis import headline as hl
from gpuaudit.analysis.economics import CostScenario
from gpuaudit.analysis.figure import Figure, Table, TableColumn
from gpuaudit.analysis.result import AnalysisResult
from gpuaudit.report.model import KeyFigure, ReportTable
from gpuaudit.util import fmt

TOP_N = 10


def iso_time(t: dt.datetime) -> str:
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def date_text(t: dt.datetime | dt.date) -> str:
    if isinstance(t, dt.datetime):
        t = t.astimezone(dt.UTC) if t.tzinfo else t
        return t.strftime("%Y-%m-%d %H:%M")
    return t.isoformat()


def figure_tile(label: str, figure: Figure, *, emphasis: bool = False, text: str | None = None) -> KeyFigure:
    value_text = text if text is not None else fmt.unit_value(figure.value, figure.unit)
    if figure.upper_bound and figure.value is not None:
        value_text = "≤ " + value_text
    elif figure.lower_bound and figure.value is not None:
        value_text = "≥ " + value_text
    source = figure.formula if not figure.source else f"{figure.formula} — {figure.source}"
    return KeyFigure(label=label, text=value_text, source=in_words(source), emphasis=emphasis)


def _headline(h: hl.HeadlineFigure, *, emphasis: bool = False) -> KeyFigure:
    """A headline figure as a tile: its one name and its one text (analysis.headline)."""
    f = h.figure
    source = f.formula if not f.source else f"{f.formula} — {f.source}"
    return KeyFigure(label=h.name, text=h.text, source=in_words(source), emphasis=emphasis)


def headline_tiles(r: AnalysisResult, *keys: str, emphasis: tuple[str, ...] = ()) -> list[KeyFigure]:
    figs = hl.by_key(r)
    return [_headline(figs[k], emphasis=k in emphasis) for k in keys if k in figs]


def cell(value: Any, unit: str) -> str:
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
        return iso_time(value)
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def _is_numeric(table: Table, col: TableColumn) -> bool:
    if col.unit:
        return True
    return any(
        isinstance(r.get(col.name), int | float) and not isinstance(r.get(col.name), bool) for r in table.rows[:5]
    )


def _label(col: TableColumn) -> str:
    name = col.name.removesuffix("_usd").replace("_", " ")  # cells already say "$"
    return name


def breakdown_table(
    table: Table,
    *,
    sort_by: str | None = None,
    limit: int | None = None,
    caption: str | None = None,
    columns: Sequence[str] | None = None,
    empty: str = "nothing to show",
) -> ReportTable:
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
    cap = in_words(caption if caption is not None else table.description).rstrip(". ")
    if limit is not None and total > limit:
        cap = f"{cap} (top {limit} of {total:,})"
    return ReportTable(
        columns=tuple(_label(c) + (f" ({_unit_label(c.unit)})" if _unit_label(c.unit) else "") for c in cols),
        rows=tuple(tuple(cell(r.get(c.name), c.unit) for c in cols) for r in rows),
        numeric=tuple(_is_numeric(table, c) for c in cols),
        caption=cap,
        empty=empty,
    )


def _unit_label(unit: str) -> str:
    # Every formatted cell carries its unit ("%", "$", "GPU-h", "W"), so headers stay short.
    return ""


def value_or_zero(f: Figure) -> float:
    return float(f.value) if f.value is not None else 0.0


def scenario(r: AnalysisResult, sid: str) -> CostScenario | None:
    return next((s for s in r.costs.scenarios if s.id == sid), None)


# What the break-even's own_reference means, in words (the result keeps the machine key).
REFERENCE_WORDS = {
    "buy-the-fleet": "buying the whole fleet",
    "keep-the-owned-fleet": "keeping the GPUs owned today",
    "keep-owned-and-buy-the-rest": "keeping the GPUs owned today and buying the rest of the fleet",
}


def in_words(text: str) -> str:
    """`text` (a formula or source the analyzer wrote) with each reference-plan key in words: a CFO reads
    "keeping the GPUs owned today", not "keep-the-owned-fleet". Longest key first, so none eats a longer one."""
    for key in sorted(REFERENCE_WORDS, key=len, reverse=True):
        text = text.replace(key, REFERENCE_WORDS[key])
    return text


def recommended_label(r: AnalysisResult) -> str:
    sid = r.decision.recommended_scenario or r.costs.cheapest
    s = scenario(r, sid)
    return (s.label if s else sid).lower()


def owned_by_recommendation(r: AnalysisResult) -> int:
    sid = r.decision.recommended_scenario or r.costs.cheapest
    s = scenario(r, sid)
    return int(s.owned_gpus) if s else 0
