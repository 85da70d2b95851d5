"""The dataset on disk: Hive-partitioned Parquet under one root directory, read through DuckDB.

    <root>/gpu_samples/host=<host>/date=<YYYY-MM-DD>/<stem>.parquet
    <root>/gpu_processes/host=<host>/date=<YYYY-MM-DD>/<stem>.parquet
    <root>/<name>.json                      sidecars (e.g. simulation.json)
    <root>/.staging/                        files being written (never read)

Every producer writes through `write_table`, which makes files appear atomically (staging file, fsync,
rename, fsync of the directory), so a reader or a crash never exposes half a file. Compaction merges a
partition's files under a journal, so a crash mid-way never shows rows twice. Readers skip unreadable
files with a warning that names them instead of failing.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import duckdb

from gpuaudit import conformance, jsonfile, remote, schema
from gpuaudit.errors import GpuauditError

if TYPE_CHECKING:
    import polars as pl

log = logging.getLogger("gpuaudit.store")
K = TypeVar("K", bound=Hashable)

DEFAULT_DATA = "gpuaudit-data"
STAGING = ".staging"
JOURNAL_PREFIX = ".compact-"
COMPACT_LOCK = ".compact.lock"  # see compaction_lock
PUSH_TARGET = ".gpuaudit-push-target"  # marks a directory `gpuaudit push` collects into
ZSTD_LEVEL = 3  # measured on simulated samples: level 9 saves only 0.4 % and writes ~1.5x slower
# Columns with more distinct values than this per row group skip dictionary encoding: `ts` then gets
# DELTA_BINARY_PACKED (a regular 10 s grid costs ~nothing) instead of a dictionary of every timestamp.
# Measured on 1.1 M simulated rows: 6.42 -> 4.89 bytes per gpu_samples row, same write time.
DICTIONARY_SIZE_LIMIT = 8192
STALE_STAGING_S = 24 * 3600
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
# Fraction columns must hold 0-1: catches a producer that wrote percent.
_FRACTION_COLS = schema.FRACTIONS
_TOL = schema.FRACTION_TOLERANCE
_SORT_KEYS = {schema.SAMPLES: ("gpu_uuid", "mig_instance", "ts"), schema.PROCESSES: ("gpu_uuid", "ts", "pid")}


def data_root(path: Path | str | None = None) -> Path:
    """The dataset root: an explicit path, else $GPUAUDIT_DATA, else ./gpuaudit-data."""
    given = path or os.environ.get("GPUAUDIT_DATA")
    if not given:
        return Path(DEFAULT_DATA)
    try:
        return Path(given).expanduser()
    except RuntimeError:  # `~nouser/x`: no such user, no home directory to expand
        raise GpuauditError(f"bad --data {str(given)!r}: cannot expand '~' (no such user or home directory)"
                            ) from None


def connect(threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the session settings gpuaudit relies on (UTC)."""
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    # Several queries over the same thousands of files (the analyzer runs three): read each footer once.
    con.execute("SET parquet_metadata_cache = true")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    return con


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


# --------------------------------------------------------------------------------------------- writing


def _fsync(path: Path) -> None:
    """fsync a file or a directory (a rename is durable only once its directory is synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def partition_dir(root: Path, table: str, host: str, date: str) -> Path:
    # Percent-encoding keeps any hostname a single safe path component; DuckDB decodes it on read.
    return Path(root) / table / f"host={quote(host, safe='-_.~')}" / f"date={date}"


def local_root(root: Path | str) -> Path:
    """`root` as a local directory for writing. A URL is refused: a writer must never create a local folder
    named `s3:` (Path("s3://b/p") is the relative path s3:/b/p)."""
    url = remote.as_url(root)
    if url:
        raise GpuauditError(f"{url} is object storage: this command writes a local dataset; write it locally and "
                            f"ship it with `gpuaudit push --to {url}` (or `gpuaudit agent run --upload {url}`)")
    return Path(root)


def dataset_exists(root: Path | str) -> bool:
    """Whether `root` (a directory or an s3:// URL) exists; an empty one reads as an empty dataset."""
    url = remote.as_url(root)
    return remote.exists(url) if url else Path(root).exists()


def _staging_dir(root: Path) -> Path:
    d = Path(root) / STAGING
    d.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for stale in d.iterdir():  # left by a crashed writer
        try:
            if now - stale.stat().st_mtime > STALE_STAGING_S:
                stale.unlink()
        except OSError:
            pass
    return d


def _new_stem(prefix: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{prefix}-{stamp}-{uuid.uuid4().hex[:8]}"


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
    frac = [n for n in _FRACTION_COLS[table] if n in present]
    checks += [f"count(*) FILTER (WHERE {ref(by_name[n])} < {-_TOL} OR {ref(by_name[n])} > {1 + _TOL})" for n in frac]
    names = [c.name for c in cols if not c.nullable] + frac
    if cast:  # the other columns: converted and counted only so that a bad value raises
        checked = set(names)
        checks += [f"count({ref(c)})" for c in cols if c.name in present and c.name not in checked]
    # Readers take a null sm_active as "not measured": a duty-cycle-only source must not carry one.
    duty_only = table == schema.SAMPLES and {"source", "sm_active"} <= set(present)
    if duty_only:
        listed = ", ".join(_sql_str(x) for x in schema.DUTY_CYCLE_ONLY_SOURCES)
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


def _copy_to(con: duckdb.DuckDBPyConnection, select_sql: str, dest: Path, params: list[Any] | None = None) -> None:
    meta = f"{{{_sql_str(schema.SCHEMA_VERSION_KEY)}: {_sql_str(str(schema.SCHEMA_VERSION))}}}"
    con.execute(
        f"COPY ({select_sql}) TO {_sql_str(str(dest))} (FORMAT parquet, COMPRESSION zstd, "
        f"COMPRESSION_LEVEL {ZSTD_LEVEL}, PARQUET_VERSION v2, DICTIONARY_SIZE_LIMIT {DICTIONARY_SIZE_LIMIT}, "
        f"KV_METADATA {meta})",
        params or [],
    )


def _publish(staged: Path, final: Path) -> None:
    """fsync the staged file, rename it into place, fsync the directory: the file appears whole or not at all."""
    _fsync(staged)
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, final)
    _fsync(final.parent)


@dataclass
class _Part:
    """One (host, date) partition to write: rows of the materialized `_typed` table, or a slice of a polars
    input (`frame`) that is cast on the way out."""

    host: str
    date: str
    frame: Any = None


_DATE_COL = "__gpuaudit_date"


def _splittable(data: Any) -> bool:
    """Whether `data` is a polars DataFrame that _frame_parts can split itself: its partition keys have
    types whose conversion it does not need DuckDB for. Checked by module name first: the agent's path
    (plain lists) never imports polars."""
    if not (type(data).__module__.startswith("polars") and type(data).__name__ == "DataFrame"):
        return False
    import polars as pl

    ts_type, host_type = data.schema.get("ts"), data.schema.get("host")
    # Datetime in us or ms converts to TIMESTAMPTZ exactly, so the UTC date computed here is the one the
    # stored ts falls on (ns would be truncated by DuckDB; strings would be parsed by it).
    return (isinstance(ts_type, pl.Datetime) and ts_type.time_unit in ("us", "ms")
            and (host_type == pl.String or isinstance(host_type, pl.Categorical | pl.Enum)))


def _frame_parts(df: pl.DataFrame) -> list[_Part]:
    """Split a validated, _splittable polars input into its partitions without a copy through DuckDB:
    contiguous runs of one (host, date) become zero-copy slices (as the simulator writes them),
    anything else a partition_by."""
    import polars as pl

    if df.height == 0:
        return []
    ts = pl.col("ts").dt.convert_time_zone("UTC") if df.schema["ts"].time_zone else pl.col("ts")
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


def write_table(
    root: Path | str,
    table: str,
    data: Any,
    *,
    prefix: str = "part",
    name: str | None = None,
    presorted: bool = False,
) -> list[Path]:
    """Write rows of `table` (schema.SAMPLES or schema.PROCESSES) into the dataset at `root`.

    `data` is a polars DataFrame, a pyarrow Table, or a mapping of column name -> list. One new file per
    (host, date) partition touched; `name` gives a deterministic file stem instead (writing the same name
    again replaces that file atomically). Returns the paths written.

    Fast path: a polars frame is validated in one DuckDB scan and split in place, and each partition is
    written straight from its slice. `presorted=True` is a producer's promise that rows already come in file
    order (gpu_uuid, mig_instance, ts for samples; gpu_uuid, ts, pid for processes) so the sort is skipped;
    a broken promise costs compression, never correctness (readers do not rely on the order).
    """
    if table not in schema.TABLES:
        raise GpuauditError(f"unknown table {table!r}; expected one of {', '.join(schema.TABLES)}")
    for label, value in (("prefix", prefix), ("name", name)):
        if value is not None and not _NAME_RE.match(value):
            raise GpuauditError(f"write_table: invalid file {label} {value!r}")
    root = local_root(root)
    con = connect()
    try:
        order = ", ".join(_SORT_KEYS[table])
        stored = schema.stored_columns(table)
        stored_names = ", ".join(schema.quote_ident(c.name) for c in stored)
        if _splittable(data):
            # polars input: validated in one DuckDB scan that converts every column (a bad value fails
            # before anything is written), then each partition is cast and written straight from its slice:
            # no typed copy of the whole input.
            present = list(data.columns)
            _check_columns(table, present)
            _register_input(con, data)
            _check_values(con, table, present, "_input", cast=True)
            parts = _frame_parts(data)
            typed = schema.typed_select(table, set(present), columns=stored)
        else:
            present = _register_input(con, data)
            _check_columns(table, present)
            # A plain (not TEMP) table of this private in-memory database, so per-thread cursors see it.
            con.execute(
                f"CREATE TABLE _typed AS SELECT {schema.typed_select(table, set(present))}, "
                "CAST(timezone('UTC', ts) AS DATE) AS date FROM _input"
            )
            _check_values(con, table, present)
            keys = con.execute("SELECT DISTINCT host, date::VARCHAR FROM _typed ORDER BY 1, 2").fetchall()
            parts = [_Part(h, d) for h, d in keys]
        staging = _staging_dir(root)
        local = threading.local()

        def write_partition(part: _Part) -> Path:
            cur = getattr(local, "cur", None)
            if cur is None:
                cur = local.cur = con.cursor()
            staged = staging / f"{uuid.uuid4().hex}.parquet"
            try:
                if part.frame is None:
                    _copy_to(
                        cur,
                        f"SELECT {stored_names} FROM _typed WHERE host = ? AND date = CAST(? AS DATE) "
                        f"ORDER BY {order}",
                        staged,
                        [part.host, part.date],
                    )
                else:
                    cur.register("_part", part.frame)
                    try:
                        select = f"SELECT {typed} FROM _part"
                        _copy_to(cur, select if presorted else f"SELECT * FROM ({select}) ORDER BY {order}",
                                 staged)
                    finally:
                        cur.unregister("_part")
                final = partition_dir(root, table, part.host, part.date) / f"{name or _new_stem(prefix)}.parquet"
                _publish(staged, final)
                return final
            finally:
                staged.unlink(missing_ok=True)

        # DuckDB writes one Parquet file on one thread: partitions in parallel use the other cores
        # (measured 1.6x on 2 cores for a day of 16 hosts).
        workers = min(len(parts), os.cpu_count() or 1)
        if workers <= 1:
            written = [write_partition(p) for p in parts]
        else:
            with ThreadPoolExecutor(workers) as pool:
                written = list(pool.map(write_partition, parts))
        return written
    except duckdb.Error as e:
        raise GpuauditError(f"write_table({table}): {_first_line(e)}") from e
    except OSError as e:
        raise GpuauditError(f"cannot write to {root}: {e.strerror or e}") from e
    finally:
        con.close()


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def write_json(root: Path | str, name: str, obj: Any) -> Path:
    """Atomically write a sidecar JSON file at <root>/<name>."""
    root = local_root(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    staged = _staging_dir(root) / f"{uuid.uuid4().hex}.json"
    try:
        staged.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
        _publish(staged, final)
    finally:
        staged.unlink(missing_ok=True)
    return final


def read_json(root: Path | str, name: str) -> Any:
    path = Path(root) / name
    if not path.is_file():
        return None
    try:
        return jsonfile.read_json_file(path)
    except (OSError, ValueError) as e:  # ValueError: not JSON, not UTF-8, or nested too deeply
        log.warning("ignoring unreadable %s: %s", path, e)
        return None


# --------------------------------------------------------------------------------------------- reading


def find_damaged(con: duckdb.DuckDBPyConnection, files: Sequence[Path]) -> Path | None:
    """The first file DuckDB cannot read, when an error did not name it: footers first, then full reads.
    Slow, but only runs after a failure."""
    probes = (
        "SELECT count(*) FROM parquet_schema(?)",
        "SELECT count(*) FROM (SELECT DISTINCT * FROM read_parquet(?))",
    )
    for probe in probes:
        for f in files:
            try:
                con.execute(probe, [str(f)]).fetchall()
            except duckdb.Error:
                return f
    return None


def _parquet_problem(path: Path) -> str | None:
    """Why `path` cannot be a complete Parquet file, or None. Cheap: magic bytes and footer length only;
    damage deeper inside is caught when a query reads it (Dataset retries without the file)."""
    try:
        size = path.stat().st_size
        if size < 12:
            return f"too small ({size} bytes)"
        with path.open("rb") as f:
            if f.read(4) != b"PAR1":
                return "no Parquet header"
            f.seek(size - 8)
            tail = f.read(8)
    except OSError as e:
        return e.strerror or str(e)
    if tail[4:] != b"PAR1":
        return "truncated (no Parquet footer)"
    footer_len = int.from_bytes(tail[:4], "little")
    if footer_len <= 0 or footer_len > size - 12:
        return "corrupt footer length"
    return None


def superseded(names: Iterable[str], records: Iterable[Any], where: object = None) -> set[str]:
    """The names a partition's compaction records hide. A record {"new": merged, "old": [inputs]} applies when
    its merged file is present, or is itself hidden by a record that applies (it was compacted again); one
    whose merged file never landed (a crash before publishing it) hides nothing. The same rule serves a node's
    disk (a crash mid-compaction) and a collection target, where the inputs may have been pushed before the
    merged file: records are kept and pushed, so no row is ever counted twice (see push.py). Records that
    replace each other in a cycle (no compaction writes them: hand-made or foreign) hide nothing, with a
    warning naming `where` (the partition)."""
    present = set(names)
    valid = [r for r in records if _is_record(r)]
    cyclic = in_cycles(valid)
    if cyclic:
        _warn_cycle(where, [valid[i]["new"] for i in sorted(cyclic)])
    edges = [(r["new"], {o for o in r["old"] if isinstance(o, str) and o != r["new"]})
             for i, r in enumerate(valid) if i not in cyclic]
    hidden: set[str] = set()
    grew = True
    while grew:  # a chain of compactions is a few records long
        grew = False
        for new, old in edges:
            if (new in present or new in hidden) and not old <= hidden:
                hidden |= old
                grew = True
    return hidden


def _is_record(r: Any) -> bool:
    return isinstance(r, dict) and isinstance(r.get("new"), str) and isinstance(r.get("old"), list)


def in_cycles(records: Sequence[Mapping[str, Any]]) -> set[int]:
    """Indices of the records on a cycle of "replaces": A's merged file among B's inputs and B's among A's
    (or a longer ring). Real compactions form chains, each merged file newer than its inputs; a cycle would
    have each record hide the other's file, so both files, and all their rows, would vanish."""
    takers: dict[str, list[int]] = {}  # file name -> the records that list it among their inputs
    for i, r in enumerate(records):
        for o in r["old"]:
            if isinstance(o, str):
                takers.setdefault(o, []).append(i)
    out: set[int] = set()
    for start in range(len(records)):
        stack, seen = list(takers.get(records[start]["new"], ())), set()
        while stack:  # the records that (transitively) replace start's merged file
            i = stack.pop()
            if i == start:
                out.add(start)
                break
            if i not in seen:
                seen.add(i)
                stack.extend(takers.get(records[i]["new"], ()))
    return out


def _warn_cycle(where: object, news: Sequence[str]) -> None:
    log.warning("ignoring compaction journals in %s that replace each other in a cycle (merged files %s); they "
                "hide and delete nothing: look at them, then remove them", where or "a partition", ", ".join(news))


def acting_records(records: Mapping[K, Any], where: object = None) -> dict[K, Any]:
    """`records` (name -> parsed record) without those on a cycle (see in_cycles): the ones a caller may delete
    files on the basis of."""
    names = [n for n, r in records.items() if _is_record(r)]
    cyclic = in_cycles([records[n] for n in names])
    if cyclic:
        _warn_cycle(where, [records[names[i]]["new"] for i in sorted(cyclic)])
    return {n: records[n] for i, n in enumerate(names) if i not in cyclic}


def has_supersedable(names: Iterable[str]) -> bool:
    """Whether records could hide any of `names`: only with two data files or more. A lone file is either a
    record's merged file (which no record of it lists) or not superseded. This keeps reads fast: a compacted
    day keeps its record (listing up to a day of flushes), and parsing thousands of them on every open cost
    seconds."""
    return sum(n.endswith(".parquet") for n in names) >= 2


def _journal_hidden(part_dir: Path, names: Iterable[str]) -> set[str]:
    """Names hidden by the compaction records in `part_dir` (see superseded)."""
    names = list(names)
    if not has_supersedable(names):
        return set()
    records = []
    for name in names:
        if not (name.startswith(JOURNAL_PREFIX) and name.endswith(".json")):
            continue
        record = load_journal(part_dir / name)
        if record is not None:
            records.append(record)
    return superseded(names, records, part_dir) if records else set()


def load_journal(path: Path) -> dict[str, Any] | None:
    """A compaction journal {"new": merged file, "old": [the files it replaces]}, or None, with a warning naming
    it, when the file is not one (hand-edited, truncated, foreign): it then hides and deletes nothing."""
    try:
        entry = jsonfile.read_json_file(path)
    except (OSError, ValueError) as e:
        problem = f"unreadable: {e}"
    else:
        problem = _journal_problem(entry)
    if problem:
        log.warning("ignoring malformed compaction journal %s (%s); it hides and deletes nothing: "
                    "look at it, then remove it", path, problem)
        return None
    return entry


def _journal_problem(entry: Any) -> str | None:
    if not (isinstance(entry, dict) and isinstance(entry.get("new"), str) and isinstance(entry.get("old"), list)):
        return 'expected {"new": "<file>.parquet", "old": ["<file>.parquet", ...]}'
    names = [entry["new"], *entry["old"]]
    # Names of files in the journal's own partition only: a path would let it hide or delete other files.
    if not all(isinstance(n, str) and n.endswith(".parquet") and n == os.path.basename(n) and "\\" not in n
               and "\0" not in n for n in names):
        return "names something other than a Parquet file of its partition"
    if entry["new"] in entry["old"]:
        return "lists its merged file among the files it replaces"
    return None


def table_files(root: Path | str, table: str) -> tuple[list[Path], list[tuple[Path, str]]]:
    """(readable files, [(unreadable file, reason)]) of one table. One directory listing per partition:
    a 90-day fleet has thousands of them. An s3:// root is listed by gpuaudit.remote (files as URLs)."""
    url = remote.as_url(root)
    if url:
        return remote.table_files(url, table)  # type: ignore[return-value]
    base = Path(root) / table
    good: list[Path] = []
    bad: list[tuple[Path, str]] = []
    if not base.is_dir():
        return good, bad
    for part_dir in sorted(base.glob("host=*/date=*")):
        names = sorted(os.listdir(part_dir))
        hidden = _journal_hidden(part_dir, names)
        for name in names:
            if not name.endswith(".parquet") or name in hidden:
                continue
            f = part_dir / name
            problem = _parquet_problem(f)
            (bad.append((f, problem)) if problem else good.append(f))
    return good, bad


# The column read_parquet adds with each row's file (for rejected_rows): a name no file has, as a foreign file
# may well have a `filename` column (DuckDB then refuses to add its own).
_FILE_COLUMN = "__gpuaudit_file"


@dataclass
class Dataset:
    """A dataset root opened for reading: DuckDB views `samples` and `processes` over its Parquet files."""

    root: Path
    con: duckdb.DuckDBPyConnection
    files: dict[str, list[Path]] = field(default_factory=dict)
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # whole files left out, and why
    now: datetime | None = None  # bounds ts (conformance.py); open_dataset sets it, tests inject it
    types: dict[Any, dict[str, str] | None] = field(default_factory=dict)  # per file: column -> DuckDB type
    values_checked: set[Any] = field(default_factory=set)  # files conformance.percent_files has passed
    locked: bool = False  # see lock_down

    def _skip(self, path: Path, reason: str, what: str = "unreadable file") -> None:
        self.skipped.append((path, reason))
        log.warning("skipping %s %s: %s", what, path, reason)

    def _create_views(self) -> None:
        # Creating a view binds its files' schemas, so a damaged footer can surface here already.
        self._retry(self._bind_views)

    def _bind_views(self) -> None:
        self._check_files()
        for table, view in schema.VIEW_NAMES.items():
            self.con.execute(f"CREATE OR REPLACE VIEW {view} AS {self.view_select(table)}")

    def _check_files(self) -> None:
        """Read the footers of the files not seen yet (one call for all) and leave out those that lack the
        contract's required columns or have one of a type that cannot hold its values, and those whose fractions
        are percent (conformance.percent_files): whatever they are, they are not gpuaudit rows."""
        new = [f for files in self.files.values() for f in files if f not in self.types]
        self.types.update(conformance.read_types(self.con, new))
        for table, files in self.files.items():
            for f in list(files):
                missing = conformance.missing_required(table, self.types.get(f))
                why = (f"missing required column(s) {', '.join(missing)}" if missing else
                       "; ".join(conformance.type_problems(table, self.types.get(f))))
                if why:
                    files.remove(f)
                    self._skip(f, why, f"file outside the {table} contract")
            # Only files not checked yet: a damaged one raises here, _retry drops it and binds again.
            unchecked = [f for f in files if f not in self.values_checked]
            percent = conformance.percent_files(self.con, table, unchecked, self.types)
            for f, why in percent.items():
                files.remove(f)
                self._skip(f, why, f"file outside the {table} contract")
            self.values_checked.update(f for f in unchecked if f not in percent)

    def _scan(self, table: str, files: Sequence[Any], *, complete: bool, filename: bool) -> str:
        listing = "[" + ", ".join(_sql_str(str(f)) for f in files) + "]"  # DuckDB takes a pattern alike
        scan = (f"read_parquet({listing}, hive_partitioning = true, union_by_name = true, "
                f"hive_types = {{'host': VARCHAR, 'date': DATE}}"
                f"{f', filename = {_sql_str(_FILE_COLUMN)}' if filename else ''})")
        # Files of unknown types: the typed empty select makes sure every contract column exists.
        return scan if complete else f"(SELECT * FROM {scan} UNION ALL BY NAME {schema.empty_select(table)})"

    def view_select(self, table: str, files: Sequence[Path] | str | None = None, *, reasons: bool = False) -> str:
        """The view's SELECT over `files` (default: the files found at open), or over a glob pattern (a str):
        the contract's columns and types, rows that break its rules left out (conformance.py). `reasons`:
        every row as (reason, filename) instead, the reason NULL for a row the view shows."""
        files = self.files[table] if files is None else files
        if not files:
            return conformance.empty(table, reasons)
        if isinstance(files, str):  # a pattern, for another client later: types unknown, ts bound by its clock
            scan = self._scan(table, [files], complete=False, filename=reasons)
            return conformance.select(table, [(scan, None)], now=None, reasons=reasons, file_column=_FILE_COLUMN)
        sources = [(self._scan(table, group, complete=types is not None, filename=reasons), types)
                   for types, group in conformance.group_files(table, files, self.types)]
        return conformance.select(table, sources, now=self.now or datetime.now(UTC), reasons=reasons,
                                  file_column=_FILE_COLUMN)

    def rejected_rows(self, shown: Mapping[str, int] | None = None) -> list[tuple[str, str, int]]:
        """(table, reason, rows) for the rows the views leave out because they break the contract's rules
        (conformance.py), most first, each also logged as a warning naming a file that holds them. `shown`: rows
        per table the caller already counted through the views (the analyzer's stage 1 does), compared with the
        row counts in the files' footers, so a clean dataset costs no extra scan at all."""
        out = []
        for table in schema.TABLES:
            if not self.files[table]:
                continue
            if shown is not None and table in shown:
                listing = "[" + ", ".join(_sql_str(str(f)) for f in self.files[table]) + "]"
                every = self.fetchall(f"SELECT coalesce(sum(num_rows), 0) FROM parquet_file_metadata({listing})")[0][0]
                seen = shown[table]
            else:
                # Counting first is cheap (footers, and only the filtered columns): most datasets reject nothing.
                every, seen = self.fetchall(
                    f"SELECT (SELECT count(*) FROM ({self.view_select(table, reasons=True)})), "
                    f"(SELECT count(*) FROM {schema.VIEW_NAMES[table]})")[0]
            if every == seen:
                continue
            rows = self.fetchall(
                "SELECT reason, count(*) AS n, min(filename), count(DISTINCT filename) "
                f"FROM ({self.view_select(table, reasons=True)}) WHERE reason IS NOT NULL "
                "GROUP BY reason ORDER BY n DESC, reason")
            for reason, n, example, nfiles in rows:
                where = example if nfiles == 1 else f"{nfiles} files, e.g. {example}"
                log.warning("excluded %d %s rows: %s (in %s)", n, table, reason, where)
                out.append((table, reason, n))
        return out

    def lock_down(self) -> None:
        """From now on the connection reads the dataset's files and nothing else: no other file, no network,
        no extension, no writing anywhere, and no setting can be changed back (DuckDB's own enforcement,
        whatever the SQL). For `gpuaudit sql`, which runs a user's query."""
        if self.locked:
            return
        self.con.execute("SET allowed_paths = ?",
                         [conformance.allowed_paths([f for files in self.files.values() for f in files])])
        for setting in ("enable_external_access = false", "autoinstall_known_extensions = false",
                        "autoload_known_extensions = false", "lock_configuration = true"):
            self.con.execute(f"SET {setting}")
        self.locked = True

    def view_sql(self) -> str:
        """CREATE VIEW statements any DuckDB client can run to see the same dataset: glob patterns under the
        absolute root (not a list of today's files), so they stay valid after a compaction and see new files.
        A table without any file yet gets the empty typed view (DuckDB refuses a pattern that matches nothing)."""
        base = remote.as_url(self.root) or str(Path(self.root).resolve())
        out = ["SET TimeZone = 'UTC';"]
        for table, view in schema.VIEW_NAMES.items():
            pattern = f"{base}/{table}/host=*/date=*/*.parquet" if self.files[table] else []
            out.append(f"CREATE OR REPLACE VIEW {view} AS {self.view_select(table, pattern)};")
        return "\n".join(out) + "\n"

    def _retry(self, run: Any) -> Any:
        """Run `run()`; when DuckDB fails on one of our files (damage the cheap header/footer check
        missed), drop that file with a warning and try again."""
        rebind = False
        while True:
            try:
                if rebind:  # inside the try: another damaged file can surface while binding
                    self._bind_views()
                    rebind = False
                return run()
            except duckdb.PermissionException as e:  # only after lock_down
                raise GpuauditError(f"refused: the query reaches outside the dataset ({_first_line(e)})") from e
            except (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException) as e:
                raise GpuauditError(f"query failed: {_first_line(e)}") from e  # the query, not a file
            except duckdb.Error as e:
                named = self._file_in_error(str(e))
                # A file the error names is left out only if it fails on its own too: a query that reads a
                # healthy file another way (read_csv of a Parquet file) fails, not the file.
                culprit = (named if find_damaged(self.con, [named]) else None) if named else self._probe_files()
                if culprit is None:
                    raise GpuauditError(f"query failed: {_first_line(e)}") from e
                for files in self.files.values():
                    if culprit in files:
                        files.remove(culprit)
                self._skip(culprit, _first_line(e))
                rebind = True

    def _file_in_error(self, message: str) -> Path | None:
        for files in self.files.values():
            for f in files:
                if str(f) in message:
                    return f
        return None

    def _probe_files(self) -> Path | None:
        return find_damaged(self.con, [f for files in self.files.values() for f in files])

    def query(self, sql: str, params: Sequence[Any] | None = None) -> pl.DataFrame:
        """Run `sql` against the views and return a polars DataFrame."""
        return self._retry(lambda: self.con.sql(sql, params=params or None).pl())

    def fetchall(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        return self._retry(lambda: self.con.sql(sql, params=params or None).fetchall())

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> None:
        """Run a statement for its effect (the analyzer materializes its stage-1 table with it)."""
        self._retry(lambda: self.con.execute(sql, params or []))

    def arrow(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        """Run `sql` and return a pyarrow Table (for other output formats)."""
        return self._retry(lambda: self.con.sql(sql, params=params or None).to_arrow_table())

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_dataset(root: Path | str, *, threads: int | None = None, strict: bool = False,
                 now: datetime | None = None) -> Dataset:
    """Open the dataset at `root` (which may be empty or missing: the views are then empty), a directory or an
    s3://bucket/prefix URL (then `root` stays the URL and the files are URLs). The views show the rows that
    keep the contract (conformance.py); `now` (default: the current time) bounds their ts. `strict`: lock the
    connection down to the dataset's files once the views are bound (Dataset.lock_down)."""
    url = remote.as_url(root)
    ds = Dataset(root=url or Path(root), con=connect(threads), now=now or datetime.now(UTC))  # type: ignore[arg-type]
    if url:  # DuckDB reads the objects through the same fsspec filesystem (no httpfs extension needed)
        remote.register(ds.con, url)
    for table in schema.TABLES:
        good, bad = table_files(ds.root, table)
        ds.files[table] = good
        for path, reason in bad:
            ds._skip(path, reason)
    ds._create_views()
    if strict:
        # `gpuaudit sql` also sees the analyzer's de-duplicated streams (analysis/streams.py), so the canned
        # stage-1 queries run as they are; the analyzer materializes the same SQL as a table instead.
        from gpuaudit.analysis.streams import streams_views

        for name, sql in streams_views():
            ds.con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
        ds.lock_down()
    return ds


# ------------------------------------------------------------------------------------------ compaction


@dataclass
class CompactStats:
    partitions: int = 0
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    recovered: int = 0  # journals of interrupted compactions finished
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def finish_journals(part_dir: Path) -> int:
    """Complete (or discard) compactions interrupted by a crash. A finished compaction's record stays: it is
    what `gpuaudit push` ships so that a collection target that already holds the old files hides them."""
    n = 0
    loaded = {j: load_journal(j) for j in sorted(part_dir.glob(f"{JOURNAL_PREFIX}*.json"))}
    # A malformed one is reported and never acted on (it could name files it has nothing to do with), nor one
    # on a cycle (acting_records): it would delete a file whose rows no other file holds.
    for journal, entry in acting_records({j: e for j, e in loaded.items() if e is not None}, part_dir).items():
        try:
            olds = [part_dir / name for name in entry["old"]]
            if (part_dir / entry["new"]).exists():
                left = [f for f in olds if f.exists()]
                for f in left:
                    f.unlink(missing_ok=True)
                n += bool(left)
                continue
            if not any(f.exists() for f in olds):
                continue  # finished, and its merged file was compacted again since: a record to keep
        except (OSError, ValueError, KeyError, TypeError):
            pass
        journal.unlink(missing_ok=True)  # the merged file never landed (or the journal is unreadable)
        n += 1
    if n:
        _fsync(part_dir)
    return n


@contextmanager
def compaction_lock(root: Path | str, *, wait: bool = True) -> Iterator[None]:
    """Hold the dataset's compaction lock: an exclusive flock on <root>/.compact.lock, released by the kernel
    when its holder exits, however it exits. Two compactions of one dataset at once would both merge the same
    files and publish every row twice. `wait`: block until the other one finishes (with a warning saying
    so), else refuse with an error."""
    path = Path(root) / COMPACT_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise GpuauditError(f"another compaction of {root} is running (it holds {path}); nothing was "
                                    "changed: run again once it is done, or without --no-wait to wait for it"
                                    ) from None
            log.warning("waiting for another compaction of %s to finish (lock %s)", root, path)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def compact(
    root: Path | str,
    *,
    table: str | None = None,
    host: str | None = None,
    date: str | None = None,
    wait: bool = True,
) -> CompactStats:
    """Merge each partition's files into one. Crash-safe: the merged file is published under a journal
    naming the files it replaces, so readers hide those until they are deleted; rows never appear twice
    and never go missing. Unreadable files, and files outside the contract's types (conformance.py), are
    left in place (and reported). One compaction per dataset at a time (compaction_lock; `wait`)."""
    root = local_root(root)
    if (root / PUSH_TARGET).exists():
        raise GpuauditError(f"{root} is a collection target written by `gpuaudit push`: compact the data on the nodes "
                            "before it is pushed, never the collected copy (its rows would then be counted twice)")
    if not root.is_dir():
        return CompactStats()
    with compaction_lock(root, wait=wait):
        return _compact(root, table, host, date)


def _compact(root: Path, table: str | None, host: str | None, date: str | None) -> CompactStats:
    tables = [table] if table else list(schema.TABLES)
    stats = CompactStats()
    for t in tables:
        if t not in schema.TABLES:
            raise GpuauditError(f"unknown table {t!r}; expected one of {', '.join(schema.TABLES)}")
        base = root / t
        if not base.is_dir():
            continue
        host_glob = f"host={quote(host, safe='-_.~')}" if host else "host=*"
        date_glob = f"date={date}" if date else "date=*"
        for part_dir in sorted(base.glob(f"{host_glob}/{date_glob}")):
            stats.recovered += finish_journals(part_dir)
            files = []
            for f in sorted(part_dir.glob("*.parquet")):
                problem = _parquet_problem(f)
                if problem:
                    stats.skipped.append((f, problem))
                    log.warning("compact: leaving unreadable file %s: %s", f, problem)
                else:
                    files.append(f)
            if len(files) < 2:
                continue
            stats.partitions += 1
            stats.files_before += len(files)
            stats.bytes_before += sum(f.stat().st_size for f in files)
            new, merged = _compact_partition(root, t, part_dir, files, stats)
            kept = [f for f in files if f not in merged]  # damaged, or outside the contract's types
            stats.files_after += len(kept) + (1 if new else 0)
            stats.bytes_after += sum(f.stat().st_size for f in kept) + (new.stat().st_size if new else 0)
    return stats


def _compact_partition(root: Path, table: str, part_dir: Path, files: list[Path], stats: CompactStats
                       ) -> tuple[Path | None, list[Path]]:
    """(the merged file, the files it replaces), or (None, []) when there was nothing to merge."""
    con = connect()
    staged = _staging_dir(root) / f"{uuid.uuid4().hex}.parquet"
    final = part_dir / f"{_new_stem('compact')}.parquet"
    journal = part_dir / f"{JOURNAL_PREFIX}{uuid.uuid4().hex[:8]}.json"
    # Old files may lack newer columns: union with the typed empty select fills them with NULL.
    empty = schema.empty_select(table, stored_only=True)
    cols = schema.typed_select(table, columns=schema.stored_columns(table))
    order = ", ".join(_SORT_KEYS[table])
    files = _conforming(con, table, files, stats)
    try:
        if len(files) < 2:
            return None, []
        while True:
            listing = "[" + ", ".join(_sql_str(str(f)) for f in files) + "]"
            src = (f"(SELECT * FROM read_parquet({listing}, hive_partitioning = false, union_by_name = true) "
                   f"UNION ALL BY NAME {empty})")
            try:
                _copy_to(con, f"SELECT {cols} FROM {src} ORDER BY {order}", staged)
                break
            except duckdb.Error as e:
                bad = find_damaged(con, files)
                if bad is None:
                    raise GpuauditError(f"compact {part_dir}: {_first_line(e)}") from e
                log.warning("compact: leaving unreadable file %s: %s", bad, _first_line(e))
                stats.skipped.append((bad, _first_line(e)))
                files.remove(bad)
                if len(files) < 2:
                    return None, []
        journal_staged = staged.with_suffix(".json")
        entry = {"new": final.name, "old": [f.name for f in files]}
        journal_staged.write_text(json.dumps(entry), encoding="utf-8")
        _publish(journal_staged, journal)
        _publish(staged, final)
        for f in files:
            f.unlink(missing_ok=True)
        # The journal stays as the compaction's record (see superseded and push.py); it is tiny.
        _fsync(part_dir)
        return final, files
    finally:
        staged.unlink(missing_ok=True)
        con.close()


def _conforming(con: duckdb.DuckDBPyConnection, table: str, files: list[Path], stats: CompactStats) -> list[Path]:
    """The files whose columns have the contract's types: a merge casts to them, so another type (sm_active as
    text) could fail it or change values. The others stay as they are (readers cast them row by row)."""
    try:
        types = conformance.read_types(con, files)
    except duckdb.Error:
        return list(files)  # a damaged footer: the merge finds it and leaves it
    out = []
    for f in files:
        if conformance.conforms(table, types.get(f)):
            out.append(f)
        else:
            why = "columns of other types than the contract's, or required columns missing"
            log.warning("compact: leaving file %s as it is: %s", f, why)
            stats.skipped.append((f, why))
    # A percent-valued file merged with others would take their rows out of view with it (readers leave out
    # a file with percent values whole).
    try:
        percent = conformance.percent_files(con, table, out, types)
    except duckdb.Error:
        percent = {}  # a file that cannot be read: the merge finds it and leaves it
    for f, why in percent.items():
        log.warning("compact: leaving file %s as it is: %s", f, why)
        stats.skipped.append((f, why))
    return [f for f in out if f not in percent]
