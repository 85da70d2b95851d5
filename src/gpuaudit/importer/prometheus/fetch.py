"""Phase 1 of an import: the queries of each chunk asked, answers checked (check.py) and converted to typed rows
(rows.py), spilled to a private directory; which exporter and metric names the server has (detection)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from gpuaudit.errors import GpuauditError
from gpuaudit.importer.promclient import PromClient, chunks
from gpuaudit.importer.prometheus.check import check_points, series_text
from gpuaudit.importer.prometheus.identity import (
    NO_MIG,
    BadLabel,
    SeriesIdentity,
    as_tuple,
    identify,
    int_label,
    node_label_hint,
    normalize_uuid,
)
from gpuaudit.importer.prometheus.mapping import Mapping
from gpuaudit.importer.prometheus.presets import AVG, COUNTER, INCREASE, LAST, PRESETS, Preset, all_metric_names, detect
from gpuaudit.importer.prometheus.result import ImportResult, Progress
from gpuaudit.importer.prometheus.rows import COUNT, COUNTER_PARTS, UTIL, ImportState, build_rows, final_hosts


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


def fetch(prom: PromClient, mapping: Mapping, start: datetime, end: datetime, step_s: int, max_points: int,
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
                    raise GpuauditError(f"bad label from {prom.t.url}: {series_text(name, item['metric'])}: {e}; "
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
        check_points(points, raw, mapping, first - step if i == 0 else first, last, prom.t.url)
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


_DISCOVERY_STEP_S = 300  # = Prometheus' lookback: every sample of the window is seen by one evaluation


def _detect(prom: PromClient, mapping: Mapping, start: datetime, end: datetime, result: ImportResult) -> Mapping:
    """Which known metric names hold samples in the window (`count by (__name__)`, evaluated every 5 minutes: the
    label-values API answers per storage block, not per series), and, unless --exporter was given, which
    exporter they come from. This is the import's first request: a server error stops it here. A server whose
    answer has no __name__ gets every name queried, the exporter not detected."""
    names = all_metric_names()
    sel = f'__name__=~"{"|".join(re.escape(n) for n in names)}"' + (f",{mapping.selector}" if mapping.selector else "")
    found: set[str] = set()
    unnamed = False
    # The grid is anchored on `end`: an evaluation exactly at the end sees the window's last five minutes (a
    # grid from `start` missed series that began after its last point, e.g. a window shorter than 5 minutes).
    n_steps = -(-int((end - start).total_seconds()) // _DISCOVERY_STEP_S) + 1
    anchor = end - timedelta(seconds=_DISCOVERY_STEP_S * n_steps)
    for first, last in chunks(anchor, end, _DISCOVERY_STEP_S):
        for item in prom.query_range(f"count by (__name__) ({{{sel}}})", first, last, _DISCOVERY_STEP_S):
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
