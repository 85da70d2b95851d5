"""Writing scheduler allocations (Slurm, Kubernetes) into the dataset's `gpu_allocations` table, idempotently.

Each source owns one file per partition, `<source>.parquet` (gpu_allocations/host=<h>/date=<start date>/): an
import merges its rows with that file's and rewrites it through the store's writer (atomic replace), so
importing the same sacct output twice, or a longer window that overlaps an earlier one, never counts a job twice:
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

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import polars as pl

from gpuaudit import schema
from gpuaudit.errors import GpuauditError

KEY = ("job_id", "host", "start_ts", "mig_profile")
# The scheduler's own identity of a row per source (rows of a source not listed: KEY).
IDENTITY = {schema.ALLOC_SOURCE_SLURM: ("job_id", "job_id_raw", "host", "mig_profile")}
_DAY = pl.col("start_ts").dt.date()
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
    """The rows this source's earlier imports wrote (its own files only)."""
    base = Path(root) / schema.ALLOCATIONS
    frames = []
    for f in sorted(base.glob(f"host=*/date=*/{source}.parquet")) if base.is_dir() else []:
        host = unquote(f.parent.parent.name.removeprefix("host="))
        try:
            df = pl.read_parquet(f)
        except (OSError, pl.exceptions.PolarsError) as e:
            raise GpuauditError(f"cannot read the earlier allocations in {f}: {e}; move it aside and import "
                                "again") from None
        frames.append(df.with_columns(pl.lit(host).alias("host")))
    if not frames:
        return frame([])
    out = pl.concat(frames, how="diagonal_relaxed")
    return out.select([pl.col(c).cast(t) if c in out.columns else pl.lit(None, t).alias(c)
                       for c, t in frame([]).schema.items()])


def write_allocations(root: Path | str, new: pl.DataFrame, source: str, *,
                      window: tuple[datetime, datetime] | None = None) -> WriteResult:
    """Merge `new` (rows of `source`) into the dataset at `root`; see the module doc."""
    from gpuaudit.store import local_root, partition_dir, write_table

    root = local_root(root)
    new = new.select(frame([]).columns)
    if new.filter(pl.col("source") != source).height:
        raise GpuauditError(f"write_allocations: rows of another source than {source!r}")
    orig = old = existing(root, source)
    result = WriteResult(rows=new.height)
    if window is not None:
        w0, w1 = (pl.lit(t).cast(pl.Datetime("us", "UTC")) for t in window)
        overlaps = (pl.col("start_ts") < w1) & (pl.col("end_ts") > w0)
        inside = old.filter(overlaps)
        result.replaced += inside.height
        before = inside.filter(pl.col("start_ts") < w0).with_columns(end_ts=w0)
        after = inside.filter(pl.col("end_ts") > w1).with_columns(start_ts=w1)
        old = pl.concat([old.filter(~overlaps), before, after])
    key = list(IDENTITY.get(source, KEY))
    keyed = old.join(new.select(key), on=key, how="anti", nulls_equal=True)
    result.replaced += old.height - keyed.height
    merged = pl.concat([keyed, new])
    cols = list(orig.columns)
    # The partitions whose content changes: the new rows', the removed or cut rows', the cut pieces'.
    changed = pl.concat([new, orig.join(keyed, on=cols, how="anti", nulls_equal=True),
                         keyed.join(orig, on=cols, how="anti", nulls_equal=True)])
    touched = set(_parts(changed))
    rewrite = merged.filter(pl.struct(host="host", d=_DAY).is_in([{"host": h, "d": d} for h, d in touched]))
    if rewrite.height:
        write_table(root, schema.ALLOCATIONS, rewrite.sort(["host", "start_ts", "job_id"]), name=source)
    # A partition none of whose rows stay keeps no file of this source.
    for host, d in touched - set(_parts(rewrite)):
        (partition_dir(root, schema.ALLOCATIONS, host, d.isoformat()) / f"{source}.parquet").unlink(missing_ok=True)
    result.partitions = len(touched)
    return result


def _parts(df: pl.DataFrame) -> list[tuple[str, Any]]:
    return list(df.select("host", _DAY.alias("d")).unique().iter_rows())


def telemetry_hosts(root: Path | str) -> set[str]:
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


def store_rows(root: Path | str, rows: list[dict[str, Any]], source: str, jobs: int, skipped: dict[str, int],
               examples: dict[str, str], *, window: tuple[datetime, datetime] | None = None) -> ImportSummary:
    """Write an importer's rows and say what happened (the CLI prints it)."""
    df = frame(rows)
    written = write_allocations(root, df, source, window=window)
    seen = telemetry_hosts(root)
    hosts = sorted(set(df["host"].to_list()))
    unknown = [h for h in hosts if seen and h not in seen]
    hours = float(df.select((pl.col("gpus") * (pl.col("end_ts") - pl.col("start_ts")).dt.total_seconds() / 3600)
                            .sum()).item() or 0.0)
    return ImportSummary(df.height, jobs, written.replaced, hours, dict(skipped), dict(examples), unknown)
