"""`import_prometheus`: fetch (fetch.py), then write in one store transaction (store/transaction.py)."""

from __future__ import annotations

import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from gpuaudit import schema
from gpuaudit.errors import GpuauditError
from gpuaudit.importer.promclient import MAX_POINTS, PromClient, Transport
from gpuaudit.importer.prometheus.fetch import fetch
from gpuaudit.importer.prometheus.identity import NO_MIG
from gpuaudit.importer.prometheus.mapping import Mapping
from gpuaudit.importer.prometheus.result import ImportResult, Progress
from gpuaudit.importer.timespec import align_down
from gpuaudit.store import transaction

FILE_STEM = "prometheus"  # the importer's one file per partition is prometheus-<stamp>.parquet
PROM_SOURCES = schema.IMPORT_SOURCES  # rows a re-import replaces
_WRITE_BATCH_ROWS = 2_000_000  # sample rows per writer call (whole dates; about 200 MB in memory)


def import_prometheus(root: Path | str, client: PromClient | Transport, mapping: Mapping, start: datetime,
                      end: datetime, step_s: int, *, max_points: int = MAX_POINTS,
                      progress: Progress | None = None) -> ImportResult:
    """Import [start, end] (UTC-aware) at `step_s` into the dataset at `root`; see the module doc."""
    for t, what in ((start, "start"), (end, "end")):
        if t.tzinfo is None:
            raise GpuauditError(f"{what} time must be timezone-aware (UTC)")
    end = min(end, datetime.now(UTC))  # the future has no samples yet
    start, end = align_down(start, step_s), align_down(end, step_s)
    if end <= start:
        raise GpuauditError(f"empty window: the end ({end:%Y-%m-%dT%H:%M:%SZ}, never later than now) must be "
                            f"at least one step ({step_s}s) after --start ({start:%Y-%m-%dT%H:%M:%SZ})")
    t0 = time.monotonic()
    result = ImportResult(start=start, end=end, step_s=step_s)
    owned = isinstance(client, Transport)
    prom = PromClient(client) if isinstance(client, Transport) else client
    try:
        with tempfile.TemporaryDirectory(prefix="gpuaudit-import-") as tmp:
            spill = Path(tmp)
            mapping = fetch(prom, mapping, start, end, step_s, max_points, spill, result, progress)
            _write(Path(root), spill, start, end, result)
    finally:
        if owned:
            prom.pc.close()
    result.seconds = time.monotonic() - t0
    return result


def _write(root: Path, spill: Path, start: datetime, end: datetime, result: ImportResult) -> None:
    """Replace the imported GPUs' Prometheus-sourced rows in (start, end] with the spilled rows, in one store
    transaction (store/transaction.py: staged in batches of whole dates, bounded memory and few writer calls,
    then published all at once; a failure at any step leaves the dataset as it was)."""
    samples_files = sorted(spill.glob("samples-*.parquet"))
    process_files = sorted(spill.glob("processes-*.parquet"))
    if not samples_files:
        return
    try:
        with transaction.replacing(root, FILE_STEM) as tx:
            _stage_all(tx, samples_files, process_files, start, end, result)
    except transaction.WriteFailed as e:
        raise GpuauditError(f"{e}; nothing imported" + (" (the dataset is as it was)" if e.begun else "")
                            ) from None
    result.files += tx.files


def _stage_all(tx: transaction.Transaction, samples_files: list[Path], process_files: list[Path],
               start: datetime, end: datetime, result: ImportResult) -> None:
    samples = pl.scan_parquet(samples_files).with_columns(pl.col("ts").dt.date().alias("_d"))
    processes = (pl.scan_parquet(process_files).with_columns(pl.col("ts").dt.date().alias("_d"))
                 if process_files else None)
    per_date = samples.group_by("_d").len().sort("_d").collect()
    batch: list[Any] = []
    rows = 0
    for day, n in per_date.iter_rows():
        if batch and rows + n > _WRITE_BATCH_ROWS:
            _write_batch(tx, samples, processes, batch, start, end, result)
            batch, rows = [], 0
        batch.append(day)
        rows += n
    _write_batch(tx, samples, processes, batch, start, end, result)


def _write_batch(tx: transaction.Transaction, samples: pl.LazyFrame, processes: pl.LazyFrame | None,
                 days: list[Any], start: datetime, end: datetime, result: ImportResult) -> None:
    s_rows = samples.filter(pl.col("_d").is_in(days)).collect()
    p_rows = processes.filter(pl.col("_d").is_in(days)).collect() if processes is not None else None
    result.sample_rows += s_rows.height
    for src, n in s_rows.group_by("source").len().iter_rows():
        result.sources[src] = result.sources.get(src, 0) + n
    s_parts: list[transaction.Part] = []
    p_parts: list[transaction.Part] = []
    for (host, day), s_part in s_rows.partition_by("host", "_d", as_dict=True).items():
        host, date = str(host), day.isoformat()
        s_part = s_part.drop("_d")
        # The rows this import replaces: the same GPUs' (or MIG slices').
        same_gpus = _gpu_key().is_in(s_part.select(_gpu_key().alias("k"))["k"].unique().to_list())
        s_parts.append(transaction.Part(host, date, s_part, same_gpus))
        p_part = (p_rows.filter((pl.col("host") == host) & (pl.col("_d") == day)).drop("_d")
                  if p_rows is not None else None)
        p_parts.append(transaction.Part(host, date, p_part, same_gpus))
        result.process_rows += p_part.height if p_part is not None else 0
    result.replaced_rows += tx.replace(schema.SAMPLES, s_parts, source=_prom_rows(schema.SAMPLES), window=(start, end))
    tx.replace(schema.PROCESSES, p_parts, source=_prom_rows(schema.PROCESSES), window=(start, end))


def _gpu_key() -> pl.Expr:
    """gpu_uuid|mig_instance: one GPU or MIG slice."""
    return pl.concat_str([pl.col("gpu_uuid"), pl.col("mig_instance").fill_null(NO_MIG).cast(pl.Utf8)],
                         separator="|")


def _prom_rows(table: str) -> pl.Expr:
    """The rows a re-import replaces are Prometheus-sourced; imported process rows are the ones without a pid
    (the agent always knows the pid)."""
    if table == schema.SAMPLES:
        return pl.col("source").is_in(PROM_SOURCES)
    return pl.col("pid").is_null()
