"""The result's building blocks: a traceable number (`Figure`) and a small breakdown table (`Table`).

Every number the analyzer reports is a Figure carrying its value, unit, formula and source, so any number in a
report can be traced back to its rows; a Table names its columns with units, and asking one for a column it
does not have raises `ResultContractError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class Figure:
    """One traceable number.

    value: the number (None when it cannot be computed, e.g. no power was measured).
    unit: "fraction" (0-1), "GPU-h", "GPUs", "USD", "USD/GPU-h", "W", "days", "hours", "count".
    formula: how it is computed from other named figures, e.g. "S / W".
    source: which rows/rollup it comes from, e.g. "gpu_samples: Σ interval_s × gpu_fraction × sm_active".
    definition: one sentence for a reader who has never seen the product.
    upper_bound: True when the value is only an upper bound (SM activity fell back to duty cycle).
    lower_bound: True when the value is only a lower bound (e.g. the phantom gap where SM activity fell back).
    """

    value: float | None
    unit: str
    formula: str
    source: str
    definition: str = ""
    upper_bound: bool = False
    lower_bound: bool = False


class ResultContractError(LookupError):
    """The report asked a table for a column the analyzer does not write: a renamed or dropped column fails
    loudly here instead of silently dropping a chart."""


@dataclass(frozen=True)
class TableColumn:
    """One column of a result `Table`: its name (a key of every row), unit and meaning."""

    name: str
    unit: str = ""
    description: str = ""


@dataclass(frozen=True)
class Table:
    """A small breakdown table. `rows` are records keyed by column name (plain Python values)."""

    name: str
    description: str
    columns: tuple[TableColumn, ...]
    rows: tuple[dict[str, Any], ...]
    source: str = ""
    JSON_FIELDS: ClassVar[tuple[str, ...]] = ("name", "description", "source", "columns", "rows")  # to_dict's order

    def to_polars(self) -> Any:
        """The table as a polars DataFrame (imported lazily: the result module stays cheap)."""
        import polars as pl

        if not self.rows:
            return pl.DataFrame({c.name: [] for c in self.columns})
        return pl.DataFrame(list(self.rows), infer_schema_length=None)

    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def require(self, *names: str) -> None:
        """Raise ResultContractError unless every one of `names` is a column of this table."""
        have = self.column_names()
        missing = [n for n in names if n not in have]
        if missing:
            raise ResultContractError(
                f"result table {self.name!r} has no column {', '.join(map(repr, missing))} "
                f"(its columns: {', '.join(have) or 'none'})"
            )

    def values(self, name: str) -> list[Any]:
        """One column's values, row by row (None where a row has no value)."""
        self.require(name)
        return [row.get(name) for row in self.rows]
