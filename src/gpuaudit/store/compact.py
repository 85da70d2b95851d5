"""Compaction: merge a partition's files into one under a journal (store/journal.py), so a crash mid-way never
shows rows twice and never loses any. One compaction per dataset at a time (an flock)."""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import duckdb

from gpuaudit import schema
from gpuaudit.errors import GpuauditError
from gpuaudit.store import conformance, readers
from gpuaudit.store.base import PUSH_TARGET, SORT_KEYS, connect, first_line, local_root, new_stem, sql_str, staging_dir
from gpuaudit.store.journal import (
    JOURNAL_PREFIX,
    acting_records,
    hidden_names,
    load_journal,
    record_name,
    superseded,
    write_record,
)
from gpuaudit.store.reader import find_damaged, parquet_problem
from gpuaudit.store.writer import copy_to
from gpuaudit.util import locks
from gpuaudit.util.atomic import fsync, publish

if TYPE_CHECKING:
    pass

log = logging.getLogger("gpuaudit.store")


COMPACT_LOCK = ".compact.lock"  # see compaction_lock


@dataclass
class CompactStats:
    partitions: int = 0
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    recovered: int = 0  # journals of interrupted compactions finished
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    kept: int = 0  # replaced files left in place (hidden) because a reader had the dataset open: removed later


# A compaction step, for tests that interleave readers with every one: (step, path) with step "record" (the
# record is published), "merged" (the merged file is), "removed" (the replaced files are deleted) or "kept".
_StepHook = Callable[[str, Path], None]


def _remove_replaced(root: Path, files: Sequence[Path], on_step: _StepHook | None = None) -> bool:
    """Delete files a published compaction record replaces (readers already hide them) when no reader has the
    dataset open (readers.unread); else keep them for the next compaction. Returns whether they were deleted."""
    with readers.unread(root) as free:
        if free:
            for f in files:
                f.unlink(missing_ok=True)
    if not free and files:
        log.info("compact: keeping %d replaced file(s) in %s while a reader has %s open (they are hidden; the "
                 "next compaction removes them)", len(files), files[0].parent, root)
    if on_step and files:  # after the lock is released: the hook may open readers
        on_step("removed" if free else "kept", files[0].parent)
    return free


def finish_journals(part_dir: Path, on_step: _StepHook | None = None) -> int:
    """Complete (or discard) compactions interrupted by a crash, and remove the replaced files an earlier one
    kept for its readers. A finished compaction's record stays: it is what `gpuaudit push` ships so that a
    collection target that already holds the old files hides them."""
    n = 0
    root = part_dir.parents[2]  # <root>/<table>/host=*/date=*
    loaded = {j: load_journal(j) for j in sorted(part_dir.glob(f"{JOURNAL_PREFIX}*.json"))}
    # A malformed one is reported and never acted on (it could name files it has nothing to do with), nor one
    # on a cycle (acting_records): it would delete a file whose rows no other file holds.
    acting = acting_records({j: e for j, e in loaded.items() if e is not None}, part_dir)
    present = set(os.listdir(part_dir))
    # A merged file compacted again (and perhaps deleted) still counts as landed: the later record hides it.
    hidden = superseded(present, list(acting.values()), part_dir)
    for journal, entry in acting.items():
        try:
            olds = [part_dir / name for name in entry["old"]]
            if entry["new"] in present or entry["new"] in hidden:
                left = [f for f in olds if f.name in present]
                if left and _remove_replaced(root, left, on_step):
                    n += 1
                continue
            if not any(f.name in present for f in olds):
                continue  # finished, and its merged file was compacted again since: a record to keep
        except (OSError, ValueError, KeyError, TypeError):
            pass
        journal.unlink(missing_ok=True)  # the merged file never landed (or the journal is unreadable)
        n += 1
    if n:
        fsync(part_dir)
    return n


@contextmanager
def compaction_lock(root: Path | str, *, wait: bool = True) -> Iterator[None]:
    """Hold the dataset's compaction lock: an exclusive flock on <root>/.compact.lock, released by the kernel
    when its holder exits, however it exits. Two compactions of one dataset at once would both merge the same
    files and publish every row twice. `wait`: block until the other one finishes (with a warning saying
    so), else refuse with an error."""
    path = Path(root) / COMPACT_LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as e:  # a read-only mount (EROFS) or a directory this user cannot write (EACCES)
        raise GpuauditError(f"cannot compact {root}: {e.strerror or e} (creating its lock {path}); nothing was "
                            "changed") from None
    try:
        if not locks.take(fd):
            if not wait:
                raise GpuauditError(f"another compaction of {root} is running (it holds {path}); nothing was "
                                    "changed: run again once it is done, or without --no-wait to wait for it")
            log.warning("waiting for another compaction of %s to finish (lock %s)", root, path)
            locks.take(fd, wait_s=locks.WAIT)
        yield
    finally:
        locks.close(fd)


def _check_date(date: str) -> None:
    """A partition date is a real calendar day written YYYY-MM-DD (it becomes a directory glob: `2026-13-45` or
    `2026-*` would otherwise match nothing, or too much, without a word)."""
    try:
        ok = bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", date)) and dt.date.fromisoformat(date).isoformat() == date
    except ValueError:
        ok = False
    if not ok:
        raise GpuauditError(f"--date {date[:40]!r} is not a date: give YYYY-MM-DD, e.g. 2026-03-01")


def compact(
    root: Path | str,
    *,
    table: str | None = None,
    host: str | None = None,
    date: str | None = None,
    wait: bool = True,
    on_step: _StepHook | None = None,
) -> CompactStats:
    """Merge each partition's files into one. Crash-safe: the merged file is published under a journal
    naming the files it replaces, so readers hide those until they are deleted; rows never appear twice
    and never go missing. Unreadable files, and files outside the contract's types (conformance.py), are
    left in place (and reported). One compaction per dataset at a time (compaction_lock; `wait`). The replaced
    files are deleted at once unless a reader has the dataset open (they then stay, hidden, until a later
    compaction: readers.py); `on_step` is called after each step (StepHook)."""
    if date is not None:
        _check_date(date)
    root = local_root(root)
    if (root / PUSH_TARGET).exists():
        raise GpuauditError(f"{root} is a collection target written by `gpuaudit push`: compact the data on the nodes "
                            "before it is pushed, never the collected copy (its rows would then be counted twice)")
    if not root.is_dir():
        return CompactStats()
    with compaction_lock(root, wait=wait):
        readers.prepare(root)  # a reader that opens from now on is seen by remove_replaced
        return _compact(root, table, host, date, on_step)


def _compact(root: Path, table: str | None, host: str | None, date: str | None, on_step: _StepHook | None
             ) -> CompactStats:
    tables = [table] if table else list(schema.COMPACTED_TABLES)
    stats = CompactStats()
    for t in tables:
        if t not in schema.COMPACTED_TABLES:
            raise GpuauditError(f"unknown table {t!r}; expected one of {', '.join(schema.COMPACTED_TABLES)}")
        base = root / t
        if not base.is_dir():
            continue
        host_glob = f"host={quote(host, safe='-_.~')}" if host else "host=*"
        date_glob = f"date={date}" if date else "date=*"
        for part_dir in sorted(base.glob(f"{host_glob}/{date_glob}")):
            stats.recovered += finish_journals(part_dir, on_step)
            files = []
            hidden = hidden_names(part_dir, os.listdir(part_dir))  # kept for readers: already merged
            for f in sorted(part_dir.glob("*.parquet")):
                if f.name in hidden:
                    stats.kept += 1
                    continue
                problem = parquet_problem(f)
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
            new, merged = _compact_partition(root, t, part_dir, files, stats, on_step)
            kept = [f for f in files if f not in merged]  # damaged, or outside the contract's types
            stats.files_after += len(kept) + (1 if new else 0)
            stats.bytes_after += sum(f.stat().st_size for f in kept) + (new.stat().st_size if new else 0)
    return stats


def _compact_partition(root: Path, table: str, part_dir: Path, files: list[Path], stats: CompactStats,
                       on_step: _StepHook | None) -> tuple[Path | None, list[Path]]:
    """(the merged file, the files it replaces), or (None, []) when there was nothing to merge."""
    con = connect()
    staged = staging_dir(root) / f"{uuid.uuid4().hex}.parquet"
    final = part_dir / f"{new_stem('compact')}.parquet"
    journal = part_dir / record_name()
    # Old files may lack newer columns: union with the typed empty select fills them with NULL.
    empty = schema.empty_select(table, stored_only=True)
    cols = schema.typed_select(table, columns=schema.stored_columns(table))
    order = ", ".join(SORT_KEYS[table])
    files = _conforming(con, table, files, stats)
    try:
        if len(files) < 2:
            return None, []
        while True:
            listing = "[" + ", ".join(sql_str(str(f)) for f in files) + "]"
            src = (f"(SELECT * FROM read_parquet({listing}, hive_partitioning = false, union_by_name = true) "
                   f"UNION ALL BY NAME {empty})")
            try:
                copy_to(con, f"SELECT {cols} FROM {src} ORDER BY {order}", staged)
                break
            except duckdb.Error as e:
                bad = find_damaged(con, files)
                if bad is None:
                    raise GpuauditError(f"compact {part_dir}: {first_line(e)}") from e
                log.warning("compact: leaving unreadable file %s: %s", bad, first_line(e))
                stats.skipped.append((bad, first_line(e)))
                files.remove(bad)
                if len(files) < 2:
                    return None, []
        # Each step is atomic for readers: the record hides nothing until the merged file lands, which hides the
        # inputs in the same instant (journal.superseded).
        write_record(staged.with_suffix(".json"), journal, final.name, [f.name for f in files])
        if on_step:
            on_step("record", journal)
        publish(staged, final)
        if on_step:
            on_step("merged", final)
        if not _remove_replaced(root, files, on_step):
            stats.kept += len(files)
        # The journal stays as the compaction's record (see superseded and push.py); it is tiny.
        fsync(part_dir)
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
