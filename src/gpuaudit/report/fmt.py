"""Number formatting for people: one place, so the HTML, Markdown and terminal say the same thing."""

from __future__ import annotations

import math


def _bad(v: float | None) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def pct(fraction: float | None, digits: int = 1) -> str:
    """0.234 -> '23.4 %'."""
    if _bad(fraction):
        return "n/a"
    return f"{fraction * 100:.{digits}f} %"


def pp(fraction: float | None) -> str:
    """A difference of two fractions, in percentage points."""
    if _bad(fraction):
        return "n/a"
    return f"{fraction * 100:.1f} pp"


def money(usd: float | None, exact: bool = False) -> str:
    """$1,234,567 exactly, or $1.23M / $456k / $789 for reading."""
    if _bad(usd):
        return "n/a"
    sign = "−" if usd < 0 else ""
    a = abs(usd)
    if exact or a < 1e3:
        return f"{sign}${a:,.0f}" if a >= 100 or a == 0 else f"{sign}${a:,.2f}"
    if a >= 1e6:
        return f"{sign}${a / 1e6:,.2f}M"
    return f"{sign}${a / 1e3:,.0f}k"


def num(v: float | None, digits: int = 0) -> str:
    if _bad(v):
        return "n/a"
    return f"{v:,.{digits}f}"


def hours(v: float | None) -> str:
    """GPU-hours, thousands separated."""
    if _bad(v):
        return "n/a"
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
        return "n/a" if _bad(value) else f"${value:,.2f}/{per}"
    if u in {"count", "n", ""} and not _bad(value):
        return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.3g}"
    if u in {"gpu-hours", "gpu-h", "gpu_hours", "gpu hours"}:
        return hours(value)
    if u in {"gpus", "gpu"}:
        return num(value, 1 if value is not None and value % 1 else 0)
    if _bad(value):
        return "n/a"
    text = f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{text} {unit}".strip()
