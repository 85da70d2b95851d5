"""Reading the dataset: DuckDB views `samples` and `processes` over the Parquet files, never trusting a file
(conformance.py). Readers skip unreadable files with a warning that names them instead of failing."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb

from gpuaudit import schema
from gpuaudit.errors import GpuauditError
from gpuaudit.store import conformance, remote
from gpuaudit.store.base import connect, first_line, sql_str
from gpuaudit.store.journal import hidden_names
from gpuaudit.util import paths
from gpuaudit.util.interrupt import run_stoppable

if TYPE_CHECKING:
    import polars as pl

log = logging.getLogger("gpuaudit.store")
T = TypeVar("T")


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


def parquet_problem(path: Path) -> str | None:
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


def table_files(root: Path | str, table: str) -> tuple[list[Path], list[tuple[Path, str]]]:
    """(readable files, [(unreadable file, reason)]) of one table. One directory listing per partition:
    a 90-day fleet has thousands of them. An s3:// root is listed by gpuaudit.store.remote (files as URLs)."""
    url = paths.as_url(root)
    if url:
        return remote.table_files(url, table)  # type: ignore[return-value]
    base = Path(root) / table
    good: list[Path] = []
    bad: list[tuple[Path, str]] = []
    if not base.is_dir():
        return good, bad
    for part_dir in sorted(base.glob("host=*/date=*")):
        names = sorted(os.listdir(part_dir))
        hidden = hidden_names(part_dir, names)
        for name in names:
            if not name.endswith(".parquet") or name in hidden:
                continue
            f = part_dir / name
            problem = parquet_problem(f)
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
    timeout_s: float | None = None  # a query running longer is stopped (QueryTimeout); `gpuaudit sql --timeout`

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
        listing = "[" + ", ".join(sql_str(str(f)) for f in files) + "]"  # DuckDB takes a pattern alike
        scan = (f"read_parquet({listing}, hive_partitioning = true, union_by_name = true, "
                f"hive_types = {{'host': VARCHAR, 'date': DATE}}"
                f"{f', filename = {sql_str(_FILE_COLUMN)}' if filename else ''})")
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
                listing = "[" + ", ".join(sql_str(str(f)) for f in self.files[table]) + "]"
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
        base = paths.as_url(self.root) or str(Path(self.root).resolve())
        out = ["SET TimeZone = 'UTC';"]
        for table, view in schema.VIEW_NAMES.items():
            pattern: Sequence[Path] | str = f"{base}/{table}/host=*/date=*/*.parquet" if self.files[table] else []
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
            except duckdb.InterruptException:
                raise  # Ctrl-C or the deadline (_stoppable), never a damaged file
            except duckdb.PermissionException as e:  # only after lock_down
                raise GpuauditError(f"refused: the query reaches outside the dataset ({first_line(e)})") from e
            except (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException) as e:
                raise GpuauditError(f"query failed: {first_line(e)}") from e  # the query, not a file
            except duckdb.Error as e:
                named = self._file_in_error(str(e))
                # A file the error names is left out only if it fails on its own too: a query that reads a
                # healthy file another way (read_csv of a Parquet file) fails, not the file.
                culprit = (named if find_damaged(self.con, [named]) else None) if named else self._probe_files()
                if culprit is None:
                    raise GpuauditError(f"query failed: {first_line(e)}") from e
                for files in self.files.values():
                    if culprit in files:
                        files.remove(culprit)
                self._skip(culprit, first_line(e))
                rebind = True

    def _file_in_error(self, message: str) -> Path | None:
        for files in self.files.values():
            for f in files:
                if str(f) in message:
                    return f
        return None

    def _probe_files(self) -> Path | None:
        return find_damaged(self.con, [f for files in self.files.values() for f in files])

    def _stoppable(self, run: Callable[[], T]) -> T:
        """`_retry(run)` that Ctrl-C (KeyboardInterrupt) and `timeout_s` (QueryTimeout) stop (util/interrupt.py)."""
        return run_stoppable(lambda: self._retry(run), self.con.interrupt, timeout_s=self.timeout_s)

    def query(self, sql: str, params: Sequence[Any] | None = None) -> pl.DataFrame:
        """Run `sql` against the views and return a polars DataFrame."""
        return self._stoppable(lambda: self.con.sql(sql, params=params or None).pl())

    def fetchall(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        return self._stoppable(lambda: self.con.sql(sql, params=params or None).fetchall())

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> None:
        """Run a statement for its effect (the analyzer materializes its stage-1 table with it)."""
        self._stoppable(lambda: self.con.execute(sql, params or []))

    def arrow(self, sql: str, params: Sequence[Any] | None = None, *, limit: int | None = None) -> Any:
        """Run `sql` and return a pyarrow Table (for other output formats); `limit`: at most that many rows."""
        def run() -> Any:
            rel = self.con.sql(sql, params=params or None)
            return (rel if limit is None else rel.limit(limit)).to_arrow_table()

        return self._stoppable(run)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_dataset(root: Path | str, *, threads: int | None = None, strict: bool = False,
                 now: datetime | None = None, views: Iterable[tuple[str, str]] = (),
                 settings: Mapping[str, Any] | None = None) -> Dataset:
    """Open the dataset at `root` (which may be empty or missing: the views are then empty), a directory or an
    s3://bucket/prefix URL (then `root` stays the URL and the files are URLs). The views show the rows that
    keep the contract (conformance.py); `now` (default: the current time) bounds their ts. `strict`: lock the
    connection down to the dataset's files once the views are bound (Dataset.lock_down). `views`: extra
    (name, SQL) views over `samples` / `processes` the caller adds before the lock-down (`gpuaudit sql` adds the
    analyzer's de-duplicated streams; the store knows nothing of the analysis). `settings`: DuckDB settings set
    before the lock-down, which then keeps a query from changing them (`gpuaudit sql`'s memory limit and
    private spill directory)."""
    url = paths.as_url(root)
    ds = Dataset(root=url or Path(root), con=connect(threads), now=now or datetime.now(UTC))  # type: ignore[arg-type]
    if url:  # DuckDB reads the objects through the same fsspec filesystem (no httpfs extension needed)
        remote.register(ds.con, url)
    for table in schema.TABLES:
        good, bad = table_files(ds.root, table)
        ds.files[table] = good
        for path, reason in bad:
            ds._skip(path, reason)
    ds._create_views()
    for name, sql in views:
        ds.con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
    for name, value in (settings or {}).items():
        ds.con.execute(f"SET {name} = ?", [value])
    if strict:
        ds.lock_down()
    return ds
