"""`gpuaudit import prometheus`: dcgm-exporter history from a Prometheus-compatible server into the
dataset.

Two phases, so a failure never leaves a partial import behind:
1. fetch: every query of every chunk is answered and converted to typed rows, spilled to a private
   temporary directory (bounded memory for long windows). Any server or network error stops here,
   before the dataset is touched.
2. write: per (host, date) partition, the importer's own file is replaced atomically by a new one,
   `prometheus-<stamp>.parquet` (a new name each time): its previous rows minus those the new import
   replaces, plus the new rows. The replaced files are listed in a compaction record next to it, as
   `gpuaudit compact` leaves one, so that `gpuaudit push` removes them from a collection target and the
   target's readers hide them until then (without it the target kept both files: rows counted twice).

Idempotency: imported rows live on a step grid aligned to the epoch, and a new import replaces the
Prometheus-sourced rows of the same GPUs inside its window (also in files that compaction merged the
importer's file into). Importing the same or an overlapping window again therefore never duplicates rows.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

import polars as pl

from gpuaudit import schema, store
from gpuaudit.errors import GpuauditError
from gpuaudit.importer.mapping import AVG, INCREASE, LAST, Mapping, gpu_fraction
from gpuaudit.importer.promclient import MAX_POINTS, PromClient, Transport, chunks
from gpuaudit.importer.timespec import align_down
from gpuaudit.store import journal, writer
from gpuaudit.store.base import STALE_STAGING_S
from gpuaudit.util import atomic

log = logging.getLogger("gpuaudit.importer")

FILE_STEM = "prometheus"  # the importer's one file per partition is prometheus-<stamp>.parquet
PROM_SOURCES = (schema.SOURCE_PROM_DCGM, schema.SOURCE_PROM_DCGM_UTIL)
KEY = ("host", "gpu_uuid", "mig_instance")
WRITE_BATCH_ROWS = 2_000_000  # sample rows per writer call (whole dates; about 200 MB in memory)
HELD_MEM_BYTES = 256 * schema.MIB  # framebuffer use that counts as a process holding the GPU
_NO_MIG = -1  # stands in for a null mig_instance while grouping and joining
_FRACTIONS = ("sm_active", "duty_cycle", "sm_occupancy", "tensor_active", "dram_active", "mem_util")

Progress = Callable[[int, int], None]  # (queries done, queries in total)


@dataclass
class ImportResult:
    start: datetime  # exclusive: the first row ends one step later
    end: datetime  # inclusive: the last row's ts
    step_s: int
    sample_rows: int = 0
    process_rows: int = 0
    replaced_rows: int = 0  # earlier imported rows this import superseded
    queries: int = 0
    series: int = 0
    gpus: int = 0
    hosts: int = 0
    sources: dict[str, int] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0


def query_for(name: str, kind: str, selector: str, step_s: int) -> str:
    """PromQL for one metric over each step. The range is one millisecond short of the step so a
    sample exactly on a step boundary counts in one interval only (Prometheus 2's ranges are closed)."""
    sel = f"{name}{{{selector}}}" if selector else name
    rng = f"{step_s * 1000 - 1}ms"
    fn = {AVG: "avg_over_time", LAST: "last_over_time", INCREASE: "increase"}[kind]
    return f"{fn}({sel}[{rng}])"


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
            _fetch(prom, mapping, start, end, step_s, max_points, spill, result, progress)
            _write(Path(root), spill, start, end, result)
    finally:
        if owned:
            prom.pc.close()
    result.seconds = time.monotonic() - t0
    return result


# ---------------------------------------------------------------------------------------------- fetch


def _fetch(prom: PromClient, mapping: Mapping, start: datetime, end: datetime, step_s: int, max_points: int,
           spill: Path, result: ImportResult, progress: Progress | None) -> None:
    queries = [(fld, prio, name, query_for(name, spec.kind, mapping.selector, step_s))
               for fld, spec in mapping.metrics.items() for prio, name in enumerate(spec.names)]
    windows = list(chunks(start, end, step_s, max_points))
    total = len(windows) * len(queries)
    exporter_pod = re.compile(mapping.exporter_pod) if mapping.exporter_pod else None
    gpus: set[tuple[str, str, int]] = set()
    for i, (first, last) in enumerate(windows):
        series_rows: list[tuple[Any, ...]] = []
        raw: list[tuple[str, str, dict[str, str]]] = []  # per series: (field, metric name, its labels)
        sids: list[int] = []
        tss: list[float] = []
        values: list[float] = []
        for fld, prio, name, q in queries:
            for item in prom.query_range(q, first, last, step_s):
                sid = len(series_rows)
                try:
                    labels = _series_labels(item["metric"], mapping, exporter_pod)
                except _BadLabel as e:
                    raise GpuauditError(f"bad label from {prom.t.url}: {_series_text(name, item['metric'])}: {e}; "
                                        "nothing imported") from None
                series_rows.append((sid, fld, prio, *labels))
                raw.append((fld, name, item["metric"]))
                n = _append_points(item["values"], tss, values, prom.t.url, name)
                sids.extend([sid] * n)
            result.queries += 1
            if progress:
                progress(result.queries, total)
        result.series += len(series_rows)
        points = pl.DataFrame({"sid": sids, "ts": tss, "value": values},
                              schema={"sid": pl.Int64, "ts": pl.Float64, "value": pl.Float64})
        _check_points(points, raw, mapping, first, last, prom.t.url)
        samples, processes = _rows(series_rows, points, mapping, step_s)
        if samples.height:
            samples.write_parquet(spill / f"samples-{i:06d}.parquet")
            gpus.update(samples.select(KEY).unique().iter_rows())
        if processes.height:
            processes.write_parquet(spill / f"processes-{i:06d}.parquet")
    if not gpus:
        tried = ", ".join(n for f in ("sm_active", "duty_cycle") if f in mapping.metrics
                          for n in mapping.metrics[f].names)
        sel = f" matching {{{mapping.selector}}}" if mapping.selector else ""
        raise GpuauditError(
            f"no GPU utilization series{sel} between {start:%Y-%m-%dT%H:%M:%SZ} and {end:%Y-%m-%dT%H:%M:%SZ} "
            f"on {prom.t.url} (tried {tried}); nothing imported. Check the window, --selector or --metric")
    result.gpus = len(gpus)
    result.hosts = len({g[0] for g in gpus})


def _append_points(raw: list[Any], tss: list[float], values: list[float], url: str, name: str) -> int:
    try:
        for t, v in raw:
            tss.append(float(t))
            values.append(float(v))
    except (TypeError, ValueError):
        raise GpuauditError(f"malformed response from {url}: bad sample in {name} "
                            "(expected [timestamp, \"value\"] pairs)") from None
    return len(raw)


_LABEL_FIELDS = ("host", "gpu_uuid", "gpu_index", "gpu_name", "mig_instance", "mig_profile",
                 "k8s_pod", "k8s_namespace", "container", "job_id")


def _series_labels(labels: dict[str, str], mapping: Mapping, exporter_pod: re.Pattern[str] | None
                   ) -> tuple[Any, ...]:
    """(host, gpu_uuid, gpu_index, gpu_name, mig_instance, mig_profile, pod, namespace, container, job)."""
    names = mapping.labels

    def first(fld: str) -> tuple[str | None, str | None]:
        for label in names.get(fld, ()):
            value = labels.get(label)
            if value:
                return label, value
        return None, None

    host_label, host = first("host")
    if host_label == "instance" and host:
        host = re.sub(r":\d+$", "", host)  # an exporter address, not a hostname: drop the port
    host = host or "unknown"
    gpu_index = _small_int(*first("gpu_index"), "GPU index")
    uuid = first("gpu_uuid")[1] or f"{host}/gpu{gpu_index if gpu_index is not None else '?'}"
    mig = _small_int(*first("mig_instance"), "MIG instance id")
    mig_profile = first("mig_profile")[1] if mig is not None else None
    # The pod label picks the naming style; namespace and container come from the same style.
    pod = namespace = container = None
    pods, namespaces, containers = (names.get(f, ()) for f in ("k8s_pod", "k8s_namespace", "container"))
    for i, label in enumerate(pods):
        if labels.get(label):
            pod = labels[label]
            namespace = labels.get(namespaces[i]) if i < len(namespaces) else first("k8s_namespace")[1]
            container = labels.get(containers[i]) if i < len(containers) else first("container")[1]
            break
    if pod and exporter_pod is not None and exporter_pod.search(pod):
        pod = namespace = container = None
    job = first("job_id")[1]
    return (host, uuid, gpu_index, first("gpu_name")[1], mig if mig is not None else _NO_MIG, mig_profile,
            pod, namespace or None, container or None, job)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


class _BadLabel(Exception):
    """A label whose value the dataset cannot hold; _fetch names the series."""


SMALLINT_MAX = 32767  # gpu_index and mig_instance are SMALLINT columns


def _small_int(label: str | None, value: str | None, what: str) -> int | None:
    """An integer label (a GPU index, a MIG instance id): a number outside 0-32767 is no such id, and would
    not fit its column (-1 also stands for "no MIG instance" while grouping); text that is not a number is no
    label at all, as before."""
    n = _int(value)
    if n is not None and not 0 <= n <= SMALLINT_MAX:
        raise _BadLabel(f'{label}="{value}" is not a {what} (0-{SMALLINT_MAX})')
    return n


_SERIES_SCHEMA = {
    "sid": pl.Int64, "field": pl.Utf8, "prio": pl.Int32, "host": pl.Utf8, "gpu_uuid": pl.Utf8,
    "gpu_index": pl.Int32, "gpu_name": pl.Utf8, "mig_instance": pl.Int32, "mig_profile": pl.Utf8,
    "k8s_pod": pl.Utf8, "k8s_namespace": pl.Utf8, "container": pl.Utf8, "job_id": pl.Utf8,
}


# A stored fraction may exceed 1 (or go below 0) by this much, float rounding in the server's averages
# (100.0001 %), and is then clipped; anything further out is an error.
ROUNDING = 1e-5
_FLOAT32_MAX = 3.4028234663852886e38  # power_w and energy_j are FLOAT columns
# Field -> (lowest, highest, what it is) in the stored unit: what the columns can hold and a GPU can report.
# Memory stops at 2^61 bytes so that used + free (mem_total_bytes) still fits a BIGINT.
_LIMITS = {
    "power_w": (0.0, _FLOAT32_MAX, "power", "W"),
    "energy_j": (0.0, _FLOAT32_MAX, "energy", "J"),
    "fb_used": (0.0, 2.0**61, "framebuffer memory used", "bytes"),
    "fb_free": (0.0, 2.0**61, "framebuffer memory free", "bytes"),
    "temp_c": (-273.15, float(SMALLINT_MAX), "temperature", "°C"),
}


def _check_points(points: pl.DataFrame, raw: list[tuple[str, str, dict[str, str]]], mapping: Mapping,
                  first: datetime, last: datetime, url: str) -> None:
    """Refuse (never clip) what the server cannot mean: a timestamp outside the queried window (a range
    query answers on its grid only), a utilization above 100 % or below 0, a negative power, energy or memory,
    a temperature below absolute zero, or a value too large for its column (_LIMITS). The error names the
    metric, the series' labels and the first bad timestamp."""
    lo_t, hi_t = first.timestamp() - 1, last.timestamp() + 1
    bad = points.filter(~pl.col("ts").is_finite() | ~pl.col("ts").is_between(lo_t, hi_t))
    if bad.height:
        sid, ts, _ = bad.row(0)
        fld, name, labels = raw[sid]
        raise GpuauditError(
            f"malformed response from {url}: {_series_text(name, labels)} has a sample at {_when(ts)}, outside "
            f"the queried window {first:%Y-%m-%dT%H:%M:%SZ} .. {last:%Y-%m-%dT%H:%M:%SZ}; nothing imported")
    lows, highs = [], []
    for fld, _, _ in raw:
        factor = mapping.factor(fld)
        if fld in _FRACTIONS:
            lows.append(-ROUNDING / factor)
            highs.append((1 + ROUNDING) / factor)
        else:
            lo, hi, _, _ = _LIMITS.get(fld, (-math.inf, math.inf, "", ""))
            lows.append(lo / factor)
            highs.append(hi / factor)
    bounds = pl.DataFrame({"sid": range(len(raw)), "lo": lows, "hi": highs},
                          schema={"sid": pl.Int64, "lo": pl.Float64, "hi": pl.Float64})
    bad = (points.filter(pl.col("value").is_finite()).join(bounds, on="sid")
           .filter((pl.col("value") < pl.col("lo")) | (pl.col("value") > pl.col("hi"))).sort("ts"))
    if not bad.height:
        return
    sid, ts, value, _, _ = bad.row(0)
    fld, name, labels = raw[sid]
    if fld in _FRACTIONS:
        percent = mapping.metrics[fld].unit.lower() == "percent"
        why = ("negative utilization" if value < 0 else
               "utilization above 100 %" if percent else
               "utilization above 1 (the metric is mapped as a 0-1 fraction; for percent give "
               f"--metric {fld}={name}:percent)")
    else:
        lo, hi, what, unit = _LIMITS[fld]
        why = (f"{what} too large to store (above {hi:g} {unit})" if value > 0 else
               f"{what} below absolute zero" if lo < 0 else f"negative {what}")
    raise GpuauditError(f"bad value from {url}: {_series_text(name, labels)} = {value:g} at {_when(ts)}: {why}; "
                        "nothing imported")


def _series_text(name: str, labels: dict[str, str]) -> str:
    text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{text[:300]}{'...' if len(text) > 300 else ''}}}"


def _when(ts: float) -> str:
    try:
        return f"{datetime.fromtimestamp(ts, UTC):%Y-%m-%dT%H:%M:%SZ}"
    except (ValueError, OverflowError, OSError):
        return f"timestamp {ts:g}"


def _rows(series_rows: list[tuple[Any, ...]], points: pl.DataFrame, mapping: Mapping, step_s: int
          ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One chunk's answers (checked by _check_points) -> (sample rows, process rows) in the dataset's
    columns."""
    series = pl.DataFrame(series_rows, schema=_SERIES_SCHEMA, orient="row")
    key = list(KEY)
    long = (points.filter(pl.col("value").is_finite())
            .with_columns(pl.col("ts").round(0).cast(pl.Int64))
            .join(series, on="sid"))
    # Several series can describe one GPU at one time (a pod label changed mid-step, or a preferred and
    # a fallback metric): keep the most preferred name, average what is left.
    best = (long.group_by([*key, "ts", "field", "prio"]).agg(pl.col("value").mean())
            .sort("prio").group_by([*key, "ts", "field"]).agg(pl.col("value").first()))
    if best.height:
        wide = best.pivot(on="field", index=[*key, "ts"], values="value")
    else:
        wide = pl.DataFrame(schema={"host": pl.Utf8, "gpu_uuid": pl.Utf8, "mig_instance": pl.Int32,
                                    "ts": pl.Int64})
    wide = wide.with_columns([pl.lit(None, pl.Float64).alias(f) for f in
                              ("sm_active", "duty_cycle", "sm_occupancy", "tensor_active", "dram_active",
                               "mem_util", "fb_used", "fb_free", "power_w", "energy_j", "temp_c")
                              if f not in wide.columns])
    wide = wide.filter(pl.col("sm_active").is_not_null() | pl.col("duty_cycle").is_not_null())

    attrs = (long.group_by(key)
             .agg(pl.col("gpu_index").drop_nulls().first(), pl.col("gpu_name").drop_nulls().first(),
                  pl.col("mig_profile").drop_nulls().first()))
    fractions = [gpu_fraction(p, n) if m != _NO_MIG else 1.0
                 for m, p, n in attrs.select("mig_instance", "mig_profile", "gpu_name").iter_rows()]
    attrs = attrs.with_columns(pl.Series("gpu_fraction", fractions, pl.Float64))

    procs = (long.filter(pl.col("k8s_pod").is_not_null() | pl.col("job_id").is_not_null())
             .select(*key, "ts", "k8s_pod", "k8s_namespace", "container", "job_id").unique()
             .join(wide.select(*key, "ts"), on=[*key, "ts"], how="semi"))
    counts = procs.group_by([*key, "ts"]).agg(pl.len().alias("n_processes"))

    def scaled(fld: str) -> pl.Expr:
        factor = mapping.factor(fld) if fld in mapping.metrics else 1.0
        expr = pl.col(fld) * factor
        return expr.clip(0.0, 1.0) if fld in _FRACTIONS else expr  # only rounding is left to clip

    mib_used = scaled("fb_used")
    samples = (wide.join(attrs, on=key, how="left").join(counts, on=[*key, "ts"], how="left")
               .select(
                   _ts(),
                   pl.lit(float(step_s)).alias("interval_s"),
                   "host", "gpu_uuid", "gpu_index", "gpu_name",
                   _mig(), "mig_profile", "gpu_fraction",
                   *(scaled(f).alias(f) for f in _FRACTIONS),
                   mib_used.round(0).cast(pl.Int64).alias("mem_used_bytes"),
                   (mib_used + scaled("fb_free")).round(0).cast(pl.Int64).alias("mem_total_bytes"),
                   scaled("power_w").alias("power_w"),
                   scaled("energy_j").alias("energy_j"),
                   scaled("temp_c").round(0).cast(pl.Int16).alias("temp_c"),
                   # Pods/jobs on the GPU; without any, framebuffer memory in use shows an
                   # unattributed process holding it (a CUDA context alone takes a few hundred MiB).
                   pl.when(pl.col("n_processes").is_not_null()).then(pl.col("n_processes"))
                   .when(mib_used >= HELD_MEM_BYTES).then(1).otherwise(0).cast(pl.Int16)
                   .alias("n_processes"),
                   pl.when(pl.col("sm_active").is_not_null()).then(pl.lit(schema.SOURCE_PROM_DCGM))
                   .otherwise(pl.lit(schema.SOURCE_PROM_DCGM_UTIL)).alias("source"),
               ))
    processes = procs.select(_ts(), "host", "gpu_uuid", _mig(), pl.lit(None, pl.Int32).alias("pid"),
                             "job_id", "k8s_namespace", "k8s_pod", "container")
    return samples, processes


def _ts() -> pl.Expr:
    return pl.from_epoch(pl.col("ts"), time_unit="s").dt.replace_time_zone("UTC").alias("ts")


def _mig() -> pl.Expr:
    return (pl.when(pl.col("mig_instance") == _NO_MIG).then(None).otherwise(pl.col("mig_instance"))
            .cast(pl.Int16).alias("mig_instance"))


# ---------------------------------------------------------------------------------------------- write


@dataclass
class _Changes:
    """What an import will do to the dataset, prepared before any of it is visible: new versions of files
    written under `stage` (a private dataset root inside <root>/.staging, same relative paths), and files
    to remove."""

    stage: Path
    removals: list[Path] = field(default_factory=list)
    # (table, host, date) -> names of that partition's files the new importer file replaces: its compaction record
    replaced: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    # A new name per import: a name the importer used before may be listed by a compaction record (kept by
    # the store), which would hide a new file under that name.
    name: str = field(default_factory=lambda: f"{FILE_STEM}-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}-{uuid4().hex[:8]}")


STAGE_PREFIX = "import-"


def _write(root: Path, spill: Path, start: datetime, end: datetime, result: ImportResult) -> None:
    """Stage every partition's new files (in batches of whole dates: bounded memory, few writer calls; see
    _supersede for what is replaced), then publish them all at once. A failure while staging (a full disk,
    an I/O error) leaves the dataset untouched; see _publish for a failure while publishing."""
    samples_files = sorted(spill.glob("samples-*.parquet"))
    process_files = sorted(spill.glob("processes-*.parquet"))
    if not samples_files:
        return
    try:
        staging = root / store.STAGING
        staging.mkdir(parents=True, exist_ok=True)
        _remove_stale_stages(staging)
        changes = _Changes(Path(tempfile.mkdtemp(prefix=STAGE_PREFIX, dir=staging)))
    except OSError as e:
        raise GpuauditError(f"cannot write to {root}: {e.strerror or e}; nothing imported") from None
    try:
        # Under the dataset's compaction lock: a compaction merging the files this import rewrites would lose
        # or double rows.
        with store.compaction_lock(root):
            _stage_all(root, changes, samples_files, process_files, start, end, result)
            _stage_records(root, changes, result)
            _publish(root, changes)
    except GpuauditError as e:
        # DuckDB reports an I/O failure as JSON with the errno: say it the way the OSError branch does.
        errno = re.search(r'"errno"\s*:\s*"(\d+)"', str(e))
        what = f"cannot write to {root}: {os.strerror(int(errno.group(1)))}" if errno else str(e)
        raise GpuauditError(f"{what}; nothing imported (the dataset is as it was)") from None
    except OSError as e:
        raise GpuauditError(f"cannot write to {root}: {e.strerror or e}; nothing imported (the dataset is as it "
                            "was)") from None
    finally:
        shutil.rmtree(changes.stage, ignore_errors=True)


def _remove_stale_stages(staging: Path) -> None:
    """Stages of imports that crashed (a clean failure removes its own)."""
    now = time.time()
    for d in staging.glob(f"{STAGE_PREFIX}*"):
        try:
            if d.is_dir() and now - d.stat().st_mtime > STALE_STAGING_S:
                shutil.rmtree(d, ignore_errors=True)
        except OSError:
            pass


def _stage_all(root: Path, changes: _Changes, samples_files: list[Path], process_files: list[Path],
               start: datetime, end: datetime, result: ImportResult) -> None:
    samples = pl.scan_parquet(samples_files).with_columns(pl.col("ts").dt.date().alias("_d"))
    processes = (pl.scan_parquet(process_files).with_columns(pl.col("ts").dt.date().alias("_d"))
                 if process_files else None)
    per_date = samples.group_by("_d").len().sort("_d").collect()
    batch: list[Any] = []
    rows = 0
    for day, n in per_date.iter_rows():
        if batch and rows + n > WRITE_BATCH_ROWS:
            _write_batch(root, changes, samples, processes, batch, start, end, result)
            batch, rows = [], 0
        batch.append(day)
        rows += n
    _write_batch(root, changes, samples, processes, batch, start, end, result)


def _write_batch(root: Path, changes: _Changes, samples: pl.LazyFrame, processes: pl.LazyFrame | None,
                 days: list[Any], start: datetime, end: datetime, result: ImportResult) -> None:
    s_rows = samples.filter(pl.col("_d").is_in(days)).collect()
    p_rows = processes.filter(pl.col("_d").is_in(days)).collect() if processes is not None else None
    result.sample_rows += s_rows.height
    for src, n in s_rows.group_by("source").len().iter_rows():
        result.sources[src] = result.sources.get(src, 0) + n
    s_merged: list[pl.DataFrame] = []
    p_merged: list[pl.DataFrame] = []
    for (host, day), s_part in s_rows.partition_by("host", "_d", as_dict=True).items():
        host, date = str(host), day.isoformat()
        s_part = s_part.drop("_d")
        gpus = s_part.select(_gpu_key().alias("k"))["k"].unique().to_list()
        keep, replaced = _supersede(root, changes, schema.SAMPLES, host, date, gpus, start, end)
        result.replaced_rows += replaced
        merged = _concat(keep, s_part)
        if merged is not None:  # always: s_part has rows
            s_merged.append(merged)
        p_part = (p_rows.filter((pl.col("host") == host) & (pl.col("_d") == day)).drop("_d")
                  if p_rows is not None else None)
        keep, _ = _supersede(root, changes, schema.PROCESSES, host, date, gpus, start, end)
        merged = _concat(keep, p_part)
        if merged is not None:
            p_merged.append(merged)
            result.process_rows += p_part.height if p_part is not None else 0
    staged = store.write_table(changes.stage, schema.SAMPLES, pl.concat(s_merged, how="diagonal_relaxed"),
                               name=changes.name)
    if p_merged:
        staged += store.write_table(changes.stage, schema.PROCESSES, pl.concat(p_merged, how="diagonal_relaxed"),
                                    name=changes.name)
    result.files += [root / f.relative_to(changes.stage) for f in staged]


def _concat(a: pl.DataFrame | None, b: pl.DataFrame | None) -> pl.DataFrame | None:
    frames = [f for f in (a, b) if f is not None and f.height]
    if not frames:
        return None
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")


def _gpu_key() -> pl.Expr:
    """gpu_uuid|mig_instance: one GPU or MIG slice."""
    return pl.concat_str([pl.col("gpu_uuid"), pl.col("mig_instance").fill_null(_NO_MIG).cast(pl.Utf8)],
                         separator="|")


def _prom_rows(table: str) -> pl.Expr:
    # Imported process rows are the ones without a pid (the agent always knows the pid).
    if table == schema.SAMPLES:
        return pl.col("source").is_in(PROM_SOURCES)
    return pl.col("pid").is_null()


def _supersede(root: Path, changes: _Changes, table: str, host: str, day: str, gpus: list[str], start: datetime,
               end: datetime) -> tuple[pl.DataFrame | None, int]:
    """Drop the earlier rows of this partition that a new import replaces: Prometheus-sourced rows of the
    imported GPUs with ts in (start, end]. Returns (rows of the importer's own earlier files to keep, rows
    dropped); those files are listed for removal (the new file holds their kept rows). Other files holding
    such rows (the importer's file after a compaction merged it) get a new version without them staged in
    `changes` (or are listed for removal)."""
    part_dir = store.partition_dir(root, table, host, day)
    if not part_dir.is_dir():
        return None, 0
    if any(part_dir.glob(f"{store.JOURNAL_PREFIX}*")):
        # An interrupted compaction: finish it first (we hold the compaction lock), so no file we read is one
        # it hides.
        store.finish_journals(part_dir)
    keep_own: pl.DataFrame | None = None
    dropped = 0
    mask = (_prom_rows(table) & pl.col("ts").is_between(start, end, closed="right")
            & _gpu_key().is_in(gpus)).fill_null(False)
    for f in sorted(part_dir.glob("*.parquet")):
        try:
            # Other producers' files are only counted (column statistics make that cheap); read in
            # full only the importer's own file and files that hold rows to replace.
            if not _own(f) and not pl.scan_parquet(f).filter(mask).select(pl.len()).collect().item():
                continue
            old = pl.read_parquet(f)
        except Exception as e:  # a damaged file is the reader's business (skipped with a warning there)
            log.warning("import: leaving unreadable %s: %s", f, e)
            continue
        replaced = old.select(mask.alias("r"))["r"]
        n = int(replaced.sum())
        dropped += n
        rest = old.filter(~replaced).with_columns(pl.lit(host).alias("host"))
        if _own(f):
            keep_own = _concat(keep_own, rest)
            changes.removals.append(f)
            changes.replaced.setdefault((table, host, day), []).append(f.name)
        elif n:
            if rest.height:
                store.write_table(changes.stage, table, rest, name=f.stem)
            else:
                changes.removals.append(f)
                changes.replaced.setdefault((table, host, day), []).append(f.name)
    return keep_own, dropped


def _stage_records(root: Path, changes: _Changes, result: ImportResult) -> None:
    """Stage a compaction record in each partition where files are removed: {"new": this import's file,
    "old": [the removed files]}, the same record `gpuaudit compact` leaves (store.superseded reads both).
    Push ships it before the new file, then removes the old files from the target; the target's readers
    hide them as soon as the new file is there. A partition whose new file would hold no row (every process
    row replaced, none imported) gets an empty file, so that the record has a file to point to."""
    for (table, host, day), old in sorted(changes.replaced.items()):
        part = store.partition_dir(changes.stage, table, host, day)
        new = part / f"{changes.name}.parquet"
        if not new.exists():
            part.mkdir(parents=True, exist_ok=True)
            con = store.connect()
            try:
                writer.copy_to(con, schema.empty_select(table, stored_only=True), new)
            finally:
                con.close()
            atomic.fsync(new)
            result.files.append(root / new.relative_to(changes.stage))
        atomic.write_synced(part / journal.record_name(), journal.encode(new.name, sorted(old)))


def _own(f: Path) -> bool:
    """The importer's file: prometheus-<stamp>.parquet (an older gpuaudit wrote prometheus.parquet)."""
    return f.stem == FILE_STEM or f.stem.startswith(FILE_STEM + "-")


def _publish(root: Path, changes: _Changes) -> None:
    """Make the staged changes visible: each staged file renamed over its place in the dataset, each removal
    done, the previous version of every touched file kept aside (hard link, same filesystem) until all of
    it has succeeded. A failure on the way (a partition directory that cannot be created, an I/O error)
    puts every touched file back as it was, then raises: other readers may have seen the new files for
    that moment, but the dataset ends as it was before the import. Renames and links need no free space,
    so a full disk stops the import while staging, before this."""
    aside = changes.stage / ".previous"
    aside.mkdir()
    # Records first (new names, nothing to set aside): each hides its old files from the moment its new file
    # lands, so a crash before the removals below never shows a row twice (finish_journals then removes them).
    records = sorted(p for t in schema.TABLES for p in (changes.stage / t).rglob(f"{store.JOURNAL_PREFIX}*.json"))
    staged = records + sorted(p for t in schema.TABLES for p in (changes.stage / t).rglob("*.parquet"))
    done: list[tuple[Path, Path | None]] = []  # (dataset path, its previous version aside, or None if new)
    try:
        for i, new in enumerate(staged):
            final = root / new.relative_to(changes.stage)
            final.parent.mkdir(parents=True, exist_ok=True)
            previous = _set_aside(final, aside / f"{i}.parquet")
            done.append((final, previous))
            os.replace(new, final)
        for i, f in enumerate(changes.removals):
            previous = aside / f"removed-{i}.parquet"
            os.replace(f, previous)
            done.append((f, previous))
    except OSError:
        for final, previous in reversed(done):
            try:
                if previous is not None:
                    os.replace(previous, final)
                else:
                    final.unlink(missing_ok=True)
            except OSError as e:  # cannot happen short of the disk going away; say what is left where
                log.error("import: could not restore %s from %s: %s", final, previous, e)
        raise
    for d in sorted({f.parent for f, _ in done}):  # the renames are durable once their directories are synced
        with contextlib.suppress(OSError):
            atomic.fsync(d)


def _set_aside(final: Path, previous: Path) -> Path | None:
    """Keep `final`'s current version at `previous` without ever removing it from view (a hard link); where
    the filesystem has no hard links, move it (it is out of view until the new version lands)."""
    if not final.exists():
        return None
    try:
        os.link(final, previous)
    except OSError:
        os.replace(final, previous)
    return previous
