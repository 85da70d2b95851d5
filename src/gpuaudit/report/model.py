"""The report as data: ordered, typed sections that every renderer (HTML, Markdown, terminal) walks.

The builder (`sections/`, one module per section) turns the analyzer's result into this model; renderers
never compute a figure. Every key figure carries `source`: the formula, rows or assumption it comes from, shown next
to it (HTML title attribute and footnote line, Markdown footnote).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class KeyFigure:
    """One number a reader will quote, formatted, with where it came from."""

    label: str
    text: str  # formatted value, e.g. "23.4 %" or "$1.21M"
    source: str  # formula / rows / assumption
    emphasis: bool = False  # the headline figure of its section


@dataclass(frozen=True)
class ReportTable:
    """A table as the reader sees it: display strings, already formatted (the analysis `Table` is the data)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...]  # right-align these columns
    caption: str = ""
    empty: str = "nothing to show"  # what to print when there are no rows


@dataclass(frozen=True)
class Chart:
    """A static SVG chart. `name` is its file stem next to the Markdown report."""

    name: str
    title: str
    svg: str  # standalone SVG document
    caption: str = ""
    # the same chart drawn for a phone's width (HTML only, drawn when the HTML is rendered); None: use `svg`
    narrow_svg: Callable[[], str] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Section:
    key: str  # anchor id, stable
    title: str
    lead: str  # the section's message in one or two sentences
    figures: tuple[KeyFigure, ...] = ()
    charts: tuple[Chart, ...] = ()
    tables: tuple[ReportTable, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    branch: str  # machine key: cloud / hybrid / on-prem / ...
    headline: str  # "Move to cloud"
    why: str  # one sentence
    rule: str  # the rule that fired, in words
    confidence: str  # e.g. "high: 0 % of 1,000 day-resamples flip the decision"
    provisional: bool
    provisional_reason: str
    reevaluate_on: str  # ISO date
    figures: tuple[KeyFigure, ...] = ()
    cost_note: str = ""  # set when the cost model's cheapest scenario differs from the rule's branch
    decides: tuple[str, ...] = ()  # what decides this: each input that flips the answer, and staff on its own line


@dataclass(frozen=True)
class LinkedFile:
    """A file written next to the report (the `report --by` breakdowns): what it holds, its totals, and the
    relative paths of its formats ((label, path) pairs: ("CSV", "chargeback-user.csv"), ...)."""

    title: str
    totals: str
    links: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Report:
    title: str
    subtitle: str  # fleet and trial window
    verdict: Verdict
    sections: tuple[Section, ...]
    generated_at: str  # ISO UTC; the only volatile field (golden tests normalize it)
    version: str
    schema_version: int
    json_name: str = "report.json"
    files: tuple[LinkedFile, ...] = ()  # the breakdown files written beside it (report --by)
    extra: dict[str, str] = field(default_factory=dict)

    def charts(self) -> list[Chart]:
        return [c for s in self.sections for c in s.charts]
