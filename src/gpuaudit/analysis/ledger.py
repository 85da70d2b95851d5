"""What the scheduler says vs what the GPUs did: allocations mapped onto GPU-hours, and the four-state ledger.

Every observed GPU-hour (W, weighted by gpu_fraction) is split into four states that sum to it:

    productive            = real_s                       SM activity (S; duty cycle where SM activity is unmeasured)
    held_idle             = held_s − real_held_s         a process held the GPU, its SMs idle
    allocated_no_process  = clip(allocated − active, 0, W − active)   allocated, nothing ran on it
    unallocated           = W − active − allocated_no_process

with active = held_s + (real_s − real_held_s) (time a process held it or its SMs were busy). `allocated` is the
scheduler's allocation mapped onto the GPU-hour (below); without allocations for a host, it is the held time
(believed is inferred from processes, as before) and allocated_no_process is 0 there.

Mapping (allocations are per job per host, the GPU indices unknown): each allocation is split into UTC hours
(GPU-seconds = gpus × seconds of overlap). In each host-hour, a job's GPU-seconds go, in this order:
1. to the GPUs its own processes used in any hour the allocation overlaps (keys: analysis/jobkeys.py; Slurm job
   id / JobIDRaw against the agent's cgroup attribution or the exporter's hpc_job label, namespace/pod or pod
   UID for Kubernetes; where a holder carries the allocation's pod UID, only the UID's holders), each up to its
   observed time: a recreated pod reusing its name gets only its own GPUs;
2. to the host's GPUs held in that hour by no labelled process (memory in use, a device plugin or exporter that
   names no pod or job): a process can only use a GPU allocated to it;
3. to the host's GPUs with no process in that hour; 4. to the other GPUs' free time.
What still does not fit (a host without telemetry, more GPUs allocated than seen) is reported as
unmapped. `inferred_share` says how much of the allocated time was placed without a process to match.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass

import numpy as np
import polars as pl

from gpuaudit.analysis import jobkeys
from gpuaudit.analysis.figure import Figure, Table, TableColumn
from gpuaudit.analysis.result import Ledger, Utilization

H = 3600.0
_GPU = ["host", "gpu_uuid", "mig_instance"]
_HOUR = ["host", "hour_s"]
_SRC_ALLOC = "gpu_allocations (sql/analysis_allocations.sql) mapped onto gpu_samples GPU-hours"
BASIS_PROCESSES, BASIS_ALLOCATIONS, BASIS_MIXED = "processes", "allocations", "mixed"


@dataclass(frozen=True)
class Mapped:
    """Per GPU-hour: observed and ledger seconds (`gpu_hours` with allocated_s and the four states added)."""

    gpu_hours: pl.DataFrame
    alloc_hours: pl.DataFrame  # per allocation row per hour: gpu_s (what the scheduler allocated in it)
    unmapped_s: float
    inferred_s: float
    basis_hosts: frozenset[str]
    warnings: tuple[str, ...] = ()  # for the result's warnings (terminal, report, JSON)


def _has_allocations(allocations: pl.DataFrame | None) -> bool:
    return allocations is not None and allocations.height > 0


def split_hours(alloc: pl.DataFrame, start_s: float, end_s: float) -> pl.DataFrame:
    """Allocation rows cut to [start_s, end_s] and split into UTC hours: one row per allocation (aid) per hour
    with gpu_s = gpus × seconds of overlap."""
    a = alloc.with_row_index("aid").with_columns(
        pl.max_horizontal(pl.col("start_s"), pl.lit(start_s)).alias("s0"),
        pl.min_horizontal(pl.col("end_s"), pl.lit(end_s)).alias("s1"),
    ).filter(pl.col("s1") > pl.col("s0"))
    a = a.with_columns(
        pl.int_ranges((pl.col("s0") // H).cast(pl.Int64), ((pl.col("s1") - 1e-6) // H).cast(pl.Int64) + 1)
        .alias("hour")
    ).explode("hour")
    hour_s = pl.col("hour").cast(pl.Float64) * H
    return a.with_columns(hour_s.alias("hour_s")).with_columns(
        (pl.col("gpus") * (pl.min_horizontal(pl.col("s1"), pl.col("hour_s") + H)
                           - pl.max_horizontal(pl.col("s0"), pl.col("hour_s")))).alias("gpu_s")
    ).drop("hour")


def _used_gpus(ah: pl.DataFrame, holders: pl.DataFrame) -> pl.DataFrame:
    """(aid, GPU) pairs: the GPUs whose holders match the allocation (jobkeys.matches: its key, on its host, in an
    hour it overlaps; by pod UID where it can)."""
    return jobkeys.matches(ah, "aid", holders, _GPU[1:]).select("aid", *_GPU).unique()


def map_allocations(gpu_hours: pl.DataFrame, holders: pl.DataFrame, allocations: pl.DataFrame | None,
                    start_s: float, end_s: float) -> Mapped:
    g = gpu_hours.select(*_GPU, "hour_s", "observed_s", "held_s", "real_s", "real_held_s")
    active = pl.col("held_s") + pl.max_horizontal(pl.col("real_s") - pl.col("real_held_s"), pl.lit(0.0))
    g = g.with_columns(active.clip(upper_bound=pl.col("observed_s")).alias("active_s"))
    empty_hours = pl.DataFrame(schema={"aid": pl.UInt32, "host": pl.String, "hour_s": pl.Float64,
                                       "gpu_s": pl.Float64})
    if not _has_allocations(allocations):
        g = g.with_columns(pl.col("held_s").alias("allocated_s"))
        return Mapped(_states(g), empty_hours, 0.0, 0.0, frozenset())
    assert allocations is not None
    ah = split_hours(allocations, start_s, end_s)
    basis_hosts = frozenset(ah["host"].unique().to_list()) & frozenset(g["host"].unique().to_list())
    # 1. To the GPUs the job's own processes used in the hours the allocation overlaps (a job keeps its GPUs
    # while it runs nothing on them; a recreated pod reusing the name is another allocation, in other hours), in
    # proportion to their observed time, each capped by it.
    used = _used_gpus(ah, holders).join(ah.select("aid", "host", "hour_s", "gpu_s"), on=["aid", "host"]).join(
        g.select(*_GPU, "hour_s", "observed_s"), on=[*_GPU, "hour_s"])
    used = used.with_columns(
        (pl.col("gpu_s") * pl.col("observed_s") / pl.col("observed_s").sum().over("aid", "hour_s"))
        .clip(upper_bound=pl.col("observed_s")).alias("m"))
    per_gpu = used.group_by(*_GPU, "hour_s").agg(pl.col("m").sum(), pl.col("observed_s").first())
    per_gpu = per_gpu.with_columns(
        (pl.col("m") * pl.min_horizontal(pl.lit(1.0), pl.col("observed_s") / pl.col("m"))).alias("matched_s"))
    # The scale-down per GPU (jobs sharing one) goes back to the host-hour's pool with the unmatched part.
    pool = ah.group_by(_HOUR).agg(pl.col("gpu_s").sum().alias("alloc_s")).join(
        per_gpu.group_by(_HOUR).agg(pl.col("matched_s").sum()), on=_HOUR, how="left").fill_null(0.0)
    pool = pool.with_columns((pl.col("alloc_s") - pl.col("matched_s")).clip(lower_bound=0.0).alias("rest_s"))
    g = g.join(per_gpu.select(*_GPU, "hour_s", "matched_s"), on=[*_GPU, "hour_s"], how="left").fill_null(0.0)
    g = g.with_columns((pl.col("observed_s") - pl.col("matched_s")).clip(lower_bound=0.0).alias("free_s"))
    # 2. To GPUs held in the hour by no labelled process (a process can only use a GPU allocated to it: a device
    # plugin or cgroup that labels no pod or job), 3. to GPUs with no process, 4. to the other GPUs' free time;
    # within a tier in proportion to the free time.
    labelled = holders.filter((pl.col("job_id") != "") | (pl.col("k8s_pod") != "")).select(
        *_GPU, "hour_s").unique().cast({c: g.schema[c] for c in (*_GPU, "hour_s")}).with_columns(
        pl.lit(True).alias("labelled"))
    g = g.join(labelled, on=[*_GPU, "hour_s"], how="left").with_columns(pl.col("labelled").fill_null(False))
    held = pl.col("held_s") > 0
    g = g.with_columns(pl.when(held & ~pl.col("labelled")).then(0).when(~held).then(1).otherwise(2)
                       .alias("tier")).drop("labelled")
    caps = g.group_by(*_HOUR, "tier").agg(pl.col("free_s").sum().alias("cap_s"))
    placed = []
    for tier in range(3):
        pool = pool.join(caps.filter(pl.col("tier") == tier).drop("tier"), on=_HOUR, how="left").with_columns(
            pl.col("cap_s").fill_null(0.0))
        pool = pool.with_columns(pl.min_horizontal(pl.col("rest_s"), pl.col("cap_s")).alias("to_s"))
        placed.append(pool.select(*_HOUR, pl.lit(tier).alias("tier"), "to_s", "cap_s"))
        pool = pool.with_columns((pl.col("rest_s") - pl.col("to_s")).alias("rest_s")).drop("to_s", "cap_s")
    shares = pl.concat(placed).with_columns((pl.col("to_s") / pl.col("cap_s")).fill_nan(0.0).alias("share"))
    g = g.join(shares.select(*_HOUR, "tier", "share"), on=[*_HOUR, "tier"], how="left").with_columns(
        pl.col("share").fill_null(0.0))
    g = g.with_columns((pl.col("matched_s") + pl.col("free_s") * pl.col("share")).alias("allocated_s"))
    # Hosts without any allocation: believed is what processes held.
    g = g.with_columns(pl.when(pl.col("host").is_in(list(basis_hosts))).then(pl.col("allocated_s"))
                       .otherwise(pl.col("held_s")).alias("allocated_s"))
    unmapped = float(pool["rest_s"].sum())  # host-hours without telemetry have no free time at all
    inferred = float(shares["to_s"].sum())
    g = g.drop("matched_s", "free_s", "tier", "share")
    return Mapped(_states(g), ah, unmapped, inferred, basis_hosts)


def _states(g: pl.DataFrame) -> pl.DataFrame:
    alloc = pl.col("allocated_s").clip(upper_bound=pl.col("observed_s"))
    no_proc = (alloc - pl.col("active_s")).clip(lower_bound=0.0)
    no_proc = pl.min_horizontal(no_proc, (pl.col("observed_s") - pl.col("active_s")).clip(lower_bound=0.0))
    return g.with_columns(
        alloc.alias("allocated_s"),
        pl.col("real_s").alias("productive_s"),
        (pl.col("active_s") - pl.col("real_s")).clip(lower_bound=0.0).alias("held_idle_s"),
        no_proc.alias("allocated_no_process_s"),
    ).with_columns(
        (pl.col("observed_s") - pl.col("productive_s") - pl.col("held_idle_s") - pl.col("allocated_no_process_s"))
        .alias("unallocated_s"))


STATES = ("unallocated", "allocated_no_process", "held_idle", "productive")
_DEFS = {
    "unallocated": "Observed GPU-hours no job was allocated and no process held.",
    "allocated_no_process": "Allocated by the scheduler, but no process ran on the GPU (an idle interactive "
                            "allocation, a job waiting for data, a GPU requested and never used).",
    "held_idle": "Held but did no work: the time a process held the GPU minus its SM-active time (R − S: debugging, "
                 "data loading, idle notebooks, kernels that use few SMs); idle-held hours are its part with the SMs "
                 "fully idle.",
    "productive": "SM activity: the compute actually used.",
}


def ledger(roll_gpu_hours: pl.DataFrame, holders: pl.DataFrame, allocations: pl.DataFrame | None,
           start_s: float, end_s: float, upper_bound: bool) -> tuple[Ledger, Mapped]:
    m = map_allocations(roll_gpu_hours, holders, allocations, start_s, end_s)
    g = m.gpu_hours
    sums = g.select(pl.col("observed_s", "allocated_s", "active_s", "held_s", *(f"{s}_s" for s in STATES)).sum()
                    ).row(0, named=True)
    hosts_seen = set(g["host"].unique().to_list())
    alloc_hosts = set(allocations["host"].unique().to_list()) if allocations is not None and allocations.height \
        else set()
    basis = (BASIS_PROCESSES if not m.basis_hosts else
             BASIS_ALLOCATIONS if hosts_seen <= m.basis_hosts else BASIS_MIXED)
    src = _SRC_ALLOC if basis != BASIS_PROCESSES else "gpu_samples (sql/analysis_rollup.sql): allocated = held"
    w = sums["observed_s"] / H

    def fig(name: str, formula: str) -> Figure:
        return Figure(sums[f"{name}_s"] / H, "GPU-h", formula, src, _DEFS[name],
                      upper_bound=upper_bound and name == "productive",
                      lower_bound=upper_bound and name == "held_idle")

    scheduler = float(m.alloc_hours["gpu_s"].sum()) / H
    outside = g.filter(pl.col("host").is_in(list(m.basis_hosts))).select(
        (pl.col("active_s") - pl.col("allocated_s")).clip(lower_bound=0.0).sum()).item() or 0.0
    mapped_alloc = sums["allocated_s"] / H
    notes = []
    if basis == BASIS_PROCESSES:
        notes.append("No scheduler allocations in the dataset: \"believed\" (allocated) is inferred from the "
                     "processes on each GPU, so allocated_no_process is 0 (import Slurm or Kubernetes allocations "
                     "to see it).")
    else:
        if basis == BASIS_MIXED:
            notes.append(f"{len(hosts_seen - m.basis_hosts)} of {len(hosts_seen)} hosts have no allocations: "
                         "there, allocated is inferred from processes.")
        if m.inferred_s > 0 and sums["allocated_s"] > 0:
            notes.append(f"{m.inferred_s / H:,.1f} GPU-h ({m.inferred_s / max(sums['allocated_s'], 1e-9):.0%}) of "
                         "the allocated time was placed on GPUs where the job ran no process (GPU indices are "
                         "not in the allocation: its processes' GPUs first, then GPUs with no process).")
        if m.unmapped_s > 0:
            notes.append(f"{m.unmapped_s / H:,.1f} GPU-h of allocations found no GPU with telemetry to map onto "
                         "(hosts without samples, or more GPUs allocated than reported): left out of the ledger.")
    unknown = tuple(sorted(alloc_hosts - hosts_seen))
    if unknown:
        notes.append(f"{len(unknown)} hosts with allocations have no telemetry (e.g. {unknown[0]}): their "
                     "allocations are outside the ledger.")
    warning = _outside_warning(g, m, holders, allocations, float(outside))
    if warning:
        notes.insert(0, "Warning: " + warning)
        m = dataclasses.replace(m, warnings=(warning,))
    week = _per_week(g)
    return Ledger(
        basis=basis,
        observed_gpu_hours=Figure(w, "GPU-h", "Σ interval_s × gpu_fraction / 3600", src,
                                  "Observed GPU-hours W: the four states sum to it."),
        unallocated=fig("unallocated", "W − active − allocated_no_process"),
        allocated_no_process=fig("allocated_no_process", "clip(allocated − active, 0, W − active) per GPU-hour"),
        held_idle=fig("held_idle", "held − SM activity while held, per GPU-hour"),
        productive=fig("productive", "S = Σ sm_active × time"),
        allocated_gpu_hours=Figure(mapped_alloc, "GPU-h", "Σ allocated GPU-seconds mapped onto observed GPU-hours",
                                   src, "What the scheduler shows as used (believed), within the telemetry."),
        scheduler_gpu_hours=Figure(scheduler, "GPU-h", "Σ gpus × overlap with the trial window",
                                   "gpu_allocations", "GPU-hours the scheduler allocated during the trial."),
        unmapped_gpu_hours=Figure(m.unmapped_s / H, "GPU-h", "allocated GPU-seconds with no observed GPU time left",
                                  src, "Allocations the telemetry cannot place (no samples on that host or hour)."),
        held_outside_allocation_gpu_hours=Figure(
            float(outside) / H, "GPU-h", "Σ max(0, active − allocated) on hosts with allocations", src,
            "Time processes held GPUs beyond what the scheduler allocated there."),
        inferred_share=Figure(m.inferred_s / sums["allocated_s"] if sums["allocated_s"] > 0 and m.basis_hosts
                              else 0.0, "fraction", "allocated time placed without a matching process ÷ allocated",
                              src, "How much of the mapping was inferred rather than matched by job id."),
        hosts_with_allocations=len(m.basis_hosts),
        hosts_without_telemetry=unknown,
        per_week=week,
        notes=tuple(notes),
    ), m


_OUTSIDE_WARN_SHARE = 0.10  # held time outside any allocation, as a share of held time, that is warned about


def _outside_warning(g: pl.DataFrame, m: Mapped, holders: pl.DataFrame, allocations: pl.DataFrame | None,
                     outside_s: float) -> str | None:
    """A warning when much of the held time on hosts with allocations ran outside any of them, with the
    likely cause: the allocations' window, or job ids that match none of them (another cluster, another form)."""
    if allocations is None or not m.basis_hosts:
        return None
    basis = g.filter(pl.col("host").is_in(list(m.basis_hosts)))
    held_s = float(basis["active_s"].sum())
    if held_s <= 0 or outside_s < _OUTSIDE_WARN_SHARE * held_s:
        return None
    a0, a1 = float(allocations["start_s"].min()), float(allocations["end_s"].max())  # type: ignore[arg-type]
    beyond = basis.filter((pl.col("hour_s") + H <= a0) | (pl.col("hour_s") >= a1)).select(
        (pl.col("active_s") - pl.col("allocated_s")).clip(lower_bound=0.0).sum()).item() or 0.0
    lead = (f"{outside_s / H:,.1f} of {held_s / H:,.1f} held GPU-hours ({outside_s / held_s:.0%}) on hosts with "
            "allocations ran outside any imported allocation, so believed (allocated) utilization reads low. ")
    if beyond >= 0.5 * outside_s:
        def day(t: float) -> str:
            return f"{dt.datetime.fromtimestamp(t, dt.UTC):%Y-%m-%d %H:%M}"

        return (lead + f"Likely cause: the window. The allocations cover {day(a0)} to {day(a1)} UTC and "
                f"{beyond / outside_s:.0%} of that time lies outside it: import the allocations for the telemetry's "
                "whole window (sacct -S/-E, import kubernetes --start/--end).")
    keys = jobkeys.alloc_keys(allocations.with_row_index("aid"), "aid", "job_id").select("key").unique()
    labelled = holders.filter((pl.col("job_id") != "") | (pl.col("k8s_pod") != ""))
    who = ["job_id", "k8s_namespace", "k8s_pod"]
    hk = jobkeys.holder_keys(labelled, who)
    unmatched = hk.select(who).unique().join(hk.join(keys, on="key", how="semi").select(who).unique(), on=who,
                                            how="anti").sort(who)
    if unmatched.height:
        r = unmatched.row(0, named=True)
        example = r["job_id"] or f"{r['k8s_namespace']}/{r['k8s_pod']}"
        return (lead + f"Likely cause: {unmatched.height:,} of the processes' job ids match no imported allocation "
                f"(e.g. {example}): allocations of another cluster, or another job-id form (Slurm JobIDRaw vs an "
                "array task's JobID, namespace/pod vs pod UID).")
    return (lead + "Likely cause: processes used more GPUs or hours than their jobs were allocated, or ran with no "
            "job id (outside the scheduler).")


def _per_week(g: pl.DataFrame) -> Table:
    ts = pl.from_epoch(pl.col("hour_s").cast(pl.Int64), "s").dt.replace_time_zone("UTC")
    df = (g.with_columns(ts.dt.truncate("1w").dt.date().cast(pl.String).alias("week"))
          .group_by("week").agg(*(pl.col(f"{s}_s").sum().truediv(H).alias(s) for s in STATES),
                                pl.col("observed_s").sum().truediv(H).alias("observed_gpu_hours"),
                                pl.col("allocated_s").sum().truediv(H).alias("allocated_gpu_hours"),
                                pl.col("held_s").sum().truediv(H).alias("held_gpu_hours"),
                                pl.col("productive_s").sum().truediv(H).alias("real_gpu_hours"))
          .sort("week"))
    cols = (TableColumn("week", "", "Monday the week starts on (UTC)"),
            *(TableColumn(s, "GPU-h", _DEFS[s]) for s in STATES),
            TableColumn("observed_gpu_hours", "GPU-h", "W"),
            TableColumn("allocated_gpu_hours", "GPU-h", "allocated (believed)"),
            TableColumn("held_gpu_hours", "GPU-h", "held by a process (R)"),
            TableColumn("real_gpu_hours", "GPU-h", "SM activity (S)"))
    return Table("ledger_per_week", "The four-state ledger per week (stacked: they sum to W).", cols,
                 tuple(df.select([c.name for c in cols]).to_dicts()), _SRC_ALLOC)


def believed(use: Utilization, led: Ledger, billed_utilization: float) -> Utilization:
    """`use` with the figures that depend on what the scheduler shows, each defined once (docs/report.md,
    Definitions): believed utilization (the allocated share A/W where allocations were imported, else the
    held-hour utilization R/W: what runtime-hour accounting shows; one figure, not both under two names);
    billed-hour utilization (billed GPU-hours / W, what the cost model bills: the break-even's measure); and the
    phantom gap,
    believed − real, in GPU-hours and as a share of W."""
    w = led.observed_gpu_hours.value or 0.0
    scheduled = led.basis != BASIS_PROCESSES
    src = led.allocated_gpu_hours.source
    held_gpu_hours = use.runtime_gpu_hours.value or 0.0
    if scheduled:
        believed_h = led.allocated_gpu_hours.value or 0.0
        believed_fig = Figure(believed_h / w if w > 0 else None, "fraction", "allocated GPU-hours A / W", src,
                              "Believed utilization: what the scheduler shows as used, the share of observed "
                              "GPU-hours allocated to jobs (scheduler allocations imported).")
    else:
        believed_h = held_gpu_hours
        believed_fig = dataclasses.replace(
            use.runtime_utilization,
            definition="Believed utilization: no scheduler allocations imported, so what runtime-hour accounting "
                       "shows, the held-hour utilization R/W.")
    upper = use.real_is_upper_bound
    real_h = use.real_gpu_hours.value or 0.0
    name = "A" if scheduled else "R"
    lb = " (a lower bound: S is an upper bound)" if upper else ""
    return dataclasses.replace(
        use,
        believed_utilization=believed_fig,
        billed_utilization=Figure(
            billed_utilization, "fraction",
            "billed GPU-hours / W (fleet-scaled, buckets weighted by coverage; on an autoscaled fleet ÷ its GPUs); "
            "billed = held, and on hosts with allocations allocated or active (W − unallocated per GPU-hour)",
            (src if scheduled else use.runtime_utilization.source) + " (cost model's billed demand)",
            "Billed-hour utilization: the share of the fleet's GPU-hours the cloud would bill (a GPU held by a "
            "process, or allocated to a job, busy or not); never below believed."),
        phantom_gap=Figure((believed_h - real_h) / w if w > 0 else None, "fraction", f"{name} / W − S / W",
                           src if scheduled else use.phantom_gap.source,
                           "Phantom gap: believed minus real utilization, the utilization the "
                           + ("scheduler" if scheduled else "runtime-hour accounting") + " shows but the SMs never "
                           "did" + lb + ".", lower_bound=upper),
        phantom_gpu_hours=Figure(max(believed_h - real_h, 0.0), "GPU-h", f"max({name} − S, 0)",
                                 src if scheduled else use.phantom_gpu_hours.source,
                                 "Phantom GPU-hours: believed GPU-hours (" + ("allocated" if scheduled else "held")
                                 + ") minus real GPU-hours over the trial" + lb + ".", lower_bound=upper),
    )


def billed_demand(m: Mapped, demand: pl.DataFrame, bucket_s: float, held_r: float) -> tuple[np.ndarray, float]:
    """The demand series the cloud bills (GPUs per bucket) and its GPU-hours: what processes held, plus, on the
    hosts with allocations, the ledger's own billed-beyond-held time, per GPU-hour W − unallocated − held
    (allocated with no process, and SM activity outside any held interval). So the billed GPU-hours are the
    ledger's W − unallocated there: never below allocated, never above what reported (the ledger maps
    allocations only onto observed time, so an allocation while its agent was silent is not billed; the fleet
    scaling extrapolates the silence). Each hour's extra is spread over its buckets in proportion to their free
    GPUs (reporting − held): spread evenly it was clipped where the GPUs were held and lost (the same hour billed
    below its allocation). Hosts without allocations contribute what processes held."""
    held = demand["gpus_held"].to_numpy().astype(float)
    if not m.basis_hosts:
        return held, held_r
    extra = (m.gpu_hours.filter(pl.col("host").is_in(list(m.basis_hosts)))
             .group_by("hour_s")
             .agg((pl.col("observed_s") - pl.col("unallocated_s") - pl.col("held_s")).clip(lower_bound=0.0)
                  .sum().alias("extra_s")))
    spare = np.maximum(demand["gpus_reporting"].to_numpy().astype(float) - held, 0.0)
    b = (pl.DataFrame({"hour_s": (demand["bucket_s"].to_numpy().astype(float) // H) * H, "spare": spare})
         .join(extra, on="hour_s", how="left", maintain_order="left")
         .with_columns((pl.col("spare") * bucket_s).sum().over("hour_s").alias("hour_spare_s")))
    share = (b["extra_s"].fill_null(0.0) / b["hour_spare_s"]).fill_nan(0.0).clip(0.0, 1.0).to_numpy()
    billed = held + spare * share
    return billed, float(billed.sum() * bucket_s / H)
