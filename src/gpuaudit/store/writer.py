"""Writing the dataset: every producer writes through `write_table`, which makes files appear atomically
(staging file, fsync, rename, fsync of the directory), so a reader or a crash never exposes half a file."""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from gpuaudit import schema
from gpuaudit.errors import GpuauditError
from gpuaudit.store.base import (
    SORT_KEYS,
    connect,
    first_line,
    local_root,
    new_stem,
    partition_dir,
    sql_str,
    staging_dir,
)
from gpuaudit.util import jsonio
from gpuaudit.util.atomic import publish

if TYPE_CHECKING:
    import polars as pl

log = logging.getLogger("gpuaudit.store")


ZSTD_LEVEL = 3  # measured on simulated samples: level 9 saves only 0.4 % and writes ~1.5x slower
# Columns with more distinct values than this per row group skip dictionary encoding: `ts` then gets
# DELTA_BINARY_PACKED (a regular 10 s grid costs ~nothing) instead of a dictionary of every timestamp.
# Measured on 1.1 M simulated rows: 6.42 -> 4.89 bytes per gpu_samples row, same write time.
_DICTIONARY_SIZE_LIMIT = 8192
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
# Fraction columns must hold 0-1: catches a producer that wrote percent.
_FRACTION_COLS = schema.FRACTIONS
_TOL = schema.FRACTION_TOLERANCE
def _register_input(con: duckdb.DuckDBPyConnection, data: Any) -> list[str]:
    """Make `data` visible to DuckDB as `_input`; returns its column names."""
    if isinstance(data, Mapping):
        # Plain columnar Python lists: the agent's path, which stays free of polars/pyarrow for a small RSS.
        names = list(data)
        lengths = {len(v) for v in data.values()}
        if len(lengths) > 1:
            raise GpuauditError("write_table: columns have different lengths")
        types = _types_for(names)
        # One statement with a list parameter per column (unnested side by side): ~80x faster than
        # executemany, which dominated the agent's CPU at a 1 s interval.
        cols = ", ".join(
            f"unnest(${i + 1}::{t}[]) AS {schema.quote_ident(n)}"
            for i, (n, t) in enumerate(zip(names, types, strict=True))
        )
        con.execute(f"CREATE OR REPLACE TEMP TABLE _input AS SELECT {cols}", [list(data[n]) for n in names])
        return names
    con.register("_input", data)
    return list(con.sql("SELECT * FROM _input LIMIT 0").columns)


def _types_for(names: Iterable[str]) -> list[str]:
    by_name: dict[str, str] = {}
    for cols in schema.COLUMNS.values():
        for c in cols:
            by_name.setdefault(c.name, c.sql_type)
    return [by_name.get(n, "VARCHAR") for n in names]


def _check_columns(table: str, present: Sequence[str]) -> None:
    cols = schema.COLUMNS[table]
    known = {c.name for c in cols}
    unknown = [n for n in present if n not in known]
    if unknown:
        raise GpuauditError(f"write_table({table}): unknown column(s) {', '.join(unknown)}")
    missing = [c.name for c in cols if not c.nullable and c.name not in present]
    if missing:
        raise GpuauditError(f"write_table({table}): missing required column(s) {', '.join(missing)}")


def _check_values(con: duckdb.DuckDBPyConnection, table: str, present: Sequence[str], source: str = "_typed",
                  *, cast: bool = False) -> None:
    """Refuse nulls in required columns and fractions outside 0-1. With `cast`, `source` holds the raw input:
    every present column is cast to its contract type here, so a value that does not convert fails now,
    before any file is written (as materializing the typed table would)."""
    cols = schema.COLUMNS[table]

    def ref(c: schema.Column) -> str:
        name = schema.quote_ident(c.name)
        return f"CAST({name} AS {c.sql_type})" if cast else name

    by_name = {c.name: c for c in cols}
    checks = [f"count(*) FILTER (WHERE {ref(c)} IS NULL)" for c in cols if not c.nullable]
    frac = [n for n in _FRACTION_COLS.get(table, ()) if n in present]
    checks += [f"count(*) FILTER (WHERE {ref(by_name[n])} < {-_TOL} OR {ref(by_name[n])} > {1 + _TOL})" for n in frac]
    names = [c.name for c in cols if not c.nullable] + frac
    if cast:  # the other columns: converted and counted only so that a bad value raises
        checked = set(names)
        checks += [f"count({ref(c)})" for c in cols if c.name in present and c.name not in checked]
    # Readers take a null sm_active as "not measured": a duty-cycle-only source must not carry one.
    duty_only = table == schema.SAMPLES and {"source", "sm_active"} <= set(present)
    if duty_only:
        listed = ", ".join(sql_str(x) for x in schema.DUTY_CYCLE_ONLY_SOURCES)
        checks.append(f"count(*) FILTER (WHERE source IN ({listed}) AND sm_active IS NOT NULL)")
    counts = con.execute(f"SELECT {', '.join(checks)} FROM {source}").fetchone()
    assert counts is not None
    if duty_only and counts[-1]:
        raise GpuauditError(f"write_table({table}): {counts[-1]} rows of a duty-cycle-only source "
                            f"({', '.join(schema.DUTY_CYCLE_ONLY_SOURCES)}) carry sm_active; it must be null")
    for name, n, i in zip(names, counts, range(len(names)), strict=False):
        if n:
            what = "null values in required column" if i < len(names) - len(frac) else "values outside 0-1 in"
            raise GpuauditError(f"write_table({table}): {n} {what} {name!r}")


def copy_to(con: duckdb.DuckDBPyConnection, select_sql: str, dest: Path, params: list[Any] | None = None) -> None:
    meta = f"{{{sql_str(schema.SCHEMA_VERSION_KEY)}: {sql_str(str(schema.SCHEMA_VERSION))}}}"
    con.execute(
        f"COPY ({select_sql}) TO {sql_str(str(dest))} (FORMAT parquet, COMPRESSION zstd, "
        f"COMPRESSION_LEVEL {ZSTD_LEVEL}, PARQUET_VERSION v2, DICTIONARY_SIZE_LIMIT {_DICTIONARY_SIZE_LIMIT}, "
        f"KV_METADATA {meta})",
        params or [],
    )


@dataclass
class _Part:
    """One (host, date) partition to write: rows of the materialized `_typed` table, or a slice of a polars
    input (`frame`) that is cast on the way out."""

    host: str
    date: str
    frame: Any = None


_DATE_COL = "__gpuaudit_date"


def _splittable(data: Any, ts_col: str = "ts") -> bool:
    """Whether `data` is a polars DataFrame that _frame_parts can split itself: its partition keys have
    types whose conversion it does not need DuckDB for. Checked by module name first: the agent's path
    (plain lists) never imports polars."""
    if not (type(data).__module__.startswith("polars") and type(data).__name__ == "DataFrame"):
        return False
    import polars as pl

    ts_type, host_type = data.schema.get(ts_col), data.schema.get("host")
    # Datetime in us or ms converts to TIMESTAMPTZ exactly, so the UTC date computed here is the one the
    # stored ts falls on (ns would be truncated by DuckDB; strings would be parsed by it).
    return (isinstance(ts_type, pl.Datetime) and ts_type.time_unit in ("us", "ms")
            and (host_type == pl.String or isinstance(host_type, pl.Categorical | pl.Enum)))


def _frame_parts(df: pl.DataFrame, ts_col: str = "ts") -> list[_Part]:
    """Split a validated, _splittable polars input into its partitions without a copy through DuckDB:
    contiguous runs of one (host, date) become zero-copy slices (as the simulator writes them),
    anything else a partition_by."""
    import polars as pl

    if df.height == 0:
        return []
    ts = pl.col(ts_col).dt.convert_time_zone("UTC") if getattr(df.schema[ts_col], "time_zone", None) else pl.col(ts_col)
    runs = df.select(pl.struct(pl.col("host"), ts.dt.date().alias(_DATE_COL)).rle().alias("r")).unnest("r")
    keys = [(v["host"], v[_DATE_COL].isoformat()) for v in runs["value"].to_list()]
    if len(set(keys)) == len(keys):
        frames, offset = [], 0
        for n in runs["len"].to_list():
            frames.append(df.slice(offset, n))
            offset += n
        parts = [_Part(h, d, f) for (h, d), f in zip(keys, frames, strict=True)]
    else:
        split = df.with_columns(ts.dt.date().alias(_DATE_COL)).partition_by(
            "host", _DATE_COL, as_dict=True, maintain_order=True)
        parts = [_Part(str(h), d.isoformat(), f.drop(_DATE_COL)) for (h, d), f in split.items()]
    parts.sort(key=lambda p: (p.host, p.date))
    return parts


def _check_args(table: str, prefix: str, name: str | None) -> None:
    if table not in schema.TABLES:
        raise GpuauditError(f"unknown table {table!r}; expected one of {', '.join(schema.TABLES)}")
    for label, value in (("prefix", prefix), ("name", name)):
        if value is not None and not _NAME_RE.match(value):
            raise GpuauditError(f"write_table: invalid file {label} {value!r}")


def _frame_input_parts(con: duckdb.DuckDBPyConnection, table: str, data: pl.DataFrame,
                       ts_col: str) -> tuple[list[_Part], str]:
    """Validate a _splittable polars input in one DuckDB scan that converts every column (a bad value fails
    before anything is written) and split it in place: each partition is then cast and written straight from
    its slice, with no typed copy of the whole input. Returns the parts and the casting select list."""
    present = list(data.columns)
    _check_columns(table, present)
    _register_input(con, data)
    _check_values(con, table, present, "_input", cast=True)
    parts = _frame_parts(data, ts_col)
    typed = schema.typed_select(table, set(present), columns=schema.stored_columns(table), bounded=True)
    return parts, typed


def _typed_input_parts(con: duckdb.DuckDBPyConnection, table: str, data: Any, ts_col: str) -> list[_Part]:
    """Materialize any other input as the typed table `_typed` (with its partition `date`), validate it, and
    return its partitions."""
    present = _register_input(con, data)
    _check_columns(table, present)
    # A plain (not TEMP) table of this private in-memory database, so per-thread cursors see it.
    con.execute(
        f"CREATE TABLE _typed AS SELECT {schema.typed_select(table, set(present), bounded=True)}, "
        f"CAST(timezone('UTC', {schema.quote_ident(ts_col)}) AS DATE) AS date FROM _input"
    )
    _check_values(con, table, present)
    keys = con.execute("SELECT DISTINCT host, date::VARCHAR FROM _typed ORDER BY 1, 2").fetchall()
    return [_Part(h, d) for h, d in keys]


@dataclass
class _PartitionWriter:
    """Stages and publishes the partitions of one write_table call: one DuckDB cursor per worker thread,
    one staging file per partition (removed whatever happens), published only once complete."""

    con: duckdb.DuckDBPyConnection
    root: Path
    table: str
    staging: Path
    typed: str | None  # the casting select list for frame parts; None when every part reads `_typed`
    presorted: bool
    name: str | None
    prefix: str

    def __post_init__(self) -> None:
        self._local = threading.local()
        self._order = ", ".join(SORT_KEYS[self.table])
        self._stored_names = ", ".join(schema.quote_ident(c.name) for c in schema.stored_columns(self.table))

    def write_all(self, parts: list[_Part]) -> list[Path]:
        """DuckDB writes one Parquet file on one thread: partitions in parallel use the other cores
        (measured 1.6x on 2 cores for a day of 16 hosts)."""
        workers = min(len(parts), os.cpu_count() or 1)
        if workers <= 1:
            return [self.write(p) for p in parts]
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(self.write, parts))

    def write(self, part: _Part) -> Path:
        cur = getattr(self._local, "cur", None)
        if cur is None:
            cur = self._local.cur = self.con.cursor()
        staged = self.staging / f"{uuid.uuid4().hex}.parquet"
        try:
            self._stage(cur, part, staged)
            stem = self.name or new_stem(self.prefix)
            final = partition_dir(self.root, self.table, part.host, part.date) / f"{stem}.parquet"
            publish(staged, final)
            return final
        finally:
            staged.unlink(missing_ok=True)

    def _stage(self, cur: duckdb.DuckDBPyConnection, part: _Part, staged: Path) -> None:
        """Write the partition's rows, in file order, to the staging file `staged`."""
        if part.frame is None:
            copy_to(
                cur,
                f"SELECT {self._stored_names} FROM _typed WHERE host = ? AND date = CAST(? AS DATE) "
                f"ORDER BY {self._order}",
                staged,
                [part.host, part.date],
            )
            return
        cur.register("_part", part.frame)
        try:
            select = f"SELECT {self.typed} FROM _part"
            copy_to(cur, select if self.presorted else f"SELECT * FROM ({select}) ORDER BY {self._order}", staged)
        finally:
            cur.unregister("_part")


def write_table(
    root: Path | str,
    table: str,
    data: Any,
    *,
    prefix: str = "part",
    name: str | None = None,
    presorted: bool = False,
) -> list[Path]:
    """Write rows of `table` (schema.SAMPLES, PROCESSES or ALLOCATIONS) into the dataset at `root`; a row's
    `date` partition is the UTC date of its schema.PARTITION_TIME column (`ts`; an allocation's `start_ts`).

    `data` is a polars DataFrame, a pyarrow Table, or a mapping of column name -> list. One new file per
    (host, date) partition touched; `name` gives a deterministic file stem instead (writing the same name
    again replaces that file atomically). Returns the paths written.

    Fast path: a polars frame is validated in one DuckDB scan and split in place, and each partition is
    written straight from its slice. `presorted=True` is a producer's promise that rows already come in file
    order (gpu_uuid, mig_instance, ts for samples; gpu_uuid, ts, pid for processes) so the sort is skipped;
    a broken promise costs compression, never correctness (readers do not rely on the order).
    """
    _check_args(table, prefix, name)
    root = local_root(root)
    con = connect()
    try:
        ts_col = schema.PARTITION_TIME[table]
        typed: str | None = None
        if _splittable(data, ts_col):
            parts, typed = _frame_input_parts(con, table, data, ts_col)
        else:
            parts = _typed_input_parts(con, table, data, ts_col)
        writer = _PartitionWriter(con, root, table, staging_dir(root), typed, presorted, name, prefix)
        return writer.write_all(parts)
    except duckdb.Error as e:
        raise GpuauditError(f"write_table({table}): {first_line(e)}") from e
    except OSError as e:
        raise GpuauditError(f"cannot write to {root}: {e.strerror or e}") from e
    finally:
        con.close()


def write_json(root: Path | str, name: str, obj: Any) -> Path:
    """Atomically write a sidecar JSON file at <root>/<name>."""
    root = local_root(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    staged = staging_dir(root) / f"{uuid.uuid4().hex}.json"
    try:
        staged.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
        publish(staged, final)
    finally:
        staged.unlink(missing_ok=True)
    return final


def read_json(root: Path | str, name: str) -> Any:
    path = Path(root) / name
    if not path.is_file():
        return None
    try:
        return jsonio.read_json_file(path)
    except (OSError, ValueError) as e:  # ValueError: not JSON, not UTF-8, or nested too deeply
        log.warning("ignoring unreadable %s: %s", path, e)
        return None
