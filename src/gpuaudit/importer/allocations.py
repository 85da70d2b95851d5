"""Writing scheduler allocations (Slurm, Kubernetes) into the dataset's `gpu_allocations` table, idempotently.

Each source owns one file per partition (gpu_allocations/host=<h>/date=<start date>/<source>-<stamp>.parquet):
an import merges its rows with the source's earlier rows and replaces the partitions whose content changes in
one store transaction (store/transaction.py: staged, recorded, published together; a failure part-way leaves
the dataset as it was), so importing the same sacct output twice, or a longer window that overlaps an earlier
one, never counts a job twice, and an interrupted import never leaves some partitions new and others old:
- by key: a row replaces the earlier row of the same job on the same host. Slurm: the scheduler's identity, job
  id (JobID, JobIDRaw), host and MIG profile, never the times (a running job imported again with its real end
  replaces the row its earlier import closed at --now; a file imported again with the right --tz replaces the
  rows its first import placed in the wrong zone). Kubernetes: pod, host, start and MIG profile (a StatefulSet's
  next pod reuses the name);
- by window (Kubernetes): rows of the source inside the imported window are replaced by what the window holds,
  rows that straddle its edges are cut at them.
Nothing is written when the rows fail the contract (the writer checks them all first).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import polars as pl

from gpuaudit import schema
from gpuaudit.errors import GpuauditError
from gpuaudit.store.journal import hidden_names

KEY = ("job_id", "host", "start_ts", "mig_profile")
# The scheduler's own identity of a row per source (rows of a source not listed: KEY).
_IDENTITY = {schema.ALLOC_SOURCE_SLURM: ("job_id", "job_id_raw", "host", "mig_profile")}
_DAY = pl.col("start_ts").dt.date()
# A transaction's window covering every start time: a touched partition's rows of the source are replaced whole.
_ALL_TIME = (datetime(1970, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC))
_POLARS = {"VARCHAR": pl.String, "FLOAT": pl.Float32, "DOUBLE": pl.Float64, "TIMESTAMPTZ": pl.Datetime("us", "UTC")}


def frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Allocation rows as a frame with the contract's columns (host included, date not)."""
    spec: dict[str, Any] = {c.name: _POLARS[c.sql_type] for c in schema.COLUMNS[schema.ALLOCATIONS]}
    return pl.DataFrame(rows, schema=spec) if rows else pl.DataFrame(schema=spec)


@dataclass
class WriteResult:
    rows: int = 0  # rows of this import written
    replaced: int = 0  # rows of earlier imports they replaced (same key, or inside the window)
    partitions: int = 0


def existing(root: Path, source: str) -> pl.DataFrame:
    """The rows of `source` in the dataset (every file a compaction record does not hide: the source's own, and
    any other producer's rows of that source)."""
    base = Path(root) / schema.ALLOCATIONS
    frames = []
    for part in sorted(base.glob("host=*/date=*")) if base.is_dir() else []:
        host = unquote(part.parent.name.removeprefix("host="))
        hidden = hidden_names(part, os.listdir(part))
        for f in sorted(part.glob("*.parquet")):
            if f.name in hidden:
                continue
            try:
                df = pl.read_parquet(f)
            except (OSError, pl.exceptions.PolarsError) as e:
                raise GpuauditError(f"cannot read the earlier allocations in {f}: {e}; move it aside and import "
                                    "again") from None
            if "source" in df.columns:
                frames.append(df.filter(pl.col("source") == source).with_columns(pl.lit(host).alias("host")))
    if not frames:
        return frame([])
    out = pl.concat(frames, how="diagonal_relaxed")
    return out.select([pl.col(c).cast(t) if c in out.columns else pl.lit(None, t).alias(c)
                       for c, t in frame([]).schema.items()])


def write_allocations(root: Path | str, new: pl.DataFrame, source: str, *,
                      window: tuple[datetime, datetime] | None = None) -> WriteResult:
    """Merge `new` (rows of `source`) into the dataset at `root`, all of it or nothing; see the module doc."""
    from gpuaudit.store import local_root, transaction

    root = local_root(root)
    new = new.select(frame([]).columns)
    if new.filter(pl.col("source") != source).height:
        raise GpuauditError(f"write_allocations: rows of another source than {source!r}")
    result = WriteResult(rows=new.height)
    # The merge reads the source's rows under the transaction's lock, so a concurrent import or compaction
    # cannot change them between the read and the publish.
    with transaction.replacing(root, source) as tx:
        orig = old = existing(root, source)
        if window is not None:
            w0, w1 = (pl.lit(t).cast(pl.Datetime("us", "UTC")) for t in window)
            overlaps = (pl.col("start_ts") < w1) & (pl.col("end_ts") > w0)
            inside = old.filter(overlaps)
            result.replaced += inside.height
            before = inside.filter(pl.col("start_ts") < w0).with_columns(end_ts=w0)
            after = inside.filter(pl.col("end_ts") > w1).with_columns(start_ts=w1)
            old = pl.concat([old.filter(~overlaps), before, after])
        key = list(_IDENTITY.get(source, KEY))
        keyed = old.join(new.select(key), on=key, how="anti", nulls_equal=True)
        result.replaced += old.height - keyed.height
        merged = pl.concat([keyed, new])
        cols = list(orig.columns)
        # The partitions whose content changes: the new rows', the removed or cut rows', the cut pieces'.
        changed = pl.concat([new, orig.join(keyed, on=cols, how="anti", nulls_equal=True),
                             keyed.join(orig, on=cols, how="anti", nulls_equal=True)])
        touched = sorted(set(_parts(changed)))
        rows = merged.with_columns(_DAY.alias("_d"))
        parts = []
        for host, day in touched:
            mine = rows.filter((pl.col("host") == host) & (pl.col("_d") == day)).drop("_d")
            # Every row of the source in a touched partition is replaced by the merge's: None where none stays.
            parts.append(transaction.Part(host, day.isoformat(), mine.sort("start_ts", "job_id") if mine.height
                                          else None))
        if parts:
            tx.replace(schema.ALLOCATIONS, parts, source=pl.col("source") == source, window=_ALL_TIME)
    result.partitions = len(touched)
    return result


def _parts(df: pl.DataFrame) -> list[tuple[str, Any]]:
    return list(df.select("host", _DAY.alias("d")).unique().iter_rows())


def _telemetry_hosts(root: Path | str) -> set[str]:
    """Hosts with samples in the dataset, from the partition directories (no file is read)."""
    base = Path(root) / schema.SAMPLES
    return {unquote(d.name.removeprefix("host=")) for d in base.glob("host=*")} if base.is_dir() else set()


@dataclass
class ImportSummary:
    rows: int
    jobs: int
    replaced: int
    gpu_hours: float
    skipped: dict[str, int]
    examples: dict[str, str]
    unknown_hosts: list[str]  # hosts of imported rows that have no telemetry in the dataset (kept, reported)
    warnings: list[str] = field(default_factory=list)  # what the input did not say (the CLI warns once each)


def store_rows(root: Path | str, rows: list[dict[str, Any]], source: str, jobs: int, skipped: dict[str, int],
               examples: dict[str, str], *, window: tuple[datetime, datetime] | None = None,
               warnings: list[str] | None = None) -> ImportSummary:
    """Write an importer's rows and say what happened (the CLI prints it)."""
    df = frame(rows)
    written = write_allocations(root, df, source, window=window)
    seen = _telemetry_hosts(root)
    hosts = sorted(set(df["host"].to_list()))
    unknown = [h for h in hosts if seen and h not in seen]
    hours = float(df.select((pl.col("gpus") * (pl.col("end_ts") - pl.col("start_ts")).dt.total_seconds() / 3600)
                            .sum()).item() or 0.0)
    return ImportSummary(df.height, jobs, written.replaced, hours, dict(skipped), dict(examples), unknown,
                         list(warnings or ()))
