"""The report's number formatting is the one vocabulary in gpuaudit.util.fmt; kept importable from here."""

from __future__ import annotations

from gpuaudit.util.fmt import MISSING, NA, hours, money, num, pct, pp, span, unit_value

__all__ = ["MISSING", "NA", "hours", "money", "num", "pct", "pp", "span", "unit_value"]
