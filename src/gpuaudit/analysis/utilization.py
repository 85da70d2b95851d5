"""Stage 2: utilization figures and breakdowns from the rollups (pure functions); data quality is quality.py."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from gpuaudit.analysis.columns import (
    DemandColumns,
    DemandDurationColumns,
    HolderColumns,
    HourOfWeekColumns,
    PerGpuColumns,
    PerNodeColumns,
    PerWeekColumns,
    WrsColumns,
)
from gpuaudit.analysis.config import Reading
from gpuaudit.analysis.figure import Figure, Table, TableColumn
from gpuaudit.analysis.result import Breakdowns, Trial, Utilization
from gpuaudit.analysis.stage1.frames import Rollups
from gpuaudit.analysis.stage1.slots import DEMAND_BUCKET_S, HOUR_S
from gpuaudit.errors import NoDataError

H = float(HOUR_S)
SRC_SAMPLES = "gpu_samples via sql/analysis_streams.sql (de-duplicated) and sql/analysis_rollup.sql"
_SRC_HOLDERS = "gpu_processes via sql/analysis_holders.sql, joined to the GPU-hour rollup"

# Shared column definitions of the W/R/S tables.
_WRS = (
    TableColumn(WrsColumns.OBSERVED_GPU_HOURS, "GPU-h", "W: time covered by samples"),
    TableColumn(WrsColumns.RUNTIME_GPU_HOURS, "GPU-h", "R: time with at least one process"),
    TableColumn(WrsColumns.REAL_GPU_HOURS, "GPU-h", "S: SM activity × time"),
    TableColumn(WrsColumns.RUNTIME_UTILIZATION, "fraction", "R / W"),
    TableColumn(WrsColumns.REAL_UTILIZATION, "fraction", "S / W"),
    TableColumn(WrsColumns.EFFICIENCY_WHILE_HELD, "fraction", "S / R"),
    TableColumn(WrsColumns.IDLE_HELD_GPU_HOURS, "GPU-h", "held by a process while SM activity < 1 %"),
)


@dataclass(frozen=True)
class Totals:
    """Trial totals in GPU-hours (W, R, B, S) plus what the cost model needs."""

    w: float
    r: float
    b: float
    s: float
    s_lower: float  # S counting duty-cycle-only time as no SM activity
    s_held: float
    idle_held: float
    fallback: float
    unmeasured: float
    energy_j: float
    energy_s: float
    trial_hours: float
    gpu_equivalents: float
    overlap: float = 0.0  # GPU-hours removed by stage 1's de-duplication
    energy_estimated: float = 0.0  # GPU-hours whose energy is power x time (no energy counter)

    @property
    def real_utilization(self) -> float:
        return self.s / self.w

    @property
    def runtime_utilization(self) -> float:
        return self.r / self.w

    @property
    def average_power_w(self) -> float | None:
        """Measured average board power per GPU (None when no power was measured)."""
        return self.energy_j / self.energy_s if self.energy_s > 0 else None


def _num(value: Any) -> float:
    """A polars aggregate (Series.min/max/sum, typed as any Python literal) of a numeric column, as a float."""
    return float(value)


def _ratio(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    return pl.when(b > 0).then(a / b).otherwise(None)


def gpu_label() -> pl.Expr:
    return (
        pl.when(pl.col("mig_instance") >= 0)
        .then(pl.col("gpu_uuid") + pl.lit("/mig") + pl.col("mig_instance").cast(pl.String))
        .otherwise(pl.col("gpu_uuid"))
        .alias("gpu")
    )


def _wrs_aggs() -> list[pl.Expr]:
    return [
        (pl.col("observed_s").sum() / H).alias("observed_gpu_hours"),
        (pl.col("held_s").sum() / H).alias("runtime_gpu_hours"),
        (pl.col("real_s").sum() / H).alias("real_gpu_hours"),
        (pl.col("idle_held_s").sum() / H).alias("idle_held_gpu_hours"),
    ]


def _wrs_ratios(df: pl.DataFrame) -> pl.DataFrame:
    w, r, s = pl.col("observed_gpu_hours"), pl.col("runtime_gpu_hours"), pl.col("real_gpu_hours")
    return df.with_columns(
        _ratio(r, w).alias("runtime_utilization"),
        _ratio(s, w).alias("real_utilization"),
        _ratio(s, r).alias("efficiency_while_held"),
    )


def table(name: str, description: str, df: pl.DataFrame, columns: tuple[TableColumn, ...], source: str) -> Table:
    names = [c.name for c in columns]
    rows = tuple(df.select(names).to_dicts()) if df.height else ()
    return Table(name=name, description=description, columns=columns, rows=rows, source=source)


def check_enough(roll: Rollups, rd: Reading, root: str) -> None:
    g = roll.gpu_hours
    if g.height == 0 or float(g["observed_s"].sum() or 0) <= 0:
        raise NoDataError(
            f"no GPU samples in {root}: record some first (`gpuaudit agent run`, `gpuaudit import prometheus` "
            "or `gpuaudit simulate`)"
        )
    span_h = (_num(g["last_s"].max()) - _num(g["first_s"].min())) / H
    if span_h < rd.min_trial_hours:
        raise NoDataError(
            f"the trial in {root} covers only {span_h * 60:.0f} minutes; at least "
            f"{rd.min_trial_hours:g} h of samples are needed (decision.min_trial_hours), and 90 days "
            "for a firm decision"
        )


def totals(roll: Rollups) -> Totals:
    g = roll.gpu_hours
    sums = g.select(
        pl.col("observed_s", "held_s", "busy_s", "real_s", "real_held_s", "idle_held_s", "fallback_s",
               "fallback_real_s", "unmeasured_s", "energy_j", "energy_s", "overlap_s", "energy_estimated_s").sum()
    ).row(0, named=True)
    per_gpu = g.group_by("gpu_uuid", "mig_instance").agg(pl.col("gpu_fraction").max())
    span_s = _num(g["last_s"].max()) - _num(g["first_s"].min())
    return Totals(
        w=sums["observed_s"] / H, r=sums["held_s"] / H, b=(sums["busy_s"] or 0) / H, s=(sums["real_s"] or 0) / H,
        s_lower=((sums["real_s"] or 0) - (sums["fallback_real_s"] or 0)) / H, overlap=(sums["overlap_s"] or 0) / H,
        s_held=(sums["real_held_s"] or 0) / H, idle_held=sums["idle_held_s"] / H, fallback=sums["fallback_s"] / H,
        unmeasured=sums["unmeasured_s"] / H, energy_j=sums["energy_j"] or 0.0, energy_s=sums["energy_s"] or 0.0,
        trial_hours=span_s / H, gpu_equivalents=float(per_gpu["gpu_fraction"].sum()),
        energy_estimated=(sums["energy_estimated_s"] or 0) / H,
    )


def power_by_load(roll: Rollups) -> tuple[float | None, float | None]:
    """(watts of a GPU no job holds, watts of a held one): the least-squares line of each GPU-hour's average
    board power against the share of that hour a job held the GPU, weighted by the seconds with power. None
    when the trial cannot tell the two apart (no power, or held share that hardly varies), or the line makes
    no physical sense (negative, falling with load)."""
    g = roll.gpu_hours.filter(pl.col("energy_s") > 0)
    if g.height < 2:
        return None, None
    w = g["energy_s"].to_numpy().astype(float)
    x = (g["held_s"] / g["observed_s"]).fill_nan(0.0).to_numpy().astype(float).clip(0.0, 1.0)
    y = (g["energy_j"] / g["energy_s"]).to_numpy().astype(float)
    xm, ym = float((w * x).sum() / w.sum()), float((w * y).sum() / w.sum())
    var = float((w * (x - xm) ** 2).sum() / w.sum())
    if var < 0.01:  # held share almost constant (std < 0.1): the slope is not identified
        return None, None
    slope = float((w * (x - xm) * (y - ym)).sum() / w.sum()) / var
    idle = ym - slope * xm
    if slope < 0 or idle < 0:
        return None, None
    return idle, idle + slope


def _ts(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def _add_months(day: dt.date, months: int) -> dt.date:
    y, m = divmod(day.month - 1 + months, 12)
    year, month = day.year + y, m + 1
    for d in (day.day, 30, 29, 28):
        try:
            return dt.date(year, month, d)
        except ValueError:
            continue
    raise AssertionError("unreachable")


def day_index(seconds: pl.Expr, start_s: float, days: float) -> pl.Expr:
    """The trial day (0, 1, …) a GPU-hour or bucket starting at `seconds` belongs to, counted the way the trial's
    length is: 24-hour days from the hour the trial starts in, the last partial hour folded into the last day
    (a 90.0-day trial that starts at 23:59 has 90 days, not the 91 UTC dates it touches)."""
    first = math.floor(start_s / H) * H
    last = max(math.ceil(days - 1e-9) - 1, 0)
    return ((seconds - first) // 86400).clip(0, last).cast(pl.Int64)


def day_of(seconds: np.ndarray, start_s: float, days: float) -> np.ndarray:
    """day_index for a numpy array of seconds (the demand buckets)."""
    first = math.floor(start_s / H) * H
    last = max(math.ceil(days - 1e-9) - 1, 0)
    return np.clip((np.asarray(seconds, dtype=float) - first) // 86400, 0, last).astype(np.int64)


def trial(roll: Rollups, t: Totals, rd: Reading) -> Trial:
    g = roll.gpu_hours
    start, end = _ts(_num(g["first_s"].min())), _ts(_num(g["last_s"].max()))
    days = (end - start).total_seconds() / 86400
    sources = sorted(set(g["source_min"].drop_nulls().to_list()) | set(g["source_max"].drop_nulls().to_list()))
    observed_days = g.select(day_index(pl.col("hour_s"), start.timestamp(), days).n_unique()).item()
    return Trial(
        start=start, end=end, days=days, observed_days=int(observed_days),
        provisional=days < rd.provisional_below_days,
        reevaluate_on=_add_months(end.date(), rd.reevaluate_after_months),
        gpus=int(g["gpu_uuid"].n_unique()), gpu_equivalents=t.gpu_equivalents, hosts=int(g["host"].n_unique()),
        sources=tuple(sources), samples=int(g["samples"].sum()),
    )


def never_used(roll: Rollups) -> list[str]:
    per = (
        roll.gpu_hours.group_by("gpu_uuid", "mig_instance").agg(pl.col("held_s").sum())
        .filter(pl.col("held_s") <= 0).with_columns(gpu_label()).sort("gpu")
    )
    return per["gpu"].to_list()


def utilization(roll: Rollups, t: Totals) -> Utilization:
    upper = t.fallback > 0
    ub = (" (upper bound: engine-active or the duty cycle stands in where SM activity was not measured)"
          if upper else "")
    never = never_used(roll)
    src = SRC_SAMPLES

    def fig(value: float | None, unit: str, formula: str, source: str, definition: str, up: bool = False) -> Figure:
        return Figure(value, unit, formula, source, definition, up)

    return Utilization(
        observed_gpu_hours=fig(t.w, "GPU-h", "W = Σ interval_s × gpu_fraction / 3600", src,
                               "Observed GPU-hours: GPU time covered by samples."),
        runtime_gpu_hours=fig(t.r, "GPU-h", "R = Σ interval_s × gpu_fraction / 3600 where n_processes ≥ 1", src,
                              "Runtime GPU-hours: time at least one process held the GPU (what runtime-hour "
                              "accounting counts)."),
        busy_gpu_hours=fig(t.b, "GPU-h", "B = Σ duty_cycle × interval_s × gpu_fraction / 3600", src,
                           "Busy GPU-hours: time any kernel was running (nvidia-smi utilization.gpu)."),
        real_gpu_hours=fig(t.s, "GPU-h", "S = Σ sm_active × interval_s × gpu_fraction / 3600", src,
                           "Real GPU-hours: SM activity × time, the compute actually used" + ub, upper),
        runtime_utilization=fig(t.r / t.w, "fraction", "R / W", src,
                                "Held-hour (runtime-hour) utilization: share of GPU time a process held the GPU."),
        real_utilization=fig(t.s / t.w, "fraction", "S / W", src,
                             "Real utilization: share of GPU capacity the SMs were actually active" + ub, upper),
        busy_utilization=fig(t.b / t.w, "fraction", "B / W", src,
                             "Busy utilization: share of time a kernel was running (duty cycle)."),
        efficiency_while_held=fig(t.s / t.r if t.r > 0 else None, "fraction", "S / R", src,
                                  "Efficiency while held: SM activity per runtime GPU-hour.", upper),
        # With S an upper bound, R/W − S/W is a LOWER bound of the gap (the real gap can only be larger).
        phantom_gap=Figure(t.r / t.w - t.s / t.w, "fraction", "R / W − S / W", src,
                           "Phantom gap: utilization that runtime-hour accounting reports but the SMs never did"
                           + (" (a lower bound: S is an upper bound)" if upper else "") + ".", lower_bound=upper),
        idle_held_gpu_hours=Figure(t.idle_held, "GPU-h",
                                   "Σ interval_s × gpu_fraction / 3600 where n_processes ≥ 1 and sm_active < 0.01",
                                   src, "Idle-held GPU-hours: a process held the GPU while its SMs were fully "
                                   "idle (part of the phantom GPU-hours)"
                                   + (" (a lower bound: duty cycle stood in for SM activity)" if upper else "")
                                   + ".", lower_bound=upper),
        never_used_count=fig(float(len(never)), "GPUs", "count of GPUs (MIG slices) with R = 0", src,
                             "GPUs that no process used during the whole trial."),
        never_used_gpus=tuple(never),
        real_is_upper_bound=upper,
        upper_bound_share=fig(t.fallback / t.w, "fraction", "duty-cycle-only GPU-hours / W", src,
                              "Share of observed time where SM activity was not measured (sources nvml, "
                              "prometheus-dcgm-util) and duty cycle stands in for it."),
        average_power_w=fig(t.average_power_w, "W", "Σ energy_j × gpu_fraction / Σ interval_s × gpu_fraction "
                            "(rows with power)", src, "Measured average board power per GPU."),
        energy_kwh=fig(t.energy_j / 3.6e6, "kWh", "Σ energy_j × gpu_fraction / 3.6e6", src,
                       "Energy the GPUs used during the trial (board power, before PUE)."),
        real_utilization_lower=fig(t.s_lower / t.w, "fraction", "(S − duty-cycle stand-in) / W", src,
                                   "Lowest possible real utilization: duty-cycle-only time counted as no SM "
                                   "activity (equals real utilization where SM activity was measured)."),
        phantom_gpu_hours=Figure(max(t.r - t.s, 0.0), "GPU-h", "max(R − S, 0)", src,
                                 "Phantom GPU-hours: runtime GPU-hours minus real GPU-hours over the trial"
                                 + (" (a lower bound: S is an upper bound)" if upper else "") + ".",
                                 lower_bound=upper),
    )


def holder_hours(roll: Rollups) -> pl.DataFrame:
    """Held and real GPU-seconds per (user, job, pod) per GPU-hour: each holder gets a share of the
    GPU-hour's held time (and of the SM activity while held) proportional to its process rows in that
    hour; held time with no process rows is attributed to '(unattributed)'. The pod UID (empty where unknown)
    rides along: the chargeback matches a Kubernetes allocation by it first."""
    keys = ["gpu_uuid", "mig_instance", "hour_s"]
    g = roll.gpu_hours.select(*keys, "host", "held_s", "real_held_s", "idle_held_s")
    h = roll.holders
    if h.height:
        h = h.with_columns((pl.col("process_samples") / pl.col("process_samples").sum().over(keys)).alias("frac"))
        if "pod_uid" not in h.columns:
            h = h.with_columns(pl.lit("").alias("pod_uid"))
        joined = h.select(*keys, "user", "job_id", "k8s_namespace", "k8s_pod", "pod_uid", "frac").join(
            g, on=keys, how="inner")
        attributed = joined.select(
            "host", "gpu_uuid", "mig_instance", "hour_s", "user", "job_id", "k8s_namespace", "k8s_pod", "pod_uid",
            (pl.col("frac") * pl.col("held_s")).alias("held_s"),
            (pl.col("frac") * pl.col("real_held_s")).alias("real_s"),
            (pl.col("frac") * pl.col("idle_held_s")).alias("idle_held_s"),
        )
        seen = h.select(keys).unique()
        orphan = g.join(seen, on=keys, how="anti")
    else:
        attributed = None
        orphan = g
    orphan = orphan.filter(pl.col("held_s") > 0).select(
        "host", "gpu_uuid", "mig_instance", "hour_s",
        pl.lit("(unattributed)").alias("user"), pl.lit("").alias("job_id"), pl.lit("").alias("k8s_namespace"),
        pl.lit("").alias("k8s_pod"), pl.lit("").alias("pod_uid"), "held_s", pl.col("real_held_s").alias("real_s"),
        "idle_held_s",
    )
    parts = [orphan] if attributed is None else [attributed.cast(orphan.schema), orphan]
    return pl.concat(parts)


def _holder_table(hh: pl.DataFrame, key: list[str], name: str, label: str, description: str) -> Table:
    df = hh.filter(pl.all_horizontal(pl.col(k) != "" for k in key))
    if len(key) > 1:
        df = df.with_columns(pl.concat_str([pl.col(k) for k in key], separator="/").alias(label))
    elif key[0] != label:
        df = df.rename({key[0]: label})
    agg = (
        df.group_by(label)
        .agg(
            (pl.col("held_s").sum() / H).alias("runtime_gpu_hours"),
            (pl.col("real_s").sum() / H).alias("real_gpu_hours"),
            (pl.col("idle_held_s").sum() / H).alias("idle_held_gpu_hours"),
            pl.concat_str("gpu_uuid", "mig_instance", separator="#").n_unique().alias("gpus"),
            pl.col("hour_s").min().alias("first_s"),
            (pl.col("hour_s").max() + H).alias("last_s"),
        )
        .with_columns(
            _ratio(pl.col("real_gpu_hours"), pl.col("runtime_gpu_hours")).alias("efficiency_while_held"),
            pl.from_epoch(pl.col("first_s"), "s").dt.replace_time_zone("UTC").alias("first_hour"),
            pl.from_epoch(pl.col("last_s"), "s").dt.replace_time_zone("UTC").alias("last_hour"),
        )
        .sort("runtime_gpu_hours", label, descending=[True, False])
    )
    cols = (
        TableColumn(label, "", f"{label} (from gpu_processes)"),
        TableColumn(HolderColumns.RUNTIME_GPU_HOURS, "GPU-h", "share of R this holder held"),
        TableColumn(HolderColumns.REAL_GPU_HOURS, "GPU-h", "share of S while held"),
        TableColumn(HolderColumns.EFFICIENCY_WHILE_HELD, "fraction", "S / R"),
        TableColumn(HolderColumns.IDLE_HELD_GPU_HOURS, "GPU-h", "held while SM activity < 1 %"),
        TableColumn(HolderColumns.GPUS, "count", "GPUs (MIG slices) used"),
        TableColumn(HolderColumns.FIRST_HOUR, "UTC", "first hour seen"),
        TableColumn(HolderColumns.LAST_HOUR, "UTC", "end of the last hour seen"),
    )
    return table(name, description, agg, cols, _SRC_HOLDERS)


def breakdowns(roll: Rollups, t: Totals, demand: pl.DataFrame, bucket_s: float, hh: pl.DataFrame) -> Breakdowns:
    """`hh`: holder_hours(roll), computed once per run (the chargeback reads it too: seconds at fleet scale)."""
    g = roll.gpu_hours
    per_user = _holder_table(hh, ["user"], "per_user", "user", "Held and real GPU-hours per user.")
    per_job = _holder_table(hh, ["job_id"], "per_job", "job", "Held and real GPU-hours per Slurm job.")
    per_pod = _holder_table(hh, ["k8s_namespace", "k8s_pod"], "per_pod", "pod",
                            "Held and real GPU-hours per Kubernetes pod (namespace/pod).")
    hourly = _hourly_demand(demand)
    return Breakdowns(_per_node(g), _per_gpu(g), per_user, per_job, per_pod, _hour_of_week(g), _per_week(g),
                      _demand_table(hourly, bucket_s), _demand_duration(hourly))


def _per_node(g: pl.DataFrame) -> Table:
    node = _wrs_ratios(
        g.group_by("host").agg(*_wrs_aggs(), pl.col("gpu_uuid").n_unique().alias("gpus")).sort("host")
    )
    return table("per_node", "Utilization per node.", node,
                 (TableColumn(PerNodeColumns.HOST, "", "node"),
                  TableColumn(PerNodeColumns.GPUS, "count", "GPUs seen"), *_WRS), SRC_SAMPLES)


def _per_gpu(g: pl.DataFrame) -> Table:
    gpu = _wrs_ratios(
        g.group_by("host", "gpu_uuid", "mig_instance")
        .agg(
            *_wrs_aggs(),
            pl.col("gpu_name").drop_nulls().first(),
            pl.col("gpu_fraction").max(),
            (pl.col("fallback_s").sum() > 0).alias("upper_bound"),
            pl.col("max_mem_used_bytes").max(),
            pl.col("mem_total_bytes").max(),
            _ratio(pl.col("energy_j").sum(), pl.col("energy_s").sum()).alias("average_power_w"),
        )
        .with_columns(gpu_label(), (pl.col("runtime_gpu_hours") <= 0).alias("never_used"))
        .sort("host", "gpu")
    )
    return table(
        "per_gpu", "Utilization per GPU (MIG slices separately).", gpu,
        (TableColumn(PerGpuColumns.HOST, "", "node"),
         TableColumn(PerGpuColumns.GPU, "", "GPU UUID (/migN for a MIG slice)"),
         TableColumn(PerGpuColumns.GPU_NAME, "", "product name"),
         TableColumn(PerGpuColumns.GPU_FRACTION, "GPUs", "share of a physical GPU"),
         *_WRS, TableColumn(PerGpuColumns.MAX_MEM_USED_BYTES, "bytes", "peak framebuffer memory used"),
         TableColumn(PerGpuColumns.MEM_TOTAL_BYTES, "bytes", "framebuffer memory"),
         TableColumn(PerGpuColumns.AVERAGE_POWER_W, "W", "measured average board power"),
         TableColumn(PerGpuColumns.UPPER_BOUND, "", "SM activity not measured: duty cycle stands in (upper bound)"),
         TableColumn(PerGpuColumns.NEVER_USED, "", "no process during the whole trial")),
        SRC_SAMPLES,
    )


def _hour_ts() -> pl.Expr:
    return pl.from_epoch(pl.col("hour_s").cast(pl.Int64), "s").dt.replace_time_zone("UTC")


def _hour_of_week(g: pl.DataFrame) -> Table:
    ts = _hour_ts()
    how = _wrs_ratios(
        g.with_columns((ts.dt.weekday() - 1).alias("day_of_week"), ts.dt.hour().alias("hour_of_day"))
        .group_by("day_of_week", "hour_of_day").agg(*_wrs_aggs()).sort("day_of_week", "hour_of_day")
    )
    return table(
        "hour_of_week", "Utilization by hour of the week (UTC), summed over the trial's weeks.", how,
        (TableColumn(HourOfWeekColumns.DAY_OF_WEEK, "", "0 = Monday … 6 = Sunday"),
         TableColumn(HourOfWeekColumns.HOUR_OF_DAY, "", "0-23 UTC"), *_WRS),
        SRC_SAMPLES,
    )


def _per_week(g: pl.DataFrame) -> Table:
    week = _wrs_ratios(
        g.with_columns(_hour_ts().dt.truncate("1w").dt.date().alias("week_start"))
        .group_by("week_start")
        .agg(*_wrs_aggs(), pl.col("gpu_uuid").n_unique().alias("gpus"))
        .sort("week_start")
        .with_columns(pl.col("week_start").cast(pl.String).alias("week"))
    )
    return table(
        "per_week", "Weekly trend (weeks start on Monday, UTC).", week,
        (TableColumn(PerWeekColumns.WEEK, "", "Monday the week starts on"),
         TableColumn(PerWeekColumns.GPUS, "count", "GPUs reporting"), *_WRS),
        SRC_SAMPLES,
    )


def _hourly_demand(demand: pl.DataFrame) -> pl.DataFrame:
    """The demand buckets as hourly means and peaks."""
    return (
        demand.with_columns(((pl.col("bucket_s") // H) * H).alias("hour_s"))
        .group_by("hour_s")
        .agg(
            pl.col("gpus_held").mean().alias("gpus_held"),
            pl.col("gpus_held").max().alias("peak_gpus_held"),
            pl.col("gpus_in_use").mean().alias("gpus_in_use"),
            pl.col("gpus_in_use").max().alias("peak_gpus_in_use"),
            pl.col("gpus_reporting").mean().alias("gpus_reporting"),
        )
        .sort("hour_s")
        .with_columns(_hour_ts().alias("hour"))
    )


def _demand_table(hourly: pl.DataFrame, bucket_s: float) -> Table:
    return table(
        "demand",
        f"Fleet demand per hour (mean and peak of {bucket_s:g} s buckets): GPUs held by processes and "
        "SM-weighted GPUs in use.",
        hourly,
        (TableColumn(DemandColumns.HOUR, "UTC", "hour start"),
         TableColumn(DemandColumns.GPUS_HELD, "GPUs", "mean GPUs held by at least one process"),
         TableColumn(DemandColumns.PEAK_GPUS_HELD, "GPUs", "peak bucket of GPUs held"),
         TableColumn(DemandColumns.GPUS_IN_USE, "GPUs", "mean SM-weighted GPUs in use (Σ sm_active × gpu_fraction)"),
         TableColumn(DemandColumns.PEAK_GPUS_IN_USE, "GPUs", "peak bucket of SM-weighted GPUs in use"),
         TableColumn(DemandColumns.GPUS_REPORTING, "GPUs", "mean GPUs with samples")),
        SRC_SAMPLES + " (level 'demand')",
    )


def _demand_duration(hourly: pl.DataFrame) -> Table:
    held = [float(v or 0) for v in hourly[DemandColumns.GPUS_HELD].to_list()] if hourly.height else []
    xs, ys = _duration_curve(sorted(held, reverse=True))
    return Table(
        "demand_duration", "Share of hours in which the fleet held at least this many GPUs (hourly means).",
        (TableColumn(DemandDurationColumns.GPUS_HELD, "GPUs", "a level of hourly mean GPUs held"),
         TableColumn(DemandDurationColumns.SHARE_OF_HOURS, "fraction", "share of hours at or above it")),
        tuple({DemandDurationColumns.GPUS_HELD: x, DemandDurationColumns.SHARE_OF_HOURS: y}
              for x, y in zip(xs, ys, strict=True)) if held else (),
        SRC_SAMPLES + " (level 'demand')",
    )


def _duration_curve(desc: list[float]) -> tuple[list[float], list[float]]:
    """For demand sorted high→low: x = GPUs, y = share of time demand ≥ x (a step per distinct level)."""
    n = len(desc)
    xs: list[float] = [0.0]
    ys: list[float] = [1.0]
    for i, v in enumerate(desc):
        if i + 1 == n or desc[i + 1] != v:
            xs.append(v)
            ys.append((i + 1) / n)
    pairs = sorted(zip(xs, ys, strict=True))
    return [p[0] for p in pairs], [p[1] for p in pairs]


def demand_series(roll: Rollups) -> tuple[pl.DataFrame, float]:
    """The fleet demand series in GPUs per bucket: gpus_held, gpus_in_use (SM-weighted), gpus_reporting.

    Buckets are DEMAND_BUCKET_S long unless samples are longer: then they are merged into buckets of a
    whole multiple of the longest interval, so every bucket holds one sample per GPU (no false zeros).
    Buckets with no samples inside the trial count as zero demand (no GPU reported)."""
    d = roll.demand
    longest = _num(d["max_interval_s"].max() or DEMAND_BUCKET_S)
    bucket = DEMAND_BUCKET_S * max(1, math.ceil(longest / DEMAND_BUCKET_S - 1e-9))
    d = d.with_columns(((pl.col("bucket_s") // bucket) * bucket).alias("bucket_s")).group_by("bucket_s").agg(
        pl.col("observed_s", "held_s", "real_s").sum()
    )
    e = roll.elastic_demand.with_columns(((pl.col("bucket_s") // bucket) * bucket).alias("bucket_s")).group_by(
        "bucket_s").agg(pl.col("observed_s").sum().alias("elastic_observed_s"),
                        pl.col("held_s").sum().alias("elastic_held_s"))
    lo, hi = _num(d["bucket_s"].min()), _num(d["bucket_s"].max())
    grid = pl.DataFrame({"bucket_s": [lo + i * bucket for i in range(round((hi - lo) / bucket) + 1)]})
    d = grid.join(d, on="bucket_s", how="left").join(e.cast({"bucket_s": pl.Float64}), on="bucket_s",
                                                         how="left").fill_null(0.0)
    return d.select(
        "bucket_s",
        (pl.col("held_s") / bucket).alias("gpus_held"),
        (pl.col("real_s") / bucket).alias("gpus_in_use"),
        (pl.col("observed_s") / bucket).alias("gpus_reporting"),
        # the elastic GPUs' part of gpus_held and gpus_reporting (sql/analysis_demand_elastic.sql)
        (pl.col("elastic_held_s") / bucket).alias("elastic_gpus_held"),
        (pl.col("elastic_observed_s") / bucket).alias("elastic_gpus_reporting"),
    ).sort("bucket_s"), bucket


@dataclass(frozen=True)
class Elastic:
    """GPUs that report only while held (sql/analysis_elastic_gpus.sql): their absent time is not a gap."""

    uuids: frozenset[str]
    gpus: int  # distinct physical GPUs among them
    equivalents: float  # Σ gpu_fraction of the elastic GPUs (MIG slices) seen
    peak: float  # the most elastic GPU equivalents reporting at once (one demand bucket)
    observed_gpu_hours: float


NO_ELASTIC = Elastic(frozenset(), 0, 0.0, 0.0, 0.0)


def elastic(roll: Rollups, demand: pl.DataFrame) -> Elastic:
    e = roll.elastic_gpus
    peak = _num(demand["elastic_gpus_reporting"].max() or 0.0) if demand.height else 0.0
    return Elastic(frozenset(e["gpu_uuid"].to_list()), int(e["gpu_uuid"].n_unique()),
                   _num(e["gpu_fraction"].sum() or 0.0), peak, _num(e["observed_s"].sum() or 0.0) / H)
