"""The report as data: ordered, typed sections that every renderer (HTML, Markdown, terminal) walks.

The builder (`sections/`, one module per section) turns the analyzer's result into this model; renderers
never compute a figure. Every key figure carries `source`: the formula, rows or assumption it comes from, shown next
to it (HTML title attribute and footnote line, Markdown footnote).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


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


ChartKind = Literal[
    "utilization",  # believed vs real: one horizontal bar per utilization basis, the phantom gap shaded
    "ledger",  # the four ledger states stacked per week
    "ranked-bars",  # categories ranked by one value, largest on top
    "heatmap",  # a 7 x 24 grid of fractions (Monday first, hours in UTC)
    "trend",  # runtime-hour and real utilization per week
    "duration",  # a duration curve: share of time demand was at least x
    "break-even",  # cost of each option against utilization
    "cost-curve",  # one cost curve over a count, its minimum marked
    "scenarios",  # one total per scenario, the recommended one highlighted
    "tornado",  # each input's low and high outcome around a base
]


@dataclass(frozen=True)
class Series:
    """One run of values of a chart: a bar row, a line, a stacked layer, a heatmap row. `key` is the machine
    name the drawing looks it up by; `label` is what the legend says."""

    key: str
    values: tuple[float | None, ...]
    label: str = ""


@dataclass(frozen=True)
class Threshold:
    """A value marked on a chart's axis: today's utilization, the break-even, N*, the fleet size, a base."""

    key: str
    value: float
    label: str = ""


@dataclass(frozen=True)
class ChartSpec:
    """What a chart shows, as data: the sections build it, the renderers draw it (report/charts.py), once per
    width they need. Values are plain numbers; labels are untrusted text, escaped when drawn."""

    kind: ChartKind
    title: str = ""  # drawn over the plot by the kinds that take one (ranked bars, heatmap, tornado)
    series: tuple[Series, ...] = ()
    labels: tuple[str, ...] = ()  # categories (bars) or x labels (weeks)
    x: tuple[float, ...] = ()  # numeric x of every series (curves)
    unit: str = ""  # the value axis
    x_label: str = ""  # the x axis where it is not the value axis
    thresholds: tuple[Threshold, ...] = ()
    highlight: int | None = None  # the category drawn in the accent colour

    def values(self, key: str) -> tuple[float | None, ...] | None:
        """The values of the series `key`, None if the chart has no such series."""
        return next((s.values for s in self.series if s.key == key), None)

    def threshold(self, key: str) -> float | None:
        return next((t.value for t in self.thresholds if t.key == key), None)


@dataclass(frozen=True)
class Chart:
    """A static chart. `name` is its file stem next to the Markdown report; `spec` is drawn when rendering."""

    name: str
    title: str  # the chart's name for readers (alt text, file title)
    spec: ChartSpec
    caption: str = ""


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
