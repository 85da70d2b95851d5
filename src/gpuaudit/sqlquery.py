"""`gpuaudit sql`: read-only SQL over the dataset views, with table / csv / json / parquet output."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import duckdb

from gpuaudit.errors import GpuauditError
from gpuaudit.store import Dataset

FORMATS = ("table", "csv", "json", "parquet")
# Anything else (COPY, ATTACH, CREATE, INSERT, SET, INSTALL/LOAD, EXPORT, PRAGMA, CALL...) could write
# files, change state or reach outside the dataset.
_READ_ONLY = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Refuse any statement that is not a plain query."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as e:
        raise GpuauditError(f"SQL syntax error: {str(e).strip().splitlines()[0]}") from e
    if not statements:
        raise GpuauditError("no SQL statement given")
    for st in statements:
        if st.type not in _READ_ONLY:
            kind = str(st.type).rsplit(".", 1)[-1]
            raise GpuauditError(f"refused: {kind} statements are not allowed; gpuaudit sql is read-only "
                                "(SELECT, WITH, FROM, DESCRIBE, SUMMARIZE, EXPLAIN)")
    if len(statements) > 1:
        raise GpuauditError("one statement at a time, please")


def run_query(ds: Dataset, sql: str) -> Any:
    """Run one read-only statement; returns a pyarrow Table."""
    check_read_only(ds.con, sql)
    ds.con.execute("SET lock_configuration = true")  # a query cannot loosen settings behind our back
    return ds.arrow(sql)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.6g}" if abs(value) < 1e15 else f"{value:.6e}"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return str(value)


def format_table(table: Any, max_width: int = 60) -> str:
    """An aligned plain-text table: numbers right-aligned, long cells cut with an ellipsis."""
    names = list(table.column_names)
    columns = [table.column(i).to_pylist() for i in range(len(names))]
    numeric = [all(isinstance(v, int | float) or v is None for v in col) for col in columns]
    cells = [[_cell(v) for v in col] for col in columns]
    cells = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in col] for col in cells]
    widths = [max([len(n), *map(len, col)]) for n, col in zip(names, cells, strict=True)]
    out = ["  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    for r in range(table.num_rows):
        row = [
            (col[r].rjust(w) if num else col[r].ljust(w))
            for col, w, num in zip(cells, widths, numeric, strict=True)
        ]
        out.append("  ".join(row).rstrip())
    out.append(f"({table.num_rows} row{'s' if table.num_rows != 1 else ''})")
    return "\n".join(out) + "\n"


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def format_json(table: Any) -> str:
    return json.dumps(table.to_pylist(), default=_json_default, indent=1) + "\n"


def format_csv(table: Any) -> str:
    import io

    import pyarrow.csv as pacsv

    buf = io.BytesIO()
    pacsv.write_csv(table, buf)
    return buf.getvalue().decode("utf-8")


def write_output(table: Any, fmt: str, out: Path | None) -> str | None:
    """Render `table` as `fmt`; writes to `out` when given (required for parquet), else returns the text."""
    if fmt not in FORMATS:
        raise GpuauditError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if fmt == "parquet":
        if out is None:
            raise GpuauditError("--format parquet needs --out FILE")
        import pyarrow.parquet as pq

        pq.write_table(table, str(out), compression="zstd")
        return None
    text = {"table": format_table, "csv": format_csv, "json": format_json}[fmt](table)
    if out is None:
        return text
    out.write_text(text, encoding="utf-8")
    return None
