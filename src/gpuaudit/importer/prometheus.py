"""`gpuaudit import prometheus`: GPU exporter history (dcgm-exporter, jobstats, nvidia_gpu_exporter) from a
Prometheus-compatible server into the dataset. Which series become which rows: presets.py (the names),
identity.py (host, GPU and workload of a series), rows.py (the rules).

Two phases, so a failure never leaves a partial import behind:
1. fetch: every query of every chunk is answered and converted to typed rows, spilled to a private
   temporary directory (bounded memory for long windows). Any server or network error stops here,
   before the dataset is touched.
2. write: one store transaction (store/transaction.py) replaces the imported GPUs' Prometheus-sourced rows
   in the window: per (host, date) partition the importer's own file is replaced by a new one,
   `prometheus-<stamp>.parquet` (a new name each time): its previous rows minus those the new import
   replaces, plus the new rows. The replaced files are listed in a compaction record next to it, as
   `gpuaudit compact` leaves one, so that `gpuaudit push` removes them from a collection target and the
   target's readers hide them until then (without it the target kept both files: rows counted twice).

Idempotency: imported rows live on a step grid aligned to the epoch, and a new import replaces the
Prometheus-sourced rows of the same GPUs inside its window (also in files that compaction merged the
importer's file into). Importing the same or an overlapping window again therefore never duplicates rows.
"""

from __future__ import annotations

import logging
import math
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from gpuaudit import schema
from gpuaudit.errors import GpuauditError
from gpuaudit.importer.identity import (
    NO_MIG,
    SMALLINT_MAX,
    BadLabel,
    SeriesIdentity,
    as_tuple,
    identify,
    int_label,
    node_label_hint,
    normalize_uuid,
)
from gpuaudit.importer.mapping import AVG, COUNTER, INCREASE, LAST, Mapping
from gpuaudit.importer.presets import PRESETS, Preset, all_metric_names, detect
from gpuaudit.importer.promclient import MAX_POINTS, PromClient, Transport, chunks
from gpuaudit.importer.rows import COUNT, COUNTER_PARTS, FRACTIONS, UTIL, ImportState, build_rows, final_hosts
from gpuaudit.importer.timespec import align_down
from gpuaudit.store import transaction

log = logging.getLogger("gpuaudit.importer")

FILE_STEM = "prometheus"  # the importer's one file per partition is prometheus-<stamp>.parquet
PROM_SOURCES = schema.IMPORT_SOURCES  # rows a re-import replaces
WRITE_BATCH_ROWS = 2_000_000  # sample rows per writer call (whole dates; about 200 MB in memory)
_NO_MIG = NO_MIG
_FRACTIONS = FRACTIONS

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
    # What the summary tells (the layout found, and what could not be attributed):
    exporter: str = ""
    exporter_detected: bool = False
    present_names: set[str] | None = None  # metric names the server listed in the window (None: unknown)
    host_labels: dict[str, int] = field(default_factory=dict)  # host label -> series that took it
    pod_styles: dict[str, int] = field(default_factory=dict)  # pod label -> series that took it
    exporter_pods_skipped: int = 0
    suspect_hosts: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # host -> (why, label hint)
    merged_hosts: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # uuid -> (kept, all values)
    stored_hosts: set[str] = field(default_factory=set)  # the host values rows are stored under
    time_sliced: list[str] = field(default_factory=list)
    mig_gpus: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # MIG instances not imported -> why
    derived: dict[str, str] = field(default_factory=dict)  # MIG fractions derived from memory
    no_utilization: list[str] = field(default_factory=list)  # GPUs with series but no utilization series
    held_steps: int = 0
    held_attributed: int = 0
    energy_from_counter: int = 0  # GPUs
    energy_from_power: int = 0  # GPUs with power but no energy counter (the analysis estimates it)
    notes: list[str] = field(default_factory=list)


def query_for(name: str, kind: str, selector: str, step_s: int) -> str:
    """PromQL for one metric over each step. The range is one millisecond short of the step so a
    sample exactly on a step boundary counts in one interval only (Prometheus 2's ranges are closed)."""
    sel = f"{name}{{{selector}}}" if selector else name
    rng = f"{step_s * 1000 - 1}ms"
    fn = {AVG: "avg_over_time", LAST: "last_over_time", INCREASE: "increase", "max": "max_over_time",
          "min": "min_over_time", COUNT: "count_over_time"}[kind]
    return f"{fn}({sel}[{rng}])"


def plan_queries(mapping: Mapping, step_s: int, present: set[str] | None = None
                 ) -> list[tuple[str, int, str, str, str]]:
    """(field, prio, metric name, part, PromQL) for each query of a chunk; names not in `present` (when known:
    not on the server in the window) are not asked. An average is asked with its samples per step (series that
    split a step are weighted by them), a counter as its last, highest and lowest value per step."""
    queries: list[tuple[str, int, str, str, str]] = []
    for fld, spec in mapping.metrics.items():
        for prio, name in enumerate(spec.names):
            if present is not None and name not in present:
                continue
            parts = COUNTER_PARTS if spec.kind == COUNTER else ("", COUNT) if spec.kind == AVG else ("",)
            queries += [(fld, prio, name, part, query_for(name, part or spec.kind, mapping.selector, step_s))
                        for part in parts]
    return queries


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
            mapping = _fetch(prom, mapping, start, end, step_s, max_points, spill, result, progress)
            _write(Path(root), spill, start, end, result)
    finally:
        if owned:
            prom.pc.close()
    result.seconds = time.monotonic() - t0
    return result


# ---------------------------------------------------------------------------------------------- fetch


def _fetch(prom: PromClient, mapping: Mapping, start: datetime, end: datetime, step_s: int, max_points: int,
           spill: Path, result: ImportResult, progress: Progress | None) -> Mapping:
    """Query every chunk, convert, spill; returns the mapping used (the detected exporter's)."""
    mapping = _detect(prom, mapping, start, end, result)
    preset = PRESETS[mapping.exporter]
    queries = plan_queries(mapping, step_s, result.present_names)
    info = _info_series(prom, preset, mapping, start, end, step_s)
    windows = list(chunks(start, end, step_s, max_points))
    total = len(windows) * len(queries)
    exporter_pod = re.compile(mapping.exporter_pod) if mapping.exporter_pod else None
    name_re = re.compile(preset.mig_profile_in_name) if preset.mig_profile_in_name else None
    state = ImportState()
    step = timedelta(seconds=step_s)
    skeys: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}  # one id per series, across its queries
    for i, (first, last) in enumerate(windows):
        series_rows: list[tuple[Any, ...]] = []
        raw: list[tuple[str, str, dict[str, str]]] = []  # per series: (field, metric name, its labels)
        sids: list[int] = []
        tss: list[float] = []
        values: list[float] = []
        for fld, prio, name, part, q in queries:
            # A counter is differenced from the step before: the first chunk asks one step earlier too.
            q_first = first - step if part and i == 0 else first
            for item in prom.query_range(q, q_first, last, step_s):
                sid = len(series_rows)
                try:
                    ident = identify(item["metric"], mapping.labels, exporter_pod, uuid_prefix=preset.uuid_prefix,
                                     share_markers=preset.share_markers, mig_parent_label=preset.mig_parent_label,
                                     mig_profile_in_name=name_re)
                except BadLabel as e:
                    raise GpuauditError(f"bad label from {prom.t.url}: {_series_text(name, item['metric'])}: {e}; "
                                        "nothing imported") from None
                _note_identity(result, ident, item["metric"], mapping)
                skey = skeys.setdefault((name, tuple(sorted(item["metric"].items()))), len(skeys))
                series_rows.append((sid, fld, prio, part, skey, *as_tuple(ident)))
                raw.append((COUNT if part == COUNT else fld, name, item["metric"]))
                n = _append_points(item["values"], tss, values, prom.t.url, name)
                sids.extend([sid] * n)
            result.queries += 1
            if progress:
                progress(result.queries, total)
        result.series += len(series_rows)
        points = pl.DataFrame({"sid": sids, "ts": tss, "value": values},
                              schema={"sid": pl.Int64, "ts": pl.Float64, "value": pl.Float64})
        _check_points(points, raw, mapping, first - step if i == 0 else first, last, prom.t.url)
        samples, processes = build_rows(series_rows, points, mapping, step_s, state, info, preset.share_fields)
        if samples.height:
            samples.write_parquet(spill / f"samples-{i:06d}.parquet")
        if processes.height:
            processes.write_parquet(spill / f"processes-{i:06d}.parquet")
    if not state.imported:
        tried = ", ".join(n for f in UTIL if f in mapping.metrics for n in mapping.metrics[f].names)
        sel = f" matching {{{mapping.selector}}}" if mapping.selector else ""
        raise GpuauditError(
            f"no GPU utilization series{sel} between {start:%Y-%m-%dT%H:%M:%SZ} and {end:%Y-%m-%dT%H:%M:%SZ} "
            f"on {prom.t.url} (tried {tried}); nothing imported. Check the window, --selector, --exporter or "
            "--metric")
    _one_host_everywhere(spill, state, result)
    _summarize(state, result, mapping)
    return mapping


DISCOVERY_STEP_S = 300  # = Prometheus' lookback: every sample of the window is seen by one evaluation


def _detect(prom: PromClient, mapping: Mapping, start: datetime, end: datetime, result: ImportResult) -> Mapping:
    """Which known metric names hold samples in the window (`count by (__name__)`, evaluated every 5 minutes: the
    label-values API answers per storage block, not per series), and, unless --exporter was given, which
    exporter they come from. This is the import's first request: a server error stops it here. A server whose
    answer has no __name__ gets every name queried, the exporter not detected."""
    names = all_metric_names()
    sel = f'__name__=~"{"|".join(re.escape(n) for n in names)}"' + (f",{mapping.selector}" if mapping.selector else "")
    found: set[str] = set()
    unnamed = False
    for first, last in chunks(start - timedelta(seconds=DISCOVERY_STEP_S), end, DISCOVERY_STEP_S):
        for item in prom.query_range(f"count by (__name__) ({{{sel}}})", first, last, DISCOVERY_STEP_S):
            name = item["metric"].get("__name__")
            if name:
                found.add(name)
            else:
                unnamed = True
    if unnamed and not found:
        result.exporter, result.exporter_detected = mapping.exporter, False
        result.notes.append("the server's answers carry no metric names: every name of the mapping was queried and "
                            "the exporter not detected")
        return mapping
    detection = detect(found)
    if mapping.detected:
        best = detection.best()
        if best and best != mapping.exporter:
            mapping = mapping.with_exporter(best)
    result.exporter, result.exporter_detected = mapping.exporter, mapping.detected
    others = detection.others(mapping.exporter)
    if others:
        result.notes.append(f"series of other exporters are there too ({', '.join(others)}): import them with "
                            f"--exporter {others[0]}")
    # Names the user added with --metric are queried whether or not the listing knew them.
    listed = set(names)
    result.present_names = found | {n for s in mapping.metrics.values() for n in s.names if n not in listed}
    return mapping


def _info_series(prom: PromClient, preset: Preset, mapping: Mapping, start: datetime, end: datetime,
                 step_s: int) -> dict[str, dict[Any, Any]]:
    """Dataset field -> {key: value} from the preset's info series (nvidia_smi_gpu_info: name and index by
    UUID; nvidia_smi_mig_info: profile by UUID and GPU instance), over the whole window."""
    out: dict[str, dict[Any, Any]] = {}
    window_s = int((end - start).total_seconds()) + step_s
    for inf in preset.info:
        sel = f"{inf.metric}{{{mapping.selector}}}" if mapping.selector else inf.metric
        for item in prom.query(f"last_over_time({sel}[{window_s}s])", end):
            labels = item["metric"]
            uuid = labels.get(inf.key["gpu_uuid"])
            if not uuid:
                continue
            key: Any = normalize_uuid(uuid, preset.uuid_prefix)
            if "mig_instance" in inf.key:
                gi = int_label(labels.get(inf.key["mig_instance"]))
                if gi is None:
                    continue
                key = (key, gi)
            for fld, label in inf.fields.items():
                if labels.get(label):
                    out.setdefault(fld, {})[key] = labels[label]
    return out


def _note_identity(result: ImportResult, ident: SeriesIdentity, labels: dict[str, str], mapping: Mapping) -> None:
    """What the summary says about the layout: host labels, pod styles, exporter pods skipped, suspect hosts."""
    if ident.host_label:
        result.host_labels[ident.host_label] = result.host_labels.get(ident.host_label, 0) + 1
    if ident.pod_style:
        result.pod_styles[ident.pod_style] = result.pod_styles.get(ident.pod_style, 0) + 1
    result.exporter_pods_skipped += ident.exporter_pods_skipped
    if ident.host_suspect and ident.host not in result.suspect_hosts:
        result.suspect_hosts[ident.host] = (ident.host_suspect, node_label_hint(labels, mapping.labels["host"]))


def _one_host_everywhere(spill: Path, state: ImportState, result: ImportResult) -> None:
    """Chunks chose a host per UUID from what they saw; over the whole import each UUID gets one (final_hosts),
    written back into the spilled rows before anything is staged."""
    final = final_hosts(state)
    for uuid, votes in sorted(state.host_votes.items()):
        if len(votes) > 1:
            result.merged_hosts[uuid] = (final[uuid], sorted(votes))
    if not result.merged_hosts:
        return
    table = pl.DataFrame({"gpu_uuid": list(final), "_h": list(final.values())})
    for f in sorted(spill.glob("*.parquet")):
        df = pl.read_parquet(f)
        df = (df.join(table, on="gpu_uuid", how="left")
              .with_columns(pl.coalesce("_h", "host").alias("host")).drop("_h"))
        df.write_parquet(f)


def _summarize(state: ImportState, result: ImportResult, mapping: Mapping) -> None:
    hosts = final_hosts(state)
    keys = state.imported
    result.gpus = len(keys)
    result.stored_hosts = {hosts.get(u, u) for u, _ in keys}
    result.hosts = len(result.stored_hosts)
    result.held_steps, result.held_attributed = state.held_steps, state.held_attributed
    result.time_sliced = sorted(state.time_sliced)
    result.mig_gpus = sorted(state.mig_gpus)
    result.refused = {f"{u} MIG {m} on {hosts.get(u, h)}": why for (h, u, m), why in sorted(state.refused.items())}
    result.derived = {f"{u} MIG {m}": how for (_, u, m), how in sorted(state.derived.items())}
    util = set(UTIL)
    with_rows = {u for u, _ in keys}
    for (uuid, mig), fields in sorted(state.seen.items()):
        if (uuid, mig) in keys or any((uuid, mig) == (u, m) for (_, u, m) in state.refused):
            continue
        if mig == NO_MIG and uuid in with_rows:
            continue  # a MIG GPU's device-level series (power): its instances have rows
        if not fields & util:
            result.no_utilization.append(f"{uuid}{f' MIG {mig}' if mig != NO_MIG else ''} on "
                                         f"{hosts.get(uuid, '?')} ({', '.join(sorted(fields))})")
    result.energy_from_counter = len(state.energy_gpus)
    result.energy_from_power = len(state.power_gpus - state.energy_gpus)


def _append_points(raw: list[Any], tss: list[float], values: list[float], url: str, name: str) -> int:
    try:
        for t, v in raw:
            tss.append(float(t))
            values.append(float(v))
    except (TypeError, ValueError):
        raise GpuauditError(f"malformed response from {url}: bad sample in {name} "
                            "(expected [timestamp, \"value\"] pairs)") from None
    return len(raw)


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
    "mem_total": (0.0, 2.0**61, "framebuffer memory total", "bytes"),
    "temp_c": (-273.15, float(SMALLINT_MAX), "temperature", "°C"),
}


def _check_points(points: pl.DataFrame, raw: list[tuple[str, str, dict[str, str]]], mapping: Mapping,
                  first: datetime, last: datetime, url: str) -> None:
    """Refuse (never clip) what the server cannot mean: a timestamp outside the queried window (a range
    query answers on its grid only), a utilization above 100 % or below 0, a negative power, energy or memory,
    a temperature below absolute zero, or a value too large for its column (_LIMITS). The error names the
    metric, the series' labels and the first bad timestamp."""
    counts = [i for i, (fld, name, _) in enumerate(raw) if fld == COUNT]
    if counts:
        points = points.filter(~pl.col("sid").is_in(counts))
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
        if fld == COUNT:  # samples per step: left out above
            lows.append(-math.inf)
            highs.append(math.inf)
            continue
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


# ---------------------------------------------------------------------------------------------- write


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
        if batch and rows + n > WRITE_BATCH_ROWS:
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
    return pl.concat_str([pl.col("gpu_uuid"), pl.col("mig_instance").fill_null(_NO_MIG).cast(pl.Utf8)],
                         separator="|")


def _prom_rows(table: str) -> pl.Expr:
    """The rows a re-import replaces are Prometheus-sourced; imported process rows are the ones without a pid
    (the agent always knows the pid)."""
    if table == schema.SAMPLES:
        return pl.col("source").is_in(PROM_SOURCES)
    return pl.col("pid").is_null()


# ---------------------------------------------------------------------------------------------- summary


def summary(result: ImportResult) -> tuple[list[str], list[str]]:
    """(lines for stdout, notes for stderr): what was imported, the layout detected, and what could not be
    attributed or measured. The CLI prints them; tests read them."""
    preset = PRESETS.get(result.exporter)
    how = "detected" if result.exporter_detected else "given with --exporter"
    parts = [f"exporter {result.exporter} ({preset.title if preset else '?'}, {how})"]
    if result.host_labels:
        parts.append("hosts from " + ", ".join(f"{k} ({v} series)" for k, v in sorted(result.host_labels.items())))
    if result.pod_styles:
        parts.append("pods from " + ", ".join(f"{k} ({v} series)" for k, v in sorted(result.pod_styles.items())))
    if result.exporter_pods_skipped:
        parts.append(f"{result.exporter_pods_skipped} exporter-pod label sets skipped")
    if result.time_sliced:
        parts.append(f"time-sliced GPUs (per-pod shares as process rows): {len(result.time_sliced)}")
    if result.mig_gpus:
        parts.append(f"MIG GPUs: {len(result.mig_gpus)} (power and energy split over their instances, once)")
    out = ["layout: " + "; ".join(parts)]
    if result.held_steps:
        rest = result.held_steps - result.held_attributed
        out.append(f"held steps: {result.held_attributed} of {result.held_steps} got a pod or job"
                   + (f" ({rest} held by framebuffer memory only: no pod or job label)" if rest else ""))
    energy = [f"from the counter on {result.energy_from_counter} GPUs"] if result.energy_from_counter else []
    if result.energy_from_power:
        energy.append(f"estimated from power on {result.energy_from_power} GPUs (no energy counter)")
    if energy:
        out.append("energy: " + "; ".join(energy))
    notes: list[str] = []
    engine = sum(n for s, n in result.sources.items() if s in schema.ENGINE_ACTIVE_SOURCES)
    if engine:
        notes.append(f"{engine} rows measure engine-active, not SM activity (GR_ENGINE_ACTIVE: the time any SM had "
                     "work, an upper bound). To measure SM activity, add this line to the dcgm-exporter counters "
                     f"CSV: {schema.DCGM_SM_ACTIVE_CSV_LINE}")
    util_only = sum(n for s, n in result.sources.items() if s.endswith("-util"))
    if util_only:
        notes.append(f"{util_only} rows have no SM activity or engine-active metric: their duty cycle is an upper "
                     "bound on SM activity")
    for uuid, (kept, values) in sorted(result.merged_hosts.items()):
        notes.append(f"{uuid} was reported under {len(values)} host values ({', '.join(values)}): one GPU, "
                     f"stored on {kept}")
    for host, (why, hint) in sorted(result.suspect_hosts.items()):
        if host not in result.stored_hosts:
            continue  # a value no GPU is stored under (another label won)
        fix = (f"give --label host={hint} (that label seems to hold the node name)" if hint else
               "relabel the node name onto the series (__meta_kubernetes_pod_node_name -> node) or give "
               "--label host=LABEL")
        notes.append(f"host value {host} looks like {'an' if why[0] in 'aeiou' else 'a'} {why} rather than a node "
                     f"name: {fix}")
    for what, why in result.refused.items():
        notes.append(f"{what} not imported: {why}")
    for what, how in result.derived.items():
        notes.append(f"{what}: no GPU_I_PROFILE label; fraction derived: {how}")
    for what in result.no_utilization:
        notes.append(f"{what} has series but no utilization series: not imported")
    notes += result.notes
    return out, notes
