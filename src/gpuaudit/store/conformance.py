"""The reader's side of the contract (schema.py): which files and rows of a dataset the views show.

store.write_table never writes a row outside the contract, but a dataset is a directory anyone can drop
Parquet files into: a foreign exporter, a hand-edited file, an agent whose clock was reset. The reader checks
again, cheaply:

- Per file, from the footers (one parquet_schema call over all files): a file without the required columns
  is left out whole (Dataset.skipped, with a warning naming it). A column of another type (sm_active as
  VARCHAR, ts as text, DOUBLE for FLOAT) is cast to the contract type with TRY_CAST semantics, per group of
  files with the same types; a value that does not convert rejects its row. The files gpuaudit wrote all
  have the contract types: they stay one read_parquet, as before.
- Per file, a column of a type that cannot hold the contract's values (sm_active as BOOLEAN would read as
  1.0; ts as DATE puts every row at midnight) leaves the file out whole (type_problems).
- Per file, a fraction column with a value above 1 marks the whole file as percent-valued (a producer that
  wrote 0-100): its values <= 1 are percent too, not fractions, so none of its rows is kept (percent_files;
  from the footers' statistics, reading values only where those cannot tell).
- Per row, a WHERE in the view: required columns non-null; fractions in 0-1 (the writer's tolerance);
  interval_s in (0, 86400]; ts from 2000-01-01 to "now" + 1 day; no NaN or infinity; no negative power,
  energy or memory. Rows that fail are not in the views; Dataset.rejected_rows() counts them by reason.
  Every text column is also measured (length), so that DuckDB decodes it: text that is not UTF-8 then fails
  every query of the view alike, and the reader leaves that file out (Dataset._retry), whichever columns the
  query asked for.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple, TypeVar

import duckdb

from gpuaudit import schema

F = TypeVar("F", bound=Hashable)
Types = dict[str, str]  # contract column -> DuckDB type, of the columns a file has

_DUCKDB_NAMES = {"TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE"}  # how parquet_schema spells a contract type
_FLOATS = ("FLOAT", "DOUBLE")
_UNCONVERTIBLE = "__gpuaudit_unconvertible"


class Check(NamedTuple):
    reason: str  # as rejected_rows() reports it
    ok: str  # SQL that holds for a valid row (never NULL once the required columns are known non-null)
    filtered: bool  # whether the view filters on it (else it only names a reason a filtered check covers)


def duckdb_type(sql_type: str) -> str:
    return _DUCKDB_NAMES.get(sql_type, sql_type)


def _spellings(path: str) -> tuple[str, ...]:
    """DuckDB reports a file read through a registered filesystem as scheme:///rest."""
    scheme, sep, rest = path.partition("://")
    return (path, f"{scheme}:///{rest}") if sep and not rest.startswith("/") else (path,)


def allowed_paths(files: Sequence[Hashable]) -> list[str]:
    """What DuckDB's allowed_paths must list so that the connection can read `files` and nothing else."""
    return sorted({s for f in files for s in _spellings(str(f))})


def read_types(con: duckdb.DuckDBPyConnection, files: Sequence[F]) -> dict[F, Types | None]:
    """Each file's top-level columns and their DuckDB types, from the footers: one parquet_schema call for all
    files (the connection's Parquet metadata cache then serves the scans). None: the file was not reported
    (its types are then unknown, and every column is cast)."""
    if not files:
        return {}
    by_name = {s: f for f in files for s in _spellings(str(f))}
    rows = con.execute("SELECT file_name, name, duckdb_type, num_children FROM parquet_schema(?)",
                       [[str(f) for f in files]]).fetchall()
    out: dict[F, Types | None] = dict.fromkeys(files)
    depth: dict[str, list[int]] = {}  # per file: children still to come at each level of the schema tree
    for file_name, name, typ, children in rows:
        f = by_name.get(file_name)
        stack = depth.setdefault(file_name, [])
        if stack:  # below the root element
            if len(stack) == 1 and f is not None:
                types = out[f] or {}
                types[name] = typ
                out[f] = types
            stack[-1] -= 1
        elif f is not None and out[f] is None:
            out[f] = {}
        if children:
            stack.append(children)
        while stack and stack[-1] == 0:
            stack.pop()
    return out


# The file types a contract column is read from (TRY_CAST row by row; text is parsed). Any other type cannot
# hold its values: a boolean is not a fraction (it casts to 1.0), a date is not a time of day.
_NUMBER = re.compile(r"U?(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT)|FLOAT|DOUBLE|DECIMAL\(\d+,\d+\)")
_TIME = re.compile(r"TIMESTAMP(TZ)?(_S|_MS|_NS)?( WITH TIME ZONE)?")
_TEXT_OR_NULL = re.compile(r'VARCHAR|"?NULL"?')  # text is parsed; an all-null column holds nothing wrong
_READABLE_AS = {"FLOAT": (_NUMBER, "a number"), "SMALLINT": (_NUMBER, "a number"), "INTEGER": (_NUMBER, "a number"),
                "BIGINT": (_NUMBER, "a number"), "TIMESTAMPTZ": (_TIME, "a TIMESTAMP or TIMESTAMPTZ")}
# Above this, a fraction is percent: the row tolerance, and float32's rounding of it.
_PERCENT_ABOVE = 1 + schema.FRACTION_TOLERANCE + 1e-6


def type_problems(table: str, types: Types | None) -> list[str]:
    """Why a file's columns cannot be read as the contract's, e.g. ["sm_active is BOOLEAN, not a number"]."""
    out = []
    for c in schema.stored_columns(table):
        have = (types or {}).get(c.name)
        rule = _READABLE_AS.get(c.sql_type)
        if have is None or rule is None or _TEXT_OR_NULL.fullmatch(have) or rule[0].fullmatch(have):
            continue
        out.append(f"{c.name} is {have}, not {rule[1]}")
    return out


def percent_files(con: duckdb.DuckDBPyConnection, table: str, files: Sequence[F], types: Mapping[F, Types | None]
                  ) -> dict[F, str]:
    """The files holding a fraction column above 1 (PERCENT_ABOVE), with why: "values above 1: percent, not
    fractions? (sm_active up to 50)". Cheap: numeric columns from the footers' row-group statistics (one
    parquet_metadata call, served by the connection's metadata cache); the values are read only for a column
    of text or whose statistics are missing or not finite. Raises duckdb.Error on a file it cannot read."""
    fractions = schema.FRACTIONS.get(table, ())
    numeric: dict[F, list[str]] = {}
    scan: dict[F, set[str]] = {}
    for f in files:
        for col in fractions:
            have = (types.get(f) or {}).get(col)
            if have is None or re.fullmatch(r'"?NULL"?', have):
                continue
            (numeric.setdefault(f, []).append(col) if _NUMBER.fullmatch(have) else scan.setdefault(f, set()).add(col))
    highest: dict[F, dict[str, float]] = {}
    if numeric:
        by_name = {s: f for f in numeric for s in _spellings(str(f))}
        wanted = sorted({c for cols in numeric.values() for c in cols})
        rows = con.execute(
            "SELECT file_name, path_in_schema, max(TRY_CAST(stats_max_value AS DOUBLE)), "
            # a row group whose maximum cannot be known from its statistics (none written, or all NaN)
            "bool_or(coalesce(NOT isfinite(TRY_CAST(stats_max_value AS DOUBLE)), "
            "coalesce(stats_null_count, -1) <> num_values)) "
            "FROM parquet_metadata(?) WHERE path_in_schema IN (SELECT unnest(?)) GROUP BY ALL",
            [[str(f) for f in numeric], wanted]).fetchall()
        for file_name, col, top, unknown in rows:
            hit = by_name.get(file_name)
            if hit is None or col not in numeric[hit]:
                continue
            if unknown:
                scan.setdefault(hit, set()).add(col)
            elif top is not None:
                highest.setdefault(hit, {})[col] = top
    for f, cols in scan.items():
        values = [f"TRY_CAST({schema.quote_ident(c)} AS DOUBLE)" for c in sorted(cols)]
        tops = con.execute(
            f"SELECT {', '.join(f'max(CASE WHEN isfinite({v}) THEN {v} END)' for v in values)} "
            "FROM read_parquet(?)", [str(f)]).fetchone() or ()
        for col, top in zip(sorted(cols), tops, strict=True):
            if top is not None:
                highest.setdefault(f, {})[col] = top
    out: dict[F, str] = {}
    for f, found in highest.items():
        above = [f"{c} up to {v:g}" for c, v in sorted(found.items()) if math.isfinite(v) and v > _PERCENT_ABOVE]
        if above:
            out[f] = f"values above 1: percent, not fractions? ({', '.join(above)})"
    return out


def missing_required(table: str, types: Types | None) -> list[str]:
    """Required stored columns a file lacks (none when its types are unknown)."""
    if types is None:
        return []
    return [c.name for c in schema.stored_columns(table) if not c.nullable and c.name not in types]


def other_table(table: str, types: Types | None) -> str | None:
    """The other table whose file this is, when it has every required column of that table that `table` lacks
    (a gpu_samples file dropped into gpu_processes): its rows are not `table` rows."""
    if types is None:
        return None
    mine = {c.name for c in schema.COLUMNS[table]}
    for other in schema.TABLES:
        theirs = [c.name for c in schema.stored_columns(other) if not c.nullable and c.name not in mine]
        if other != table and theirs and all(n in types for n in theirs):
            return other
    return None


def conforms(table: str, types: Types | None) -> bool:
    """Whether a file has the required columns and every contract column it has in the contract's type."""
    if types is None or missing_required(table, types) or other_table(table, types):
        return False
    contract = {c.name: duckdb_type(c.sql_type) for c in schema.stored_columns(table)}
    return all(contract[n] == ty for n, ty in types.items() if n in contract)


def group_files(table: str, files: Sequence[F], types: Mapping[F, Types | None]) -> list[tuple[Types | None, list[F]]]:
    """Files grouped for reading: first all files whose columns have the contract types (with the columns any
    of them has), then one group per other combination of types, then the files whose types are unknown."""
    contract = {c.name: duckdb_type(c.sql_type) for c in schema.stored_columns(table)}
    conforming: list[F] = []
    present: Types = {}
    others: dict[tuple[tuple[str, str], ...] | None, list[F]] = {}
    for f in files:
        t = types.get(f)
        if t is None:
            others.setdefault(None, []).append(f)
            continue
        mine = {n: ty for n, ty in t.items() if n in contract}
        if all(contract[n] == ty for n, ty in mine.items()):
            conforming.append(f)
            present.update(mine)
        else:
            others.setdefault(tuple(sorted(mine.items())), []).append(f)
    groups: list[tuple[Types | None, list[F]]] = [(present, conforming)] if conforming else []
    groups += [(None if k is None else dict(k), fs) for k, fs in sorted(others.items(), key=lambda kv: kv[0] is None)]
    return groups


def row_checks(table: str, now: datetime | None) -> list[Check]:
    """The value rules of schema.py as SQL, in the order a rejected row's reason is named. `now` bounds ts
    (None: the query's current_timestamp). Every float column gets an explicit isfinite(): DuckDB drops a
    range check that the file's min/max statistics satisfy, and writers leave NaN out of those statistics
    (Parquet's rule), so a range check alone lets NaN through."""
    cols = schema.COLUMNS[table]
    out = [Check(f"{c.name} is null", f"{schema.quote_ident(c.name)} IS NOT NULL", True)
           for c in cols if not c.nullable]
    tol = schema.FRACTION_TOLERANCE
    latest = (f"current_timestamp + INTERVAL {schema.TS_MAX_AHEAD_S} SECOND" if now is None else
              f"TIMESTAMPTZ '{(now + timedelta(seconds=schema.TS_MAX_AHEAD_S)).isoformat()}'")
    for c in cols:
        q = schema.quote_ident(c.name)
        is_float = c.sql_type in _FLOATS
        if c.sql_type == "TIMESTAMPTZ":  # ts; an allocation's start_ts and end_ts
            rule: tuple[str, str] | None = (
                f"{c.name} before {schema.TS_MIN} or more than {schema.TS_MAX_AHEAD_S // 86400} day in the future",
                f"{q} BETWEEN TIMESTAMPTZ '{schema.TS_MIN} 00:00:00+00' AND {latest}")
        elif c.name == "interval_s":
            rule = (f"interval_s not in (0, {schema.MAX_INTERVAL_S:g}]", f"{q} > 0 AND {q} <= {schema.MAX_INTERVAL_S}")
        elif c.name in schema.FRACTIONS.get(table, ()):
            rule = (f"{c.name} outside 0-1", f"{q} BETWEEN {-tol} AND {1 + tol}")
        elif c.name in schema.NON_NEGATIVE.get(table, ()):
            rule = (f"{c.name} negative", f"{q} >= 0")
        elif c.sql_type == "VARCHAR" and c.name not in schema.PARTITION_KEYS:
            # Measuring the text makes DuckDB decode it, and text that is not UTF-8 fails the query (which names
            # the file), however little of the view the query reads; text over the contract's bound leaves its
            # row out (schema.TEXT_MAX_CHARS).
            bound = schema.TEXT_MAX_CHARS[table].get(c.name)
            rule = ((f"{c.name} longer than {bound} characters", f"length({q}) <= {bound}") if bound else
                    (f"{c.name} not UTF-8 text", f"length({q}) >= 0"))
        else:
            rule = None
        checks = [(f"{c.name} is NaN or infinite", f"isfinite({q})", True)] if is_float else []
        checks += [(*rule, True)] if rule else []
        for reason, ok, filtered in checks:
            out.append(Check(reason, f"({q} IS NULL OR {ok})" if c.nullable else ok, filtered))
    if table == schema.ALLOCATIONS:
        out.append(Check("end_ts before start_ts", "end_ts >= start_ts", True))
    return out


def select(table: str, sources: Sequence[tuple[str, Types | None]], *, now: datetime | None,
           reasons: bool = False, file_column: str = "filename") -> str:
    """The view's SELECT: one branch per source (a FROM clause, and the contract columns its files have with
    their types, or None when unknown: every column is then cast and the FROM must have them all), UNION ALL.
    Columns come out in contract order, cast to the contract types, plus `date`; rows breaking a rule are
    left out. With `reasons`, every row comes out instead as (reason, filename): the first rule it breaks, or
    NULL (the FROM clauses must then have `file_column`, the file's name)."""
    checks = row_checks(table, now)
    keep = " AND ".join(ck.ok for ck in checks if ck.filtered)
    named = " ".join(f"WHEN NOT ({ck.ok}) THEN {_sql_str(ck.reason)}" for ck in checks)
    branches = []
    for scan, types in sources:
        cols, convertible = [], []
        for c in schema.COLUMNS[table]:
            q = schema.quote_ident(c.name)
            have = None if types is None else types.get(c.name, "")
            if c.name in schema.PARTITION_KEYS or have == duckdb_type(c.sql_type):
                cols.append(q)
            elif have == "":
                cols.append(f"CAST(NULL AS {c.sql_type}) AS {q}")
            else:
                cast = f"TRY_CAST({q} AS {c.sql_type})"
                cols.append(f"{cast} AS {q}")
                convertible.append((f"{c.name} not convertible to {c.sql_type}",
                                    f"({q} IS NULL OR {cast} IS NOT NULL)"))
        cols.append("date")
        if reasons:
            bad = " ".join(f"WHEN NOT {ok} THEN {_sql_str(r)}" for r, ok in convertible)
            flag = f"CASE {bad} END" if bad else "CAST(NULL AS VARCHAR)"
            file = schema.quote_ident(file_column)
            inner = f"SELECT {', '.join(cols)}, {file} AS filename, {flag} AS {_UNCONVERTIBLE} FROM {scan}"
            branches.append(f"SELECT CASE WHEN {_UNCONVERTIBLE} IS NOT NULL THEN {_UNCONVERTIBLE} {named} END "
                            f"AS reason, filename FROM ({inner})")
        else:  # the raw values are checked before the cast hides them, the rules after it
            where = f" WHERE {' AND '.join(ok for _, ok in convertible)}" if convertible else ""
            branches.append(f"SELECT * FROM (SELECT {', '.join(cols)} FROM {scan}{where}) WHERE {keep}")
    return " UNION ALL ".join(branches)


def empty(table: str, reasons: bool = False) -> str:
    if reasons:
        return "SELECT CAST(NULL AS VARCHAR) AS reason, CAST(NULL AS VARCHAR) AS filename WHERE false"
    return schema.empty_select(table)


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
