"""The store's one transaction: replace a source's rows in a time window, all of it or none.

    with transaction.replacing(root, owner="prometheus") as tx:
        replaced = tx.replace(schema.SAMPLES, parts, source=<which rows are the source's>, window=(start, end))
    tx.files  # the dataset files it wrote

An importer hands over, per (host, date) partition, its new rows and which of the source's earlier rows they
replace (`Part.match`, e.g. the same GPUs). The transaction:
1. stages: under the dataset's compaction lock (a compaction merging the same files would lose or double rows),
   in a private stage inside <root>/.staging. The owner's own earlier files of a partition are read, their
   replaced rows dropped and the rest written again with the new rows into one new file per partition,
   `<owner>-<stamp>.parquet` (a new name each time: a name used before may be listed by a kept compaction
   record, which would hide a new file under it). Another producer's file that holds replaced rows (the owner's
   file after a compaction merged it) gets a new version without them, under a new name.
2. records: a compaction record in each partition where files are removed, {"new": the new file, "old": [the
   removed files]}, the same record `gpuaudit compact` leaves, so that `gpuaudit push` removes them from a
   collection target and the target's readers hide them until then.
3. publishes: records first, then the files, then the removals, with `atomic.publish_all` under the publish lock
   (store/readers.py), removals only while no reader has the dataset open (their records hide them otherwise).
4. restores: a failure at any step leaves the dataset as it was (publish_all puts back what it replaced), the
   stage removed, and raises `WriteFailed` ("cannot write to <root>: why"), its `begun` saying whether the
   stage had been created. Renames and links need no free space, so a full disk stops it while staging.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from gpuaudit import schema
from gpuaudit.errors import GpuauditError
from gpuaudit.store import journal, readers
from gpuaudit.store.base import STAGING, STALE_STAGING_S, connect, new_stem, partition_dir
from gpuaudit.store.compact import compaction_lock, finish_journals
from gpuaudit.store.journal import JOURNAL_PREFIX
from gpuaudit.store.writer import copy_to, write_table
from gpuaudit.util import atomic

if TYPE_CHECKING:
    import polars as pl

log = logging.getLogger("gpuaudit.store")

STAGE_PREFIX = "import-"  # <root>/.staging/import-*: a transaction's private stage


class WriteFailed(GpuauditError):
    """The transaction did not happen: the dataset is as it was. `begun`: whether it had begun (its stage
    created, then removed again), or it failed creating the stage."""

    def __init__(self, message: str, *, begun: bool) -> None:
        super().__init__(message)
        self.begun = begun


@dataclass
class Part:
    """One partition's share of a transaction: its new rows, and which of the source's earlier rows in the
    window they replace (None: all of them)."""

    host: str
    date: str  # YYYY-MM-DD
    rows: pl.DataFrame | None
    match: pl.Expr | None = None


@dataclass
class Transaction:
    root: Path
    stage: Path  # a private dataset root inside <root>/.staging: same relative paths
    owner: str  # the producer's file stem: its one file per partition is <owner>-<stamp>.parquet
    name: str = ""
    files: list[Path] = field(default_factory=list)  # dataset paths of the files it writes
    removals: list[Path] = field(default_factory=list)
    # (table, host, date) -> names of that partition's files the new owner file replaces: its compaction record
    replaced: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    # (table, host, date, new name, old name): another producer's file written again without the replaced rows
    rewrites: list[tuple[str, str, str, str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.name = self.name or new_stem(self.owner)

    def replace(self, table: str, parts: Sequence[Part], *, source: pl.Expr, window: tuple[datetime, datetime]
                ) -> int:
        """Stage `parts` of `table`: in each partition the rows of `source` with their time in (start, end] that
        the part's `match` selects are replaced by its rows. Returns the earlier rows replaced."""
        import polars as pl

        start, end = window
        in_window = source & pl.col(schema.PARTITION_TIME[table]).is_between(start, end, closed="right")
        merged: list[pl.DataFrame] = []
        dropped = 0
        for p in parts:
            mask = (in_window if p.match is None else in_window & p.match).fill_null(False)
            keep, n = self._supersede(table, p.host, p.date, mask)
            dropped += n
            frame = _concat(keep, p.rows)
            if frame is not None:
                merged.append(frame)
        if merged:
            staged = write_table(self.stage, table, pl.concat(merged, how="diagonal_relaxed"), name=self.name)
            self.files += [self.root / f.relative_to(self.stage) for f in staged]
        return dropped

    def _own(self, f: Path) -> bool:
        """The owner's file: <owner>-<stamp>.parquet (an older gpuaudit wrote <owner>.parquet)."""
        return f.stem == self.owner or f.stem.startswith(self.owner + "-")

    def _supersede(self, table: str, host: str, day: str, mask: pl.Expr) -> tuple[pl.DataFrame | None, int]:
        """Drop the earlier rows of this partition that `mask` selects. Returns (rows of the owner's earlier
        files to keep, rows dropped); those files are listed for removal (the new file holds their kept rows).
        Other files holding such rows get a new version without them staged (or are listed for removal)."""
        import polars as pl

        part_dir = partition_dir(self.root, table, host, day)
        if not part_dir.is_dir():
            return None, 0
        if any(part_dir.glob(f"{JOURNAL_PREFIX}*")):
            # An interrupted compaction: finish it first (we hold the compaction lock), so no file we read is one
            # it hides.
            finish_journals(part_dir)
        keep_own: pl.DataFrame | None = None
        dropped = 0
        hidden = journal.hidden_names(part_dir, os.listdir(part_dir))  # replaced, kept for open readers
        for f in sorted(part_dir.glob("*.parquet")):
            if f.name in hidden:
                continue
            own = self._own(f)
            try:
                # Other producers' files are only counted (column statistics make that cheap); read in full only
                # the owner's file and files that hold rows to replace.
                if not own and not pl.scan_parquet(f).filter(mask).select(pl.len()).collect().item():
                    continue
                old = pl.read_parquet(f)
            except Exception as e:  # a damaged file is the reader's business (skipped with a warning there)
                log.warning("import: leaving unreadable %s: %s", f, e)
                continue
            replaced = old.select(mask.alias("r"))["r"]
            n = int(replaced.sum())
            dropped += n
            rest = old.filter(~replaced).with_columns(pl.lit(host).alias("host"))
            if own:
                keep_own = _concat(keep_own, rest)
                self.removals.append(f)
                self.replaced.setdefault((table, host, day), []).append(f.name)
            elif n:
                if rest.height:
                    # A new name, never the same one rewritten in place: a reader that listed the old version must
                    # find it or miss it (and list again), never read another version under its name.
                    stem = new_stem(f.stem.split("-")[0] or "part")
                    write_table(self.stage, table, rest, name=stem)
                    self.removals.append(f)
                    self.rewrites.append((table, host, day, f"{stem}.parquet", f.name))
                else:
                    self.removals.append(f)
                    self.replaced.setdefault((table, host, day), []).append(f.name)
        return keep_own, dropped

    def _stage_records(self) -> None:
        """A compaction record in each partition where files are removed. A partition whose new file would hold
        no row (every process row replaced, none imported) gets an empty file, so that the record has a file to
        point to."""
        for (table, host, day), old in sorted(self.replaced.items()):
            part = partition_dir(self.stage, table, host, day)
            new = part / f"{self.name}.parquet"
            if not new.exists():
                part.mkdir(parents=True, exist_ok=True)
                con = connect()
                try:
                    copy_to(con, schema.empty_select(table, stored_only=True), new)
                finally:
                    con.close()
                atomic.fsync(new)
                self.files.append(self.root / new.relative_to(self.stage))
            atomic.write_synced(part / journal.record_name(), journal.encode(new.name, sorted(old)))
        for table, host, day, new_name, old_name in self.rewrites:
            record = partition_dir(self.stage, table, host, day) / journal.record_name()
            atomic.write_synced(record, journal.encode(new_name, [old_name]))

    def _publish(self) -> None:
        """Every staged file renamed over its place in the dataset, records first (new names: each hides its old
        files from the moment its new file lands, so a crash before the removals never shows a row twice;
        finish_journals then removes them), then the removals. Under the publish lock a reader lists the
        dataset before or after all of it; the removed files stay (their records hide them) while a reader has
        the dataset open: it may have listed them; the next compaction removes them."""
        stage = self.stage
        records = sorted(p for t in schema.TABLES for p in (stage / t).rglob(f"{JOURNAL_PREFIX}*.json"))
        files = records + sorted(p for t in schema.TABLES for p in (stage / t).rglob("*.parquet"))
        aside = stage / ".previous"
        aside.mkdir()
        with readers.publishing(self.root), readers.unread(self.root) as free:
            atomic.publish_all([(f, self.root / f.relative_to(stage)) for f in files],
                               remove=self.removals if free else (), aside=aside)


@contextmanager
def replacing(root: Path, owner: str) -> Iterator[Transaction]:
    """A transaction on the local dataset at `root` for the producer `owner`; see the module doc. What the block
    stages is published when it ends; an error in it (OSError, GpuauditError) or while publishing leaves the
    dataset as it was and raises WriteFailed."""
    try:
        staging = root / STAGING
        staging.mkdir(parents=True, exist_ok=True)
        remove_stale_stages(staging)
        tx = Transaction(root, Path(tempfile.mkdtemp(prefix=STAGE_PREFIX, dir=staging)), owner)
    except OSError as e:
        raise WriteFailed(f"cannot write to {root}: {e.strerror or e}", begun=False) from None
    try:
        with compaction_lock(root):
            yield tx
            tx._stage_records()
            tx._publish()
    except GpuauditError as e:
        # DuckDB reports an I/O failure as JSON with the errno: say it the way the OSError branch does.
        errno = re.search(r'"errno"\s*:\s*"(\d+)"', str(e))
        raise WriteFailed(f"cannot write to {root}: {os.strerror(int(errno.group(1)))}" if errno else str(e),
                          begun=True) from None
    except OSError as e:
        raise WriteFailed(f"cannot write to {root}: {e.strerror or e}", begun=True) from None
    finally:
        shutil.rmtree(tx.stage, ignore_errors=True)


def remove_stale_stages(staging: Path) -> None:
    """Stages of transactions that crashed (a clean failure removes its own)."""
    now = time.time()
    for d in staging.glob(f"{STAGE_PREFIX}*"):
        try:
            if d.is_dir() and now - d.stat().st_mtime > STALE_STAGING_S:
                shutil.rmtree(d, ignore_errors=True)
        except OSError:
            pass


def _concat(a: pl.DataFrame | None, b: pl.DataFrame | None) -> pl.DataFrame | None:
    import polars as pl

    frames = [f for f in (a, b) if f is not None and f.height]
    if not frames:
        return None
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
