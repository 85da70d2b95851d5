"""One chunk of Prometheus answers -> sample and process rows in the dataset's columns.

Rules (each one a defect real deployments showed, see docs/importer.md):
- A GPU is its UUID: one host per UUID (the preferred host label, then the latest value), whatever the
  exporter pod or its IP was at the time.
- Several series for one GPU, field and step (a preferred and a fallback metric name, a pod label that changed
  mid-step, an exporter rollout): the most preferred name counts; averages are averaged, a last value is the
  last value of the last series (the one still reporting after the step, else the one that started later).
- Time-slicing (dcgm-exporter 4.5+): where a device-level series exists, the per-pod series of the same field
  (marked vgpu) are the pods' shares: they become process rows (sm_util, mem_used_bytes), never the
  GPU's figures.
- Power and energy belong to the physical GPU: each MIG instance's series repeats the GPU's, so the GPU's value
  (from a GPU-level series where there is one) is split over the instances present by their fractions, and
  counted once.
- Energy: the counter's last and highest value per step, differenced from one step with a value to the next
  (spanning steps without samples: a scrape gap, or a scrape interval at or above the step), a reset handled
  like Prometheus does (the value after it is the energy since it).
- A MIG instance without a profile on any of its series: the fraction from its memory size where that is
  unambiguous, else it is not imported (and named), never counted as a whole GPU.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from gpuaudit import schema
from gpuaudit.importer.prometheus.identity import NO_MIG
from gpuaudit.importer.prometheus.mapping import Mapping, gpu_fraction
from gpuaudit.importer.prometheus.presets import COUNTER, LAST

KEY = ["host", "gpu_uuid", "mig_instance"]
_HELD_MEM_BYTES = 256 * schema.MIB  # framebuffer use that counts as a process holding the GPU
FRACTIONS = ("sm_active", "gr_engine_active", "duty_cycle", "sm_occupancy", "tensor_active", "dram_active",
             "mem_util")
UTIL = ("sm_active", "gr_engine_active", "duty_cycle")
_GAUGES = (*FRACTIONS, "fb_used", "fb_free", "mem_total", "temp_c")
MIB = schema.MIB
COUNT = "count"  # the part of an AVG metric that says how many samples each step's average holds

_SERIES_SCHEMA = {
    "sid": pl.Int64, "field": pl.Utf8, "prio": pl.Int32, "part": pl.Utf8, "skey": pl.Int64,
    "host": pl.Utf8, "host_rank": pl.Int32, "gpu_uuid": pl.Utf8, "gpu_index": pl.Int32, "gpu_name": pl.Utf8,
    "mig_instance": pl.Int32, "mig_profile": pl.Utf8, "mig_device": pl.Boolean, "parent_ref": pl.Utf8,
    "k8s_pod": pl.Utf8, "k8s_namespace": pl.Utf8, "container": pl.Utf8, "pod_uid": pl.Utf8, "job_id": pl.Utf8,
    "user": pl.Utf8,
    "share": pl.Boolean,
}


@dataclass
class ImportState:
    """What one chunk leaves for the next, and what the summary reports."""

    parents: dict[tuple[str, str], tuple[str, str | None]] = field(default_factory=dict)  # (host, ref) -> GPU
    host_votes: dict[str, dict[str, tuple[int, float]]] = field(default_factory=dict)  # uuid -> host -> (rank, last)
    profiles: dict[tuple[str, int], str] = field(default_factory=dict)  # (uuid, mig) -> profile
    counter: dict[str, tuple[float, float]] = field(default_factory=dict)  # uuid -> (ts, last counter value)
    refused: dict[tuple[str, str, int], str] = field(default_factory=dict)  # (host, uuid, mig) -> why
    derived: dict[tuple[str, str, int], str] = field(default_factory=dict)  # profile derived from memory
    seen: dict[tuple[str, int], set[str]] = field(default_factory=dict)  # (uuid, mig) -> fields with series
    imported: set[tuple[str, int]] = field(default_factory=set)
    time_sliced: set[str] = field(default_factory=set)
    mig_gpus: set[str] = field(default_factory=set)
    energy_gpus: set[str] = field(default_factory=set)
    power_gpus: set[str] = field(default_factory=set)
    held_steps: int = 0
    held_attributed: int = 0


# MIG profiles from memory alone: the share of the GPU's memory in eighths (fourths on a 4-slice A30) -> compute
# slices, only where no other profile has that memory share (1g.10gb and 7g.80gb on an 80 GB GPU; 3g.40gb
# and 4g.40gb share theirs, and so do 1g.20gb and 2g.20gb).
_MEMORY_SLICES = {8: {1: 1, 8: 7}, 4: {1: 1, 2: 2, 4: 4}}
_KNOWN_MEMORY_GB = {"A30": 24}


def _gpu_memory_gb(name: str | None) -> float | None:
    if not name:
        return None
    m = re.search(r"(\d+)\s*GB", name, re.I)
    if m:
        return float(m.group(1))
    return next((gb for model, gb in _KNOWN_MEMORY_GB.items() if model in name), None)


def _profile_from_memory(mem_bytes: float | None, gpu_name: str | None) -> tuple[float | None, str]:
    """(fraction, how) for a MIG instance known only by its memory size; fraction None: refused (why)."""
    gb = _gpu_memory_gb(gpu_name)
    if not mem_bytes or gb is None:
        return None, f"no profile and no {'memory size' if gb else 'GPU memory size from the model name'}"
    four = gpu_name is not None and "A30" in gpu_name
    parts = 4 if four else 8
    share = round(mem_bytes / (gb * 1024**3) * parts)
    slices = _MEMORY_SLICES[parts].get(share)
    total = 4 if four else 7
    if slices is None:
        return None, (f"no GPU_I_PROFILE on any of its series, and its memory ({mem_bytes / 1024**3:.0f} GB of "
                      f"{gb:.0f}) fits more than one profile: not guessed")
    return slices / total, f"{slices}g from {mem_bytes / 1024**3:.0f} GB of memory"


def build_rows(series_rows: list[tuple[Any, ...]], points: pl.DataFrame, mapping: Mapping, step_s: int,
               state: ImportState, info: dict[str, dict[Any, Any]], share_fields: tuple[str, ...]
               ) -> tuple[pl.DataFrame, pl.DataFrame]:
    factor = _factor_of(mapping)
    long = _long_points(series_rows, points, step_s, state)
    long, shares = _split_shares(long, share_fields, state)
    best, power = _best_values(long, mapping)
    wide = _gauges_wide(best, factor)
    wide = _with_gpu_figures(long, wide, power, state, info, factor)
    procs = _processes(long, shares, wide, factor)
    wide = _with_process_counts(wide, procs, state)
    return _sample_rows(wide, mapping, step_s, factor), _process_rows(procs)


def _factor_of(mapping: Mapping) -> Callable[[str], float]:
    """A field's unit factor: the mapping's where it maps the field, else 1."""
    def factor(fld: str) -> float:
        return mapping.factor(fld) if fld in mapping.metrics else 1.0

    return factor


def _long_points(series_rows: list[tuple[Any, ...]], points: pl.DataFrame, step_s: int, state: ImportState
                 ) -> pl.DataFrame:
    """One row per finite point with its series' labels (each GPU under one host) and its average's weight `n`;
    records in `state.seen` which fields each GPU/slice has series for."""
    series = pl.DataFrame(series_rows, schema=_SERIES_SCHEMA, orient="row")
    series = _mig_parents(series, state)
    points = points.filter(pl.col("value").is_finite()).with_columns(pl.col("ts").round(0).cast(pl.Int64))
    # Which of several series was the last one in a step: the one with a value in the next step too, else the
    # one without a value in the step before (it started in this one).
    points = points.sort("sid", "ts").with_columns(
        (pl.col("ts").shift(-1).over("sid") == pl.col("ts") + step_s).fill_null(False).alias("has_next"),
        (pl.col("ts").shift(1).over("sid") == pl.col("ts") - step_s).fill_null(False).alias("has_prev"))
    span = points.group_by("sid").agg(pl.col("ts").min().alias("first_s"), pl.col("ts").max().alias("last_s"))
    series = _one_host_per_gpu(series.join(span, on="sid", how="inner"), state)
    long = points.join(series, on="sid")
    # An average's weight: its series' samples in the step (count_over_time); 1 where the server sent none.
    counts = long.filter(pl.col("part") == COUNT).select("skey", "ts", pl.col("value").alias("n"))
    long = (long.filter(pl.col("part") != COUNT).join(counts, on=["skey", "ts"], how="left")
            .with_columns(pl.when(pl.col("n") > 0).then(pl.col("n")).otherwise(1.0).alias("n")))
    for uuid, mig, fld in long.select("gpu_uuid", "mig_instance", "field").unique().iter_rows():
        state.seen.setdefault((uuid, mig), set()).add(fld)
    return long


def _split_shares(long: pl.DataFrame, share_fields: tuple[str, ...], state: ImportState
                  ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Time-slicing: per-pod shares where the device-level series of the field exists at that step leave
    `long` (they are the pods' figures, not the GPU's). Returns (long without them, the shares)."""
    shares = long.clear()
    if share_fields:
        in_share = pl.col("field").is_in(list(share_fields)) & (pl.col("part") == "")
        device = long.filter(in_share & pl.col("k8s_pod").is_null()).select(*KEY, "ts", "field").unique()
        shares = long.filter(in_share & pl.col("share")).join(device, on=[*KEY, "ts", "field"], how="semi")
        if shares.height:
            long = long.join(shares.select("sid", "ts"), on=["sid", "ts"], how="anti")
            state.time_sliced.update(shares["gpu_uuid"].unique().to_list())
    return long, shares


def _best_values(long: pl.DataFrame, mapping: Mapping) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One gauge value per GPU/slice, step and field from its most preferred metric name (averages weighted,
    a last value from the newest series), and the physical GPU's power per step. Returns (values without
    power, power)."""
    lasts = [f for f, s in mapping.metrics.items() if s.kind == LAST]
    gauge = long.filter(pl.col("part") == "")
    gauge = gauge.filter(pl.col("prio") == pl.col("prio").min().over([*KEY, "ts", "field"]))
    newest = [pl.col("has_next"), ~pl.col("has_prev")]
    best = pl.concat([
        gauge.filter(~pl.col("field").is_in(lasts)).group_by([*KEY, "ts", "field"])
        .agg(((pl.col("value") * pl.col("n")).sum() / pl.col("n").sum()).alias("value")),
        gauge.filter(pl.col("field").is_in(lasts)).group_by([*KEY, "ts", "field"])
        .agg(pl.col("value").sort_by(newest, descending=[True, True]).first()),
    ])
    power = (best.filter(pl.col("field") == "power_w").group_by("gpu_uuid", "ts")
             .agg(pl.coalesce(pl.col("value").filter(pl.col("mig_instance") == NO_MIG).mean(),
                              pl.col("value").mean()).alias("gpu_power")))
    return best.filter(pl.col("field") != "power_w"), power


def _gauges_wide(best: pl.DataFrame, factor: Callable[[str], float]) -> pl.DataFrame:
    """One row per GPU/slice and step with a utilization figure, a column per gauge, and its memory in bytes
    (`_used_b`, `_total_b`)."""
    if best.height:
        wide = best.pivot(on="field", index=[*KEY, "ts"], values="value")
    else:
        wide = pl.DataFrame(schema={"host": pl.Utf8, "gpu_uuid": pl.Utf8, "mig_instance": pl.Int32,
                                    "ts": pl.Int64})
    wide = wide.with_columns([pl.lit(None, pl.Float64).alias(f) for f in _GAUGES if f not in wide.columns])
    wide = wide.filter(pl.any_horizontal(pl.col(f).is_not_null() for f in UTIL))
    used_b = pl.col("fb_used") * factor("fb_used")
    total_b = pl.coalesce(pl.col("mem_total") * factor("mem_total"), used_b + pl.col("fb_free") * factor("fb_free"))
    return wide.with_columns(used_b.alias("_used_b"), total_b.alias("_total_b"))


def _with_gpu_figures(long: pl.DataFrame, wide: pl.DataFrame, power: pl.DataFrame, state: ImportState,
                      info: dict[str, dict[Any, Any]], factor: Callable[[str], float]) -> pl.DataFrame:
    """Add each GPU/slice's attributes and its part of the physical GPU's power and energy (split over the
    MIG instances by their fractions, counted once); records what was imported in `state`."""
    wide, attrs = _attributes(long, wide, state, info)
    energy = _energy(long, state, factor("energy_j"))
    wide = (wide.join(attrs, on=KEY, how="left").join(power, on=["gpu_uuid", "ts"], how="left")
            .join(energy, on=["gpu_uuid", "ts"], how="left"))
    slice_sum = (pl.when(pl.col("mig_instance") != NO_MIG).then(pl.col("gpu_fraction")).otherwise(0.0)
                 .sum().over("gpu_uuid", "ts"))
    share = pl.when(pl.col("mig_instance") == NO_MIG).then(1.0).otherwise(pl.col("gpu_fraction") / slice_sum)
    wide = wide.with_columns((pl.col("gpu_power") * factor("power_w") * share).alias("_power_w"),
                             (pl.col("gpu_energy_j") * share).alias("_energy_j"))
    state.energy_gpus.update(wide.filter(pl.col("_energy_j").is_not_null())["gpu_uuid"].unique().to_list())
    state.power_gpus.update(wide.filter(pl.col("_power_w").is_not_null())["gpu_uuid"].unique().to_list())
    state.mig_gpus.update(wide.filter(pl.col("mig_instance") != NO_MIG)["gpu_uuid"].unique().to_list())
    state.imported.update(wide.select("gpu_uuid", "mig_instance").unique().iter_rows())
    return wide


def _with_process_counts(wide: pl.DataFrame, procs: pl.DataFrame, state: ImportState) -> pl.DataFrame:
    """Add `n_processes` (null where no pod or job was seen) and count the steps a GPU was held."""
    counts = procs.group_by([*KEY, "ts"]).agg(pl.len().alias("n_processes"))
    wide = wide.join(counts, on=[*KEY, "ts"], how="left")
    held = (pl.col("n_processes").is_not_null()) | (pl.col("_used_b") >= _HELD_MEM_BYTES)
    state.held_steps += wide.filter(held).height
    state.held_attributed += wide.filter(pl.col("n_processes").is_not_null()).height
    return wide


def _sample_rows(wide: pl.DataFrame, mapping: Mapping, step_s: int, factor: Callable[[str], float]
                 ) -> pl.DataFrame:
    def scaled(fld: str) -> pl.Expr:
        return (pl.col(fld) * factor(fld)).clip(0.0, 1.0)  # only rounding is left to clip (checked before)

    measured = (pl.when(pl.col("sm_active").is_not_null()).then(pl.lit(schema.MEASURED_SM))
                .when(pl.col("gr_engine_active").is_not_null()).then(pl.lit(schema.MEASURED_ENGINE))
                .otherwise(pl.lit(schema.MEASURED_DUTY)))
    sources = {m: schema.import_source(mapping.exporter, m)
               for m in (schema.MEASURED_SM, schema.MEASURED_ENGINE, schema.MEASURED_DUTY)}
    return wide.select(
        _ts(),
        pl.lit(float(step_s)).alias("interval_s"),
        "host", "gpu_uuid", "gpu_index", "gpu_name",
        _mig(), "mig_profile", "gpu_fraction",
        *(scaled(f).alias(f) for f in FRACTIONS),
        pl.col("_used_b").round(0).cast(pl.Int64).alias("mem_used_bytes"),
        pl.col("_total_b").round(0).cast(pl.Int64).alias("mem_total_bytes"),
        pl.col("_power_w").alias("power_w"),
        pl.col("_energy_j").alias("energy_j"),
        (pl.col("temp_c") * factor("temp_c")).round(0).cast(pl.Int16).alias("temp_c"),
        # Pods/jobs on the GPU; without any, framebuffer memory in use shows an unattributed process holding
        # it (a CUDA context alone takes a few hundred MiB).
        pl.when(pl.col("n_processes").is_not_null()).then(pl.col("n_processes"))
        .when(pl.col("_used_b") >= _HELD_MEM_BYTES).then(1).otherwise(0).cast(pl.Int16).alias("n_processes"),
        measured.replace_strict(sources, return_dtype=pl.Utf8).alias("source"),
    )


def _process_rows(procs: pl.DataFrame) -> pl.DataFrame:
    return procs.select(_ts(), "host", "gpu_uuid", _mig(), pl.lit(None, pl.Int32).alias("pid"), "user",
                        "job_id", "k8s_namespace", "k8s_pod", "pod_uid", "container", "mem_used_bytes", "sm_util")


def _mig_parents(series: pl.DataFrame, state: ImportState) -> pl.DataFrame:
    """MIG devices named by their own UUID (jobstats: MIG-...) are stored under their parent GPU: the series
    on the same host with the same parent label (ordinal) and no MIG instance."""
    for host, ref, uuid, name in (series.filter(~pl.col("mig_device") & (pl.col("mig_instance") == NO_MIG)
                                                & pl.col("parent_ref").is_not_null())
                                  .select("host", "parent_ref", "gpu_uuid", "gpu_name").unique().iter_rows()):
        state.parents[(host, ref)] = (uuid, name)
    if not series["mig_device"].any() or not state.parents:
        return series
    parents = pl.DataFrame([(h, r, u, n) for (h, r), (u, n) in state.parents.items()], orient="row",
                           schema={"host": pl.Utf8, "parent_ref": pl.Utf8, "_puuid": pl.Utf8, "_pname": pl.Utf8})
    dev = pl.col("mig_device") & pl.col("_puuid").is_not_null()
    return (series.join(parents, on=["host", "parent_ref"], how="left")
            .with_columns(pl.when(dev).then(pl.col("_puuid")).otherwise(pl.col("gpu_uuid")).alias("gpu_uuid"),
                          pl.when(dev).then(pl.coalesce("_pname", "gpu_name")).otherwise(pl.col("gpu_name"))
                          .alias("gpu_name"))
            .drop("_puuid", "_pname"))


def _one_host_per_gpu(series: pl.DataFrame, state: ImportState) -> pl.DataFrame:
    """Every series of a UUID under one host: the best-ranked host label, then the latest value."""
    votes = series.group_by("gpu_uuid", "host", "host_rank").agg(pl.col("last_s").max())
    for uuid, host, rank, last in votes.iter_rows():
        old = state.host_votes.setdefault(uuid, {}).get(host)
        if old is None or (rank, -last) < (old[0], -old[1]):
            state.host_votes[uuid][host] = (rank, last)
    chosen = (votes.sort(["host_rank", "last_s"], descending=[False, True])
              .group_by("gpu_uuid", maintain_order=True).first().select("gpu_uuid", pl.col("host").alias("_h")))
    return series.join(chosen, on="gpu_uuid").drop("host").rename({"_h": "host"})


def final_hosts(state: ImportState) -> dict[str, str]:
    """uuid -> the host it is stored under, over the whole import (the chunks may have seen other values)."""
    return {u: min(v.items(), key=lambda hv: (hv[1][0], -hv[1][1]))[0] for u, v in state.host_votes.items()}


def _attributes(long: pl.DataFrame, wide: pl.DataFrame, state: ImportState, info: dict[str, dict[Any, Any]]
                ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per GPU/slice: index, name, profile and fraction (MIG profile from any series of the instance, an info
    series, or its memory size; else the slice is not imported)."""
    attrs = (long.group_by(KEY)
             .agg(pl.col("gpu_index").drop_nulls().first(), pl.col("gpu_name").drop_nulls().first(),
                  pl.col("mig_profile").drop_nulls().first()))
    mem = wide.group_by(KEY).agg(pl.col("_total_b").max().alias("_mem"))
    attrs = attrs.join(mem, on=KEY, how="left")
    rows, refused = [], []
    for host, uuid, mig, idx, name, profile, mem_b in attrs.iter_rows():
        idx = idx if idx is not None else info.get("gpu_index", {}).get(uuid)
        name = name or info.get("gpu_name", {}).get(uuid)
        fraction = 1.0
        if mig != NO_MIG:
            profile = profile or state.profiles.get((uuid, mig)) or info.get("mig_profile", {}).get((uuid, mig))
            if profile:
                state.profiles[(uuid, mig)] = profile
                fraction = gpu_fraction(profile, name)
            else:
                derived, how = _profile_from_memory(mem_b, name)
                if derived is None:
                    state.refused[(host, uuid, mig)] = how
                    refused.append((host, uuid, mig))
                    continue
                state.derived[(host, uuid, mig)] = how
                fraction = derived
        rows.append((host, uuid, mig, _int_or_none(idx), name, profile, fraction))
    out = pl.DataFrame(rows, orient="row", schema={
        "host": pl.Utf8, "gpu_uuid": pl.Utf8, "mig_instance": pl.Int32, "gpu_index": pl.Int32, "gpu_name": pl.Utf8,
        "mig_profile": pl.Utf8, "gpu_fraction": pl.Float64})
    if refused:
        gone = pl.DataFrame(refused, orient="row", schema={"host": pl.Utf8, "gpu_uuid": pl.Utf8,
                                                            "mig_instance": pl.Int32})
        wide = wide.join(gone, on=KEY, how="anti")
    return wide, out


def _int_or_none(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def _energy(long: pl.DataFrame, state: ImportState, factor: float) -> pl.DataFrame:
    """Per physical GPU and step: energy in J from its counter's last and highest value per step (see the
    module doc), carrying the last value over from the previous chunk."""
    cnt = long.filter(pl.col("part") != "")
    out_schema = {"gpu_uuid": pl.Utf8, "ts": pl.Int64, "gpu_energy_j": pl.Float64}
    if not cnt.height:
        return pl.DataFrame(schema=out_schema)
    cnt = cnt.filter(pl.col("prio") == pl.col("prio").min().over("gpu_uuid", "ts"))
    last = (cnt.filter(pl.col("part") == LAST).group_by("gpu_uuid", "ts")
            .agg(pl.col("value").sort_by([pl.col("has_next"), ~pl.col("has_prev")], descending=[True, True])
                 .first().alias("last")))
    high = cnt.filter(pl.col("part") == "max").group_by("gpu_uuid", "ts").agg(pl.col("value").max().alias("high"))
    low = cnt.filter(pl.col("part") == "min").group_by("gpu_uuid", "ts").agg(pl.col("value").min().alias("low"))
    steps = (last.join(high, on=["gpu_uuid", "ts"], how="left").join(low, on=["gpu_uuid", "ts"], how="left")
             .with_columns(pl.lit(False).alias("carried")))
    if state.counter:
        carried = pl.DataFrame([(u, int(t), v, v, v, True) for u, (t, v) in state.counter.items()], orient="row",
                               schema={"gpu_uuid": pl.Utf8, "ts": pl.Int64, "last": pl.Float64, "high": pl.Float64,
                                       "low": pl.Float64, "carried": pl.Boolean})
        steps = pl.concat([carried.join(steps.select("gpu_uuid").unique(), on="gpu_uuid", how="semi"), steps])
    steps = steps.sort("gpu_uuid", "ts").with_columns(pl.col("last").shift(1).over("gpu_uuid").alias("prev"))
    highest = pl.coalesce(pl.col("high"), pl.col("last"))
    # The import's first step with samples has no value before it: the part inside the step (last - lowest).
    delta = (pl.when(pl.col("prev").is_null() & (pl.col("last") >= pl.col("low"))).then(pl.col("last") - pl.col("low"))
             .when(pl.col("prev").is_null()).then(None)
             .when(pl.col("last") >= pl.col("prev")).then(pl.col("last") - pl.col("prev"))
             # reset inside the step: the highest value before it, then the value since it
             .when(highest > pl.col("prev")).then(highest - pl.col("prev") + pl.col("last"))
             .otherwise(pl.col("last")))  # reset between steps: the value is the energy since it
    steps = steps.with_columns((delta * factor).alias("gpu_energy_j"))
    for uuid, ts, value in (steps.group_by("gpu_uuid").agg(pl.col("ts").last(), pl.col("last").last())
                            .iter_rows()):
        state.counter[uuid] = (float(ts), float(value))
    return steps.filter(~pl.col("carried")).select("gpu_uuid", "ts", "gpu_energy_j")


def _processes(long: pl.DataFrame, shares: pl.DataFrame, wide: pl.DataFrame, factor: Any) -> pl.DataFrame:
    who = ["k8s_pod", "k8s_namespace", "container", "pod_uid", "job_id", "user"]
    has = pl.col("k8s_pod").is_not_null() | pl.col("job_id").is_not_null() | pl.col("user").is_not_null()
    procs = pl.concat([long.filter(has).select(*KEY, "ts", *who), shares.select(*KEY, "ts", *who)])
    # One pod's series need not all carry its UID (dcgm-exporter puts pod_uid on the per-pod shares of a
    # time-sliced GPU, and on the others only with --kubernetes-enable-pod-uid): one row per pod, with its UID.
    named = [c for c in who if c != "pod_uid"]
    procs = procs.group_by(*KEY, "ts", *named).agg(pl.col("pod_uid").drop_nulls().first()).select(*KEY, "ts", *who)
    pod = [*KEY, "ts", "k8s_pod", "k8s_namespace", "container"]
    if shares.height:
        util = (shares.filter(pl.col("field") == "duty_cycle").group_by(pod)
                .agg(((pl.col("value") * pl.col("n")).sum() / pl.col("n").sum() * factor("duty_cycle"))
                     .clip(0.0, 1.0).alias("sm_util")))
        mem = (shares.filter(pl.col("field") == "fb_used").group_by(pod)
               .agg((pl.col("value").sort_by([pl.col("has_next"), ~pl.col("has_prev")], descending=[True, True])
                     .first() * factor("fb_used")).round(0).cast(pl.Int64).alias("mem_used_bytes")))
        procs = (procs.join(util, on=pod, how="left", nulls_equal=True)
                 .join(mem, on=pod, how="left", nulls_equal=True))
    else:
        procs = procs.with_columns(pl.lit(None, pl.Float64).alias("sm_util"),
                                   pl.lit(None, pl.Int64).alias("mem_used_bytes"))
    return procs.join(wide.select(*KEY, "ts"), on=[*KEY, "ts"], how="semi")


def _ts() -> pl.Expr:
    return pl.from_epoch(pl.col("ts"), time_unit="s").dt.replace_time_zone("UTC").alias("ts")


def _mig() -> pl.Expr:
    return (pl.when(pl.col("mig_instance") == NO_MIG).then(None).otherwise(pl.col("mig_instance"))
            .cast(pl.Int16).alias("mig_instance"))


COUNTER_PARTS = (LAST, "max", "min")  # how a COUNTER metric is asked: its last, highest and lowest value per step
__all__ = ["COUNT", "COUNTER", "COUNTER_PARTS", "ImportState", "build_rows", "final_hosts"]
