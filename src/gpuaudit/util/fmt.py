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


def _good(v: float | None) -> float | None:
    """`v`, or None when it is missing or NaN (shown as NA)."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def pct(fraction: float | None, digits: int = 1) -> str:
    """0.234 -> '23.4 %'."""
    f = _good(fraction)
    if f is None:
        return NA
    return f"{f * 100:.{digits}f} %"


def share(fraction: float) -> str:
    """A stated share, never rounded to a different claim: 0.4 -> '40 %', 0.001 -> '0.1 %', 0.999 -> '99.9 %'
    (a whole-percent rounding would print 0 % beside a plan it rules out, or 100 % where renting is allowed)."""
    text = f"{fraction * 100:.3g}"
    if "e" in text:  # too small to say in digits
        return "under 0.001 %"
    return f"{text} %"


def pp(fraction: float | None) -> str:
    """A difference of two fractions, in percentage points."""
    f = _good(fraction)
    if f is None:
        return NA
    return f"{f * 100:.1f} pp"


def money(usd: float | None, exact: bool = False) -> str:
    """$1,234,567 exactly, or $1.23M / $456k / $789 for reading."""
    v = _good(usd)
    if v is None:
        return NA
    sign = "−" if v < 0 else ""
    a = abs(v)
    if exact or a < 1e3:
        return f"{sign}${a:,.0f}" if a >= 100 or a == 0 else f"{sign}${a:,.2f}"
    if a >= 1e6:
        return f"{sign}${a / 1e6:,.2f}M"
    return f"{sign}${a / 1e3:,.0f}k"


def num(v: float | None, digits: int = 0) -> str:
    x = _good(v)
    if x is None:
        return NA
    return f"{x:,.{digits}f}"


def hours(v: float | None) -> str:
    """GPU-hours, thousands separated."""
    x = _good(v)
    if x is None:
        return NA
    return f"{x:,.0f} GPU-h" if abs(x) >= 10 else f"{x:,.1f} GPU-h"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """n with its noun, singular only for exactly one: "1 job", "2 jobs", "1,024 GPUs"."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def span(days: float) -> str:
    """A trial's length: days, or hours when under one day (a 1-hour trial is not "0.0 days")."""
    return f"{days:.1f} days" if days >= 1 else f"{days * 24:.1f} hours"


def unit_value(value: float | None, unit: str) -> str:
    """Format a value by its unit name as the analyzer spells it."""
    u = (unit or "").lower()
    if u in {"fraction", "0-1", "ratio", "share"}:
        return pct(value)
    if u in {"usd", "$", "dollars"}:
        return money(value)
    x = _good(value)
    if u.startswith(("usd/", "$/")):
        per = unit.split("/", 1)[1]
        per = {"gpu-hour": "GPU-h", "gpu-h": "GPU-h", "hour": "h"}.get(per.lower(), per)
        return NA if x is None else f"${x:,.2f}/{per}"
    if u in {"count", "n", ""} and x is not None:
        return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.3g}"
    if u in {"gpu-hours", "gpu-h", "gpu_hours", "gpu hours"}:
        return hours(value)
    if u in {"gpus", "gpu"}:
        return num(value, 1 if value is not None and value % 1 else 0)
    if x is None:
        return NA
    text = f"{x:,.4g}" if abs(x) < 1000 else f"{x:,.0f}"
    return f"{text} {unit}".strip()


def summary_pct(fraction: float | None) -> str:
    """`analyze`'s summary: 0.234 -> '23.4 %'."""
    return MISSING["summary"] if fraction is None else f"{fraction * 100:.1f} %"


def summary_usd(usd: float | None) -> str:
    """`analyze`'s summary: whole dollars, '−$1,234' below zero."""
    if usd is None:
        return MISSING["summary"]
    return f"−${-usd:,.0f}" if usd < 0 else f"${usd:,.0f}"
