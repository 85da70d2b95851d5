"""Reading the dataset: DuckDB views `samples` and `processes` over the Parquet files, never trusting a file
(conformance.py). Readers skip unreadable files with a warning that names them instead of failing."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import operator
import os
import re
import stat
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb

from gpuaudit import schema
from gpuaudit.errors import GpuauditError
from gpuaudit.store import conformance, readers, remote
from gpuaudit.store.base import connect, first_line, sql_str
from gpuaudit.store.journal import hidden_names
from gpuaudit.util import fmt, paths
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


_DATE_RE = re.compile(r"date=(\d{4}-\d{2}-\d{2})")
# (path, why, what) of a path a listing leaves out although it looks like data: named, never read
Excluded = list[tuple[Path, str, str]]


def _partitions(base: Path, excluded: Excluded) -> list[Path]:
    """The table's host=*/date=YYYY-MM-DD directories. A date= directory whose value is not a date (DuckDB would
    fail every query reading `date`) and a Parquet file directly under host= are named in `excluded`."""
    out = []
    for host_dir in sorted(base.glob("host=*")):
        try:
            names = sorted(os.listdir(host_dir))
        except (NotADirectoryError, FileNotFoundError):
            continue
        for name in names:
            path = host_dir / name
            if name.startswith("date="):
                m = _DATE_RE.fullmatch(name)
                try:
                    ok = m is not None and bool(date.fromisoformat(m.group(1)))
                except ValueError:
                    ok = False
                if ok:
                    out.append(path)
                else:
                    excluded.append((path, "not a date=YYYY-MM-DD partition; its files are not read", "directory"))
            elif name.endswith(".parquet"):
                excluded.append((path, "not inside a date=YYYY-MM-DD partition of its host; not read", "file"))
    return out


def _outside(path: Path, root_real: str) -> str | None:
    """Where a symlink leads when that is outside the data root (None: not a link, or one within the root)."""
    if not os.path.islink(path):
        return None
    real = os.path.realpath(path)
    return None if real == root_real or real.startswith(root_real + os.sep) else real


def _copies(files: Sequence[Path]) -> dict[Path, Path]:
    """{exact copy: the file it copies} among one partition's files (the first name of each content is kept).
    Cheap: only files of equal size are compared, by their footers first (which hold every column's min and
    max), and by their whole content only when those are equal too."""
    by_size: dict[int, list[Path]] = {}
    for f in files:
        try:
            by_size.setdefault(os.stat(f).st_size, []).append(f)
        except OSError:
            continue
    out: dict[Path, Path] = {}
    digests: dict[Path, bytes] = {}

    def digest(f: Path) -> bytes:
        if f not in digests:
            digests[f] = hashlib.sha256(f.read_bytes()).digest()
        return digests[f]

    for same in by_size.values():
        if len(same) < 2:
            continue
        kept: list[tuple[bytes, Path]] = []  # (footer, file) of each distinct content so far
        for f in same:
            try:
                foot = _footer(f)
                first = next((g for gf, g in kept if gf == foot and digest(g) == digest(f)), None)
            except OSError:
                continue
            if first is None:
                kept.append((foot, f))
            else:
                out[f] = first
    return out


def _footer(path: Path) -> bytes:
    with path.open("rb") as f:
        f.seek(-8, os.SEEK_END)
        n = int.from_bytes(f.read(4), "little")
        f.seek(-8 - n, os.SEEK_END)
        return f.read(n)


def table_files(root: Path | str, table: str, excluded: Excluded | None = None
                ) -> tuple[list[Path], list[tuple[Path, str]]]:
    """(readable files, [(unreadable file, reason)]) of one table. One directory listing per partition:
    a 90-day fleet has thousands of them. An s3:// root is listed by gpuaudit.store.remote (files as URLs).
    Left out and named in `excluded` (else logged): directories and files outside the layout, symlinks out of
    the data root (never followed), and exact copies of another file of the partition (counted once)."""
    url = paths.as_url(root)
    if url:
        return remote.table_files(url, table)  # type: ignore[return-value]
    base = Path(root) / table
    good: list[Path] = []
    bad: list[tuple[Path, str]] = []
    out: Excluded = [] if excluded is None else excluded
    if not base.is_dir():
        return good, bad
    root_real = os.path.realpath(root)
    for part_dir in _partitions(base, out):
        mine: list[Path] = []
        for _ in range(MAX_RELISTS):
            try:
                names = readers.stable_names(part_dir)
            except FileNotFoundError:
                names = []
            hidden = hidden_names(part_dir, names)
            mine, unreadable, links, vanished = [], [], [], False
            for name in names:
                if not name.endswith(".parquet") or name in hidden:
                    continue
                f = part_dir / name
                where = _outside(f, root_real)
                if where:
                    links.append((f, f"a symlink to {where}, outside the data root; not followed", "link"))
                    continue
                problem = parquet_problem(f)
                if problem and not os.path.lexists(f):
                    vanished = True  # compacted away since the listing: list the partition again, never "damaged"
                    break
                (unreadable.append((f, problem)) if problem else mine.append(f))
            if not vanished:
                bad += unreadable
                out += links
                break
        for copy, first in _copies(mine).items():
            mine.remove(copy)
            out.append((copy, f"an exact copy of {first}; its rows are counted once", "duplicate file"))
        good += mine
    if excluded is None:
        for path, why, what in out:
            log.warning("skipping %s %s: %s", what, path, why)
    return good, bad


def tree_stamp(root: Path | str) -> str | None:
    """A digest of everything table_files' answer for every table is a function of, without opening a file:
    the root as given and resolved, and each entry of each table's host=*/date=*/ tree with its lstat identity
    (type, size, mtime_ns, ctime_ns, inode; a link's target and the target's identity too). Any write to a file
    moves its ctime (utime included: only the clock could hide one), a rename gives a new inode: equal stamps
    mean the same files with the same bytes. A superset (names no listing reads are in it too): a stamp that
    differs only costs the full listing. None for an s3:// root (its listing names every object's ETag)."""
    if paths.as_url(root):
        return None
    h = hashlib.sha256(os.fsencode(str(root)) + b"\0" + os.fsencode(os.path.realpath(root)) + b"\n")
    with readers.listing(Path(root)):
        for table in schema.TABLES:
            base = os.path.join(root, table)
            h.update(f"[{table}]\0{os.path.realpath(base)}\n".encode())
            _stamp_tree(h, base, depth=3)  # host=*, date=*, the partition's files
    return h.hexdigest()


def _identity(st: os.stat_result) -> str:
    return f"{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\0{st.st_dev}"


_BY_NAME = operator.attrgetter("name")


def _stamp_tree(h: Any, path: str, depth: int) -> None:
    try:
        with os.scandir(path) as it:
            entries = sorted(it, key=_BY_NAME)
    except OSError as err:
        h.update(f"!{err.errno}\n".encode())
        return
    lines: list[str] = []  # one update per directory (names kept as bytes by fsencode's surrogateescape)
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)
            lines.append(f"{e.name}\0{_identity(st)}\n")
            if stat.S_ISLNK(st.st_mode):  # where the whole chain ends (what _outside judges), and that file's identity
                lines.append(f"{os.readlink(e.path)}\0{os.path.realpath(e.path)}\0{_identity(os.stat(e.path))}\n")
        except OSError as err:  # gone since the listing, or a dangling link: part of the stamp as it is
            lines.append(f"!{err.errno}\n")
        if depth > 1 and e.is_dir():  # table_files follows a linked host= or date= directory too
            h.update(os.fsencode("".join(lines)))
            lines = []
            _stamp_tree(h, e.path, depth - 1)
            lines.append("/\n")
    h.update(os.fsencode("".join(lines)))


class StampAhead:
    """tree_stamp(root), begun at once in a forked child while this process goes on: a warm fleet report's stamp
    (tens of thousands of lstat calls, 0.5 s, mostly the kernel's) runs beside its imports on another core.
    Call it for the stamp (the child's, or taken here where there was none: no fork on this platform, a thread
    already running, an s3:// root, a child that failed); `close()` reaps a child whose stamp was never asked
    for. Taken earlier is taken before any read: a run reads the snapshot its stamp names, as before."""

    def __init__(self, root: Path | str) -> None:
        self.root = root
        self._pid = 0
        self._fd = -1
        self._stamp: str | None = None
        self._done = False
        # Forking a process with other threads is unsafe (a lock one of them holds stays held in the child), so
        # only a single-threaded one forks: the CLI. An s3:// root's stamp is None and costs nothing.
        if paths.as_url(root) or not hasattr(os, "fork") or threading.active_count() != 1:
            return
        try:
            r, w = os.pipe()
        except OSError:
            return
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return
        if pid == 0:  # the child: the stamp to the pipe, then gone, running none of the parent's exit handlers
            code = 1
            try:
                os.close(r)
                os.write(w, (tree_stamp(root) or "-").encode("ascii"))
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        self._pid, self._fd = pid, r

    def __call__(self) -> str | None:
        if not self._done:
            got = self._reap()
            self._stamp = got if got is not None else tree_stamp(self.root)
            self._done = True
        return self._stamp

    def close(self) -> None:
        self._reap()

    def _reap(self) -> str | None:
        """The child's stamp (None when there was no child or it failed), the child waited for, once."""
        if not self._pid:
            return None
        pid, fd, self._pid, self._fd = self._pid, self._fd, 0, -1
        with os.fdopen(fd, "rb") as pipe:
            text = pipe.read()
        _, status = os.waitpid(pid, 0)
        if status != 0 or len(text) != 64:  # a digest is 64 hex digits
            return None
        return text.decode("ascii")


# Listings and reruns of one query when the dataset keeps changing under it (readers.py): each rerun follows a
# writer's publish, so this bounds a pathological writer, never a normal compaction.
MAX_RELISTS = 50


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
    must_lock: bool = False  # lock_down was asked for: every connection this dataset opens is locked
    threads: int | None = None
    extra_views: list[tuple[str, str]] = field(default_factory=list)  # open_dataset's `views`
    read_hold: int | None = None  # the shared read lock (readers.hold) while open
    relists: int = 0  # times the dataset was listed again because it changed under a query
    settings: dict[str, Any] = field(default_factory=dict)  # open_dataset's, set again on a new connection
    timeout_s: float | None = None  # a query running longer is stopped (QueryTimeout); `gpuaudit sql --timeout`

    def _skip(self, path: Path, reason: str, what: str = "unreadable file") -> None:
        if (path, reason) in self.skipped:  # listed again (a relist): said once
            return
        self.skipped.append((path, reason))
        log.warning("skipping %s %s: %s", what, path, reason)

    def _list(self) -> None:
        """Take the snapshot: every table's files, listed under the publish lock (readers.listing)."""
        url = paths.as_url(self.root)
        excluded: Excluded = []
        with contextlib.nullcontext() if url else readers.listing(Path(self.root)):
            listed = {table: table_files(self.root, table, excluded) for table in schema.TABLES}
        for table, (good, bad) in listed.items():
            self.files[table] = good
            for path, reason in bad:
                self._skip(path, reason)
        for path, reason, what in excluded:
            self._skip(path, reason, what)

    def _vanished(self) -> list[Any]:
        """Files of the snapshot that are gone now: compacted away, replaced by an import, pruned by a push
        (readers.py), never damage. Local: a stat each; s3://: one listing per table."""
        url = paths.as_url(self.root)
        if url:
            gone: list[Any] = []
            for table, files in self.files.items():
                good, bad = remote.table_files(url, table)
                now = set(good) | {p for p, _ in bad}
                gone += [f for f in files if f not in now]
            return gone
        out = []
        for files in self.files.values():
            for f in files:
                try:
                    os.stat(f)
                except FileNotFoundError:
                    out.append(f)
                except OSError:
                    pass
        return out

    def _relist(self, gone: Sequence[Any]) -> None:
        """List again and bind the views to the new snapshot. A locked connection (lock_down) cannot be allowed new
        files: it is replaced by a new one, locked the same way (it holds no state of its own: `gpuaudit sql`)."""
        self.relists += 1
        if self.relists > MAX_RELISTS:
            raise GpuauditError(f"the dataset at {self.root} kept changing while it was read (listed "
                                f"{self.relists} times); run the query again once the writer is done")
        log.info("the dataset changed while it was read (%d file(s) gone, e.g. %s: compacted, replaced or pruned); "
                 "reading it again", len(gone), gone[0] if gone else "?")
        self._list()
        if self.must_lock:  # even when the last attempt failed half-way, before it could lock the new connection
            self.con.close()
            self.con = connect(self.threads)
            url = paths.as_url(self.root)
            if url:
                remote.register(self.con, url)
            self.locked = False
            self._bind_views()
            self._add_extra_views()
            self.lock_down()
        else:
            self._bind_views()

    def _add_extra_views(self) -> None:
        """open_dataset's extra views and settings (before a lock-down, which then keeps them)."""
        for name, sql in self.extra_views:
            self.con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
        for name, value in self.settings.items():
            self.con.execute(f"SET {name} = ?", [value])

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
                other = conformance.other_table(table, self.types.get(f))
                why = (f"missing required column(s) {', '.join(missing)}" if missing else
                       f"has the columns of a {other} file, not {table} rows" if other else
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
                every = self._fetch(lambda t=table: (
                    "SELECT coalesce(sum(num_rows), 0) FROM parquet_file_metadata(["
                    + ", ".join(sql_str(str(f)) for f in self.files[t]) + "])"))[0][0]
                seen = shown[table]
            else:
                # Counting first is cheap (footers, and only the filtered columns): most datasets reject nothing.
                every, seen = self._fetch(lambda t=table: (
                    f"SELECT (SELECT count(*) FROM ({self.view_select(t, reasons=True)})), "
                    f"(SELECT count(*) FROM {schema.VIEW_NAMES[t]})"))[0]
            if every == seen:
                continue
            rows = self._fetch(lambda t=table: (
                "SELECT reason, count(*) AS n, min(filename), count(DISTINCT filename) "
                f"FROM ({self.view_select(t, reasons=True)}) WHERE reason IS NOT NULL "
                "GROUP BY reason ORDER BY n DESC, reason"))
            for reason, n, example, nfiles in rows:
                where = example if nfiles == 1 else f"{nfiles} files, e.g. {example}"
                log.warning("excluded %s: %s (in %s)", fmt.count(n, table + " row"), reason, where)
                out.append((table, reason, n))
        return out

    def only(self, files: Mapping[str, Sequence[Path]]) -> None:
        """Bind the views again over `files` (per table: part of this snapshot; the analyzer's rollup cache reads
        only the files it has not seen, analysis/stage1/cache.py)."""
        self.files = {t: list(files.get(t, ())) for t in self.files}
        self._retry(self._bind_views)

    def lock_down(self) -> None:
        """From now on the connection reads the dataset's files and nothing else: no other file, no network,
        no extension, no writing anywhere, and no setting can be changed back (DuckDB's own enforcement,
        whatever the SQL). For `gpuaudit sql`, which runs a user's query."""
        self.must_lock = True
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
        gone: list[Any] = []  # files of the snapshot a writer removed: list again (inside the try: it may race too)
        while True:
            try:
                if gone:
                    self._relist(gone)
                    gone, rebind = [], False
                if rebind:  # inside the try: another damaged file can surface while binding
                    self._bind_views()
                    rebind = False
                return run()
            except duckdb.InterruptException:
                raise  # Ctrl-C or the deadline (_stoppable), never a damaged file
            except duckdb.PermissionException as e:  # only after lock_down
                # DuckDB takes a vanished file for a pattern to expand, which the lock refuses.
                gone = self._vanished()
                if gone:
                    continue
                raise GpuauditError(f"refused: the query reaches outside the dataset ({first_line(e)})") from e
            except (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException) as e:
                raise GpuauditError(f"query failed: {first_line(e)}") from e  # the query, not a file
            except duckdb.Error as e:
                gone = self._vanished()
                if gone:  # a writer's doing, not damage: a new snapshot, the query again
                    continue
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
        # The connection at the moment: a relist may have replaced it.
        return run_stoppable(lambda: self._retry(run), lambda: self.con.interrupt(), timeout_s=self.timeout_s)

    def query(self, sql: str, params: Sequence[Any] | None = None) -> pl.DataFrame:
        """Run `sql` against the views and return a polars DataFrame."""
        return self._stoppable(lambda: self.con.sql(sql, params=params or None).pl())

    def _fetch(self, build: Any) -> list[tuple[Any, ...]]:
        """fetchall of the SQL `build()` makes from the current listing, made again after a relist."""
        return self._retry(lambda: self.con.sql(build()).fetchall())

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
        readers.release(self.read_hold)
        self.read_hold = None

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
    ds = Dataset(root=url or Path(root), con=connect(threads), now=now or datetime.now(UTC),  # type: ignore[arg-type]
                 threads=threads, extra_views=list(views))
    if url:  # DuckDB reads the objects through the same fsspec filesystem (no httpfs extension needed)
        remote.register(ds.con, url)
    else:  # writers keep the files this reader lists until it closes (readers.py)
        ds.read_hold = readers.hold(Path(root))
    ds.settings = dict(settings or {})
    try:
        ds._list()
        ds._create_views()
        ds._add_extra_views()
        if strict:
            ds.lock_down()
    except BaseException:
        ds.close()
        raise
    return ds
