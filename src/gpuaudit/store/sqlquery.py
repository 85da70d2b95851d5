"""`gpuaudit sql`: read-only SQL over the dataset views, with table / csv / json / parquet output."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import duckdb

from gpuaudit.errors import GpuauditError
from gpuaudit.store import Dataset
from gpuaudit.util import atomic, jsonio, paths
from gpuaudit.util.jsonio import plain
from gpuaudit.util.textsafe import printable

FORMATS = ("table", "csv", "json", "parquet")
# Read-only holds by three independent layers (run_query): the statement type (anything else, e.g. COPY,
# ATTACH, CREATE, INSERT, SET, INSTALL/LOAD, EXPORT, PRAGMA, CALL, could write files, change state or reach
# outside the dataset; an EXPLAIN is judged by the statement it explains, since EXPLAIN ANALYZE runs it);
# the plan (a SELECT can still write: DuckDB 2 accepts COPY, INSERT, UPDATE and DELETE inside a WITH, and
# table functions such as checkpoint() or json_execute_serialized_sql() act when run); and the connection
# itself (Dataset.lock_down: only the dataset's files can be opened, settings are locked).
_READ_ONLY = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
_READ_ONLY_HELP = "gpuaudit sql is read-only (SELECT, WITH, FROM, DESCRIBE, SUMMARIZE, SHOW, EXPLAIN)"
# Plan operators that write or change state (DuckDB's PhysicalOperatorType names).
_WRITING_OPERATORS = frozenset({
    "COPY_TO_FILE", "BATCH_COPY_TO_FILE", "FIXED_BATCH_COPY_TO_FILE", "COPY_DATABASE", "INSERT", "BATCH_INSERT",
    "DELETE", "UPDATE", "MERGE_INTO", "CREATE_TABLE", "CREATE_TABLE_AS", "BATCH_CREATE_TABLE_AS", "CREATE_INDEX",
    "ALTER", "CREATE_SEQUENCE", "CREATE_VIEW", "CREATE_SCHEMA", "CREATE_MACRO", "CREATE_TYPE", "CREATE_SECRET",
    "DROP", "PRAGMA", "TRANSACTION", "ATTACH", "DETACH", "EXECUTE", "PREPARE", "VACUUM", "EXPORT", "SET",
    "SET_VARIABLE", "RESET", "LOAD", "EXTENSION", "UPDATE_EXTENSIONS",
})
# The table functions a query may call: read the views, describe things, generate values. Any other table
# function is refused, including ones a later DuckDB adds, until it is listed here.
_TABLE_FUNCTIONS = frozenset({
    "read_parquet", "parquet_scan", "seq_scan", "range", "generate_series", "unnest", "repeat", "repeat_row",
    "summary", "show", "show_tables", "show_tables_expanded", "show_databases", "table_info", "pragma_table_info",
    "duckdb_columns", "duckdb_tables", "duckdb_views", "duckdb_schemas", "duckdb_types", "duckdb_functions",
    "duckdb_keywords", "duckdb_settings", "duckdb_databases", "duckdb_constraints", "duckdb_dependencies",
    "duckdb_indexes", "duckdb_sequences", "version", "pragma_version", "platform", "pragma_platform",
    "user_agent", "pragma_user_agent", "parquet_schema", "parquet_metadata", "parquet_file_metadata",
    "parquet_kv_metadata", "json_each", "json_tree",
})


def _check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> str:
    """Refuse anything but one query; returns the query whose plan run_query checks (an EXPLAIN's target)."""
    statements = _parse(con, sql)
    if not statements:
        raise GpuauditError("no SQL statement given")
    for st in statements:
        if _type(st) not in _READ_ONLY:
            raise GpuauditError(f"refused: {_kind(st)} statements are not allowed; {_READ_ONLY_HELP}")
    if len(statements) > 1:
        raise GpuauditError("one statement at a time, please")
    st = statements[0]
    if _type(st) != duckdb.StatementType.EXPLAIN:
        return st.query
    target = _parse(con, _explained(st.query))
    if len(target) != 1 or _type(target[0]) != duckdb.StatementType.SELECT:
        kind = _kind(target[0]) if len(target) == 1 else "a missing or multiple"
        raise GpuauditError(f"refused: EXPLAIN of {kind} statements is not allowed; {_READ_ONLY_HELP}")
    return target[0].query


def _parse(con: duckdb.DuckDBPyConnection, sql: str) -> list[Any]:
    try:
        return con.extract_statements(sql)
    except duckdb.Error as e:
        raise GpuauditError(f"SQL syntax error: {str(e).strip().splitlines()[0]}") from e


def _type(statement: Any) -> Any:
    """The statement's StatementType, or None for a type this duckdb module has no name for (UPDATE EXTENSIONS
    in DuckDB 2.0: reading `.type` raises ValueError): not read-only, whatever it is."""
    try:
        return statement.type
    except ValueError:
        return None


def _kind(statement: Any) -> str:
    kind = _type(statement)
    if kind is None:
        words = statement.query.split()[:2]
        return " ".join(words).upper() if words else "unknown"
    return str(kind).rsplit(".", 1)[-1]


def _explained(sql: str) -> str:
    """The statement an EXPLAIN [ANALYZE] [(options)] explains, by DuckDB's own tokens (comments skipped)."""
    tokens = [pos for pos, kind in duckdb.tokenize(sql) if kind != duckdb.token_type.comment]
    words = [(m.group() if (m := re.match(r"\w+|\S", sql[pos:])) else "") for pos in tokens]
    i, depth = 1, 0  # tokens[0] is EXPLAIN
    while i < len(tokens):
        word = words[i].upper()
        if depth == 0 and word not in ("ANALYZE", "ANALYSE", "("):
            return sql[tokens[i]:]
        depth += (word == "(") - (word == ")")
        i += 1
    return ""


def _check_plan(ds: Dataset, sql: str) -> None:
    """Refuse a query whose plan writes, changes state, or calls a table function not known to only read."""
    functions = {name.upper() for (name,) in ds.con.execute(
        "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type IN ('table', 'table_macro')"
    ).fetchall()}
    allowed = {name.upper() for name in _TABLE_FUNCTIONS}
    [(_, plan)] = ds.fetchall(f"EXPLAIN (FORMAT json) {sql}")
    try:
        stack = jsonio.loads(plan)
    except ValueError as e:  # a plan nested deeper than Python's parser goes: not checkable, so not run
        raise GpuauditError(f"refused: the query's plan cannot be checked ({e}); {_READ_ONLY_HELP}") from e
    while stack:
        node = stack.pop()
        name = str(node.get("name", "")).strip().upper()
        if name in _WRITING_OPERATORS or (name in functions and name not in allowed):
            raise GpuauditError(f"refused: the query's plan has {name}, which is not allowed; {_READ_ONLY_HELP}")
        stack.extend(node.get("children", []))


def run_query(ds: Dataset, sql: str, *, limit: int | None = None) -> Any:
    """Run one read-only statement; returns a pyarrow Table (of at most `limit` rows)."""
    target = _check_read_only(ds.con, sql)
    ds.lock_down()
    _check_plan(ds, target)
    return ds.arrow(sql, limit=limit)


# A user's query gets a memory limit and spills only into a directory of its own: DuckDB lets a locked-down
# query read its temp directory, and the default `<cwd>/.tmp` would expose whatever lies there.
_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|B|KB|MB|GB|TB|KIB|MIB|GIB|TIB)?\s*$", re.IGNORECASE)
_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30,
          "TIB": 2**40}


def memory_limit_bytes(text: str, total_bytes: int | None = None) -> int:
    """`--memory-limit` as bytes: `50%` (of this machine's memory), `4GB`, `512MiB`, or a number of bytes."""
    m = _MEMORY_RE.match(text)
    if not m:
        raise GpuauditError(f"--memory-limit {text[:40]!r}: give a size (4GB, 512MiB) or a share of memory (50%)")
    value, unit = float(m.group(1)), (m.group(2) or "B").upper()
    if unit == "%":
        if not 0 < value <= 100:
            raise GpuauditError(f"--memory-limit {text!r}: a share of memory is between 0 and 100 %")
        total = total_bytes or memory_total_bytes()
        n = int(total * value / 100)
    else:
        n = int(value * _UNITS[unit])
    if n < 2**20 * 16:
        raise GpuauditError(f"--memory-limit {text!r}: at least 16 MiB, DuckDB cannot run a query in less")
    return n


def memory_total_bytes() -> int:
    """This machine's memory, or the cgroup's limit when lower (a container: a share of the host's memory would
    get the process OOM-killed instead of DuckDB spilling)."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            total = min(total, int(Path(limit_file).read_text().strip()))  # "max": no limit (ValueError)
    return total


@contextlib.contextmanager
def private_spill_dir() -> Any:
    """A fresh directory only this user can enter (mkdtemp: mode 0700, an unguessable name), removed afterwards:
    DuckDB spills there, and nothing but its own spill files is ever in it."""
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="gpuaudit-sql-")
    try:
        yield Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def session_settings(memory_bytes: int, spill_dir: Path) -> dict[str, str]:
    """The DuckDB settings of a user's query, set before the connection is locked down."""
    return {"memory_limit": f"{memory_bytes}B", "temp_directory": str(spill_dir)}


def _temporal(t: Any) -> bool:
    """Whether Arrow type `t` is or holds a timestamp or date (Python's datetime stops at year 9999)."""
    import pyarrow as pa

    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return True
    if isinstance(t, pa.ExtensionType):
        return _temporal(t.storage_type)
    return any(_temporal(t.field(i).type) for i in range(t.num_fields)) if pa.types.is_nested(t) else False


def _fits_python(column: Any) -> bool:
    """Whether every value of `column` converts to a Python object: DuckDB's timestamps reach year 294247
    and 'infinity', Python's end at 9999 (to_pylist raises OverflowError). A plain timestamp or date column is
    checked by its extremes, vectorized (a day inside Python's range, so a time zone never tips it over); a
    nested one by converting it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = column.type
    day_s, first_s, end_s = 86400, -62135596800, 253402300800  # 0001-01-01 and 10000-01-01, from the epoch
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        per_s = (1 / day_s if pa.types.is_date32(t) else 1000 if pa.types.is_date64(t)
                 else {"s": 1, "ms": 1000, "us": 10**6, "ns": 10**9}[t.unit])
        extremes: Any  # {"min": ..., "max": ...} or None (pyarrow-stubs type this struct scalar as a list)
        try:
            extremes = pc.min_max(column.cast(pa.int32() if pa.types.is_date32(t) else pa.int64())).as_py()
        except pa.ArrowException:
            extremes = None
        if extremes is not None:
            if extremes["min"] is None:  # every value null
                return True
            return bool((first_s + day_s) * per_s <= extremes["min"] and extremes["max"] <= (end_s - day_s) * per_s)
    try:
        column.to_pylist()
    except (OverflowError, ValueError):
        return False
    return True


def _python_safe(table: Any) -> Any:
    """`table` with each column holding a timestamp or date Python cannot represent ('infinity', year 294247)
    replaced by DuckDB's own text for its values, so that table, JSON and CSV output show them instead of
    failing (or printing a placeholder). Other columns keep their types."""
    import pyarrow as pa

    for i, f in enumerate(table.schema):
        if not _temporal(f.type) or _fits_python(table.column(i)):
            continue
        con = duckdb.connect(":memory:")
        try:
            con.execute("SET TimeZone = 'UTC'")
            con.register("_col", pa.table({"v": table.column(i)}))
            text = con.sql("SELECT CAST(v AS VARCHAR) AS v FROM _col").to_arrow_table().column(0)
        finally:
            con.close()
        table = table.set_column(i, f.name, text.cast(pa.string()))
    return table


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.6g}" if abs(value) < 1e15 else f"{value:.6e}"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return printable(value)  # data: no raw escape sequences, \r or bidi overrides on the terminal


def _format_table(table: Any, max_width: int = 60) -> str:
    """An aligned plain-text table: numbers right-aligned, long cells cut with an ellipsis."""
    names = [printable(n) for n in table.column_names]
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


def _plain(value: Any) -> Any:
    """A value JSON can carry (util.jsonio.plain): NaN and infinities become null (JSON has neither), a MAP's
    (key, value) pairs an object."""
    return plain(value, maps=True, default=_json_default)


def _unique_names(names: Sequence[str]) -> list[str]:
    """Column names made unique (a, a_1, a_2 ...; a name already taken is skipped), so that a JSON object or a
    Parquet file keeps every column of `SELECT 1 AS a, 2 AS a`."""
    taken, seen, out = set(names), set(), []
    for name in names:
        if name in seen:
            k = 1
            while f"{name}_{k}" in taken:
                k += 1
            name = f"{name}_{k}"
            taken.add(name)
        seen.add(name)
        out.append(name)
    return out


def _format_json(table: Any) -> str:
    """Strict JSON (no NaN or Infinity), one object per row; duplicate column names get _1, _2 ..."""
    import pyarrow as pa

    columns = []
    for i, f in enumerate(table.schema):
        values = table.column(i).to_pylist()
        columns.append([_plain(v) for v in values] if pa.types.is_nested(f.type) else values)
    names = _unique_names(table.column_names)
    rows = [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]
    return jsonio.dumps(rows, default=_json_default, indent=1) + "\n"


def _csv_cell(value: Any) -> str:
    if isinstance(value, bytes):
        return value.hex()
    return value if isinstance(value, str) else json.dumps(_plain(value), default=_json_default)


def _format_csv(table: Any, *, escape: bool = False) -> str:
    """CSV; a column the CSV writer cannot take (list, struct, map, union, interval, blob) as JSON text.
    `escape`: control and format characters in the data written as visible escapes (textsafe.printable), for
    a terminal or a pipe; a file (--out) keeps the data exact."""
    import io

    import pyarrow as pa
    import pyarrow.csv as pacsv

    table = _python_safe(table)
    for i, f in enumerate(table.schema):
        t = f.type
        if (pa.types.is_nested(t) or pa.types.is_union(t) or pa.types.is_interval(t) or pa.types.is_binary(t)
                or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) or isinstance(t, pa.ExtensionType)):
            cells = [None if v is None else _csv_cell(v) for v in table.column(i).to_pylist()]
            table = table.set_column(i, f.name, pa.array(cells, pa.string()))
    buf = io.BytesIO()
    pacsv.write_csv(table, buf)
    text = buf.getvalue().decode("utf-8")
    # The CSV writer quotes a value with \n or \r, and an escaped value never holds either: escaping after
    # writing keeps every row on its line. Header names are data too.
    return "\n".join(printable(line) for line in text.split("\n")) if escape else text


def _out_path(out: Path | str) -> Path:
    """--out as a local path, as every other command's --out (util.paths.local_path)."""
    return paths.local_path(out, "--out", "a local file (write it, then copy it)")


def write_output(table: Any, fmt: str, out: Path | None) -> str | None:
    """Render `table` as `fmt`; writes to `out` when given (required for parquet), else returns the text.
    Text for stdout (table, csv) has control characters escaped; a file gets the data exactly."""
    if fmt not in FORMATS:
        raise GpuauditError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if out is not None:
        out = _out_path(out)
    if fmt == "parquet":
        if out is None:
            raise GpuauditError("--format parquet needs --out FILE")
        import pyarrow as pa
        import pyarrow.parquet as pq

        named = table.rename_columns(_unique_names(table.column_names))

        def parquet(f: BinaryIO) -> None:
            try:  # a file object, never a path: on failure pyarrow deletes the path it was given (/dev/full too)
                pq.write_table(named, f, compression="zstd")
            except pa.ArrowException as e:
                if isinstance(e, OSError):
                    raise
                raise GpuauditError(f"cannot write {out} as Parquet: {e}") from e

        _write_file(out, parquet)
        return None
    if fmt == "csv":
        text = _format_csv(table, escape=out is None)
    else:
        text = {"table": _format_table, "json": _format_json}[fmt](_python_safe(table))
    if out is None:
        return text
    data = text.encode("utf-8")
    _write_file(out, lambda f: f.write(data))
    return None


def _write_file(out: Path, write: Callable[[BinaryIO], Any]) -> None:
    """Have `write(file)` produce `out` whole or not at all: into a temporary file beside `out`, renamed over it
    once complete and synced, so a full disk or a kill never leaves a partial file nor clobbers the previous
    one. A device or a pipe (/dev/stdout) is written in place. Any failure is one GpuauditError line."""
    try:
        if out.exists() and not out.is_file() and not out.is_dir():
            with open(out, "wb") as f:
                write(f)
            return
        atomic.write_atomic(Path(os.path.realpath(out)), write)  # a symlink's target is replaced, not the link
    except OSError as e:
        raise GpuauditError(f"cannot write {out}: {e.strerror or e}") from e
