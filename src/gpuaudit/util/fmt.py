"""Number formatting for people, the one vocabulary: the report (HTML, Markdown, its terminal summary) and
`gpuaudit analyze`'s summary say the same thing the same way. How each output spells a value that is not there
is one table (MISSING); the spellings differ by output today, and the golden report fixes the report's."""

from __future__ import annotations

import math

# A value that is not there (None, NaN), by where it is shown.
MISSING = {
    "figure": "n/a",  # a figure in the report's prose and summary (pct, money, ... below)
    "cell": "—",  # an empty cell of a report table (report.md / report.html)
    "summary": "—",  # a figure in `gpuaudit analyze`'s text summary
}
NA = MISSING["figure"]


def _bad(v: float | None) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def pct(fraction: float | None, digits: int = 1) -> str:
    """0.234 -> '23.4 %'."""
    if _bad(fraction):
        return NA
    return f"{fraction * 100:.{digits}f} %"


def pp(fraction: float | None) -> str:
    """A difference of two fractions, in percentage points."""
    if _bad(fraction):
        return NA
    return f"{fraction * 100:.1f} pp"


def money(usd: float | None, exact: bool = False) -> str:
    """$1,234,567 exactly, or $1.23M / $456k / $789 for reading."""
    if _bad(usd):
        return NA
    sign = "−" if usd < 0 else ""
    a = abs(usd)
    if exact or a < 1e3:
        return f"{sign}${a:,.0f}" if a >= 100 or a == 0 else f"{sign}${a:,.2f}"
    if a >= 1e6:
        return f"{sign}${a / 1e6:,.2f}M"
    return f"{sign}${a / 1e3:,.0f}k"


def num(v: float | None, digits: int = 0) -> str:
    if _bad(v):
        return NA
    return f"{v:,.{digits}f}"


def hours(v: float | None) -> str:
    """GPU-hours, thousands separated."""
    if _bad(v):
        return NA
    return f"{v:,.0f} GPU-h" if abs(v) >= 10 else f"{v:,.1f} GPU-h"


def unit_value(value: float | None, unit: str) -> str:
    """Format a value by its unit name as the analyzer spells it."""
    u = (unit or "").lower()
    if u in {"fraction", "0-1", "ratio", "share"}:
        return pct(value)
    if u in {"usd", "$", "dollars"}:
        return money(value)
    if u.startswith(("usd/", "$/")):
        per = unit.split("/", 1)[1]
        per = {"gpu-hour": "GPU-h", "gpu-h": "GPU-h", "hour": "h"}.get(per.lower(), per)
        return NA if _bad(value) else f"${value:,.2f}/{per}"
    if u in {"count", "n", ""} and not _bad(value):
        return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.3g}"
    if u in {"gpu-hours", "gpu-h", "gpu_hours", "gpu hours"}:
        return hours(value)
    if u in {"gpus", "gpu"}:
        return num(value, 1 if value is not None and value % 1 else 0)
    if _bad(value):
        return NA
    text = f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{text} {unit}".strip()


def summary_pct(fraction: float | None) -> str:
    """`analyze`'s summary: 0.234 -> '23.4 %'."""
    return MISSING["summary"] if fraction is None else f"{fraction * 100:.1f} %"


def summary_usd(usd: float | None) -> str:
    """`analyze`'s summary: whole dollars, '−$1,234' below zero."""
    if usd is None:
        return MISSING["summary"]
    return f"−${-usd:,.0f}" if usd < 0 else f"${usd:,.0f}"
