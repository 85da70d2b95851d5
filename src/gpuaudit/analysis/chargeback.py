"""Chargeback / showback: allocated, held and real GPU-hours per account, user, partition and namespace, the
cost of the unused part, and the jobs that wasted GPUs (as Princeton's Job Defense Shield lists them).

Per job: `allocated` from the scheduler's allocations (gpus × overlap with the trial window, exact), `held` and
`real` from the per-GPU-hour attribution of held time to the processes' (user, job, pod) (utilization.py), the
two joined as the ledger joins them (analysis/jobkeys.py `matches`: Slurm JobID / JobIDRaw against the processes'
job id, Kubernetes pod UID first, else namespace/pod, each on the allocation's host in the hours it overlaps). A
Kubernetes job is one pod incarnation (its UID): a StatefulSet pod recreated under the same name is two jobs. A
job's group keys come from its allocation (user, account, partition, namespace), else from its
processes (user, namespace; account and partition "(no allocation)"). Rows sum to the fleet totals: allocated
to the scheduler's GPU-hours in the window, held to R, real to S (SM activity outside any held time is the row
"(no process)").

unused GPU-hours = max(allocated, held) − real; unused_usd = unused × the cloud flexible price per GPU-hour (what
an hour released would save: the one price of waste in dollars, as the report's phantom gap in dollars). Not
"idle": the report's idle-held GPU-hours are held with the SMs idle, while a GPU held at 30 % SM activity leaves
0.7 of each hour unused (two quantities, two names).
efficiency = real / max(allocated, held).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import polars as pl

from gpuaudit.analysis import jobkeys
from gpuaudit.analysis.figure import Table, TableColumn
from gpuaudit.analysis.ledger import split_hours
from gpuaudit.analysis.result import Chargeback
from gpuaudit.schema import ALLOC_SOURCE_KUBERNETES

H = 3600.0
KEYS = ("account", "user", "partition", "namespace")
_NO_ALLOC = "(no allocation)"
_NO_PROCESS = "(no process)"
_UNATTRIBUTED = "(unattributed)"
_ZERO_UTIL_BELOW = 0.01  # SM activity below 1 % while held is "0 %"
MIN_IDLE_HOURS = 1.0  # idle-jobs lists a job idle for at least this much wall time (hours): the one threshold
SRC = "gpu_allocations + gpu_processes attribution of gpu_samples GPU-hours"


_JOBS = {"jkey": pl.String, "source": pl.String, "job": pl.String, "job_id_raw": pl.String, "a_user": pl.String,
         "account": pl.String, "partition": pl.String, "a_namespace": pl.String, "allocated_s": pl.Float64,
         "alloc_gpus": pl.Float64}


def _alloc_jobs(alloc: pl.DataFrame | None, start_s: float, end_s: float) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per allocated job: its keys and allocated GPU-seconds; and per job per host its GPU-seconds (the weights
    of its hosts' prices)."""
    weights = pl.DataFrame(schema={"jkey": pl.String, "host": pl.String, "gpu_s": pl.Float64})
    if alloc is None or not alloc.height:
        return pl.DataFrame(schema=_JOBS), weights
    a = _with_jkey(alloc).with_columns(
        (pl.min_horizontal(pl.col("end_s"), pl.lit(end_s)) - pl.max_horizontal(pl.col("start_s"), pl.lit(start_s)))
        .clip(lower_bound=0.0).alias("dur_s"))
    a = a.sort(a.columns, nulls_last=True)  # a fixed order (see job_table)
    jobs = a.group_by("jkey", "source", "job_id", maintain_order=True).agg(
        pl.col("job_id_raw").drop_nulls().first(), pl.col("user").drop_nulls().first().alias("a_user"),
        pl.col("account").drop_nulls().first(), pl.col("partition").drop_nulls().first(),
        pl.col("namespace").drop_nulls().first().alias("a_namespace"),
        (pl.col("gpus") * pl.col("dur_s")).sum().alias("allocated_s"), pl.col("gpus").sum().alias("alloc_gpus"),
    ).with_columns(pl.col("job_id").alias("job")).select(list(_JOBS)).cast(_JOBS)  # type: ignore[arg-type]
    by_host = a.group_by("jkey", "host", maintain_order=True).agg(
        (pl.col("gpus") * pl.col("dur_s")).sum().cast(pl.Float64).alias("gpu_s"))
    return jobs, by_host.cast(weights.schema)


def _with_jkey(alloc: pl.DataFrame) -> pl.DataFrame:
    """A job's key: source:job_id, and for a Kubernetes pod its UID too (one incarnation of the name)."""
    jkey = pl.col("source") + ":" + pl.col("job_id")
    k8s = (pl.col("source") == ALLOC_SOURCE_KUBERNETES) & pl.col("job_id_raw").is_not_null()
    return alloc.with_columns(pl.when(k8s).then(jkey + "@" + pl.col("job_id_raw")).otherwise(jkey).alias("jkey"))


def _owners(hh: pl.DataFrame, alloc: pl.DataFrame | None, jobs: pl.DataFrame, start_s: float,
            end_s: float) -> pl.DataFrame:
    """(hid, jkey): the allocated job each holder row belongs to, by the ledger's rule (jobkeys.matches); a row
    two jobs match goes to the one matched by pod UID, else the first in the jobs' fixed order."""
    if alloc is None or not alloc.height:
        return pl.DataFrame(schema={"hid": pl.UInt32, "jkey": pl.String})
    ah = split_hours(_with_jkey(alloc), start_s, end_s)
    rank = jobs.select("jkey").with_row_index("rank")
    hit = jobkeys.matches(ah, "jkey", hh, ["hid"]).join(rank, on="jkey")
    return hit.sort("hid", "by_uid", "rank", descending=[False, True, False]).unique(
        "hid", keep="first", maintain_order=True).select("hid", "jkey")


@dataclass(frozen=True)
class JobBase:
    """The job table before any price: what no price moves (the matching of holders to jobs, the sums), and
    the weights a price enters by. Stage 2 keeps it with the rollups' other price-free results (facts.py): a
    re-run with another price prices it again and matches nothing. `allocated`: allocations were imported."""

    jobs: pl.DataFrame  # per allocated job: keys, allocated_s, alloc_gpus
    alloc_weights: pl.DataFrame  # per allocated job per host: gpu_s
    held: pl.DataFrame  # per job holding GPUs: held/real/idle-held seconds, its processes' keys, gpus_used
    held_weights: pl.DataFrame  # per job per GPU: held_s
    tails: pl.DataFrame  # idle_tails: per job, the idle stretch after its last active hour
    allocated: bool


def job_base(holder_hours: pl.DataFrame, alloc: pl.DataFrame | None, start_s: float, end_s: float) -> JobBase:
    """The price-free part of job_table."""
    jobs, alloc_weights = _alloc_jobs(alloc, start_s, end_s)
    # Rows in a fixed order and groups summed in it: the same dataset read from another copy (S3, a collection
    # target) lists its files in another order, and float sums must not differ in their last bits.
    hh = holder_hours.sort(holder_hours.columns, nulls_last=True)
    if "pod_uid" not in hh.columns:
        hh = hh.with_columns(pl.lit("").alias("pod_uid"))
    hh = hh.with_row_index("hid")
    hh = hh.join(_owners(hh, alloc, jobs, start_s, end_s), on="hid", how="left", maintain_order="left")
    pod_key = pl.when(pl.col("k8s_pod") != "").then(pl.col("k8s_namespace") + "/" + pl.col("k8s_pod"))
    incarnation = pl.when(pl.col("pod_uid") != "").then(pod_key + "@" + pl.col("pod_uid")).otherwise(pod_key)
    # Holders without an allocation: their own job (or pod incarnation) is the job; held time of no job is its
    # user's.
    hh = hh.with_columns(pl.coalesce(
        pl.col("jkey"),
        pl.when(pl.col("job_id") != "").then("proc:" + pl.col("job_id")).otherwise("proc:" + incarnation),
        "user:" + pl.col("user")).alias("jkey"))
    per_hour = hh.group_by("jkey", "hour_s", maintain_order=True).agg(pl.col("held_s", "real_s", "idle_held_s").sum(),
                                                 pl.col("gpu_uuid").n_unique().alias("gpus"))
    held = hh.group_by("jkey", maintain_order=True).agg(
        pl.col("held_s", "real_s", "idle_held_s").sum(),
        pl.col("user").first().alias("p_user"), pl.col("k8s_namespace").first().alias("p_namespace"),
        pl.coalesce(pl.when(pl.col("job_id") != "").then(pl.col("job_id")), pod_key).first().alias("p_job"),
        pl.struct("gpu_uuid", "mig_instance").n_unique().alias("gpus_used"))
    held_weights = hh.group_by("jkey", "gpu_uuid", maintain_order=True).agg(pl.col("held_s").sum())
    return JobBase(jobs, alloc_weights, held, held_weights, idle_tails(per_hour),
                   alloc is not None and alloc.height > 0)


def _weighted(weights: pl.DataFrame, w: str, alias: str) -> pl.DataFrame:
    """Per job: the mean of its `usd` column weighted by `w` (NaN where the weights sum to 0)."""
    return weights.group_by("jkey", maintain_order=True).agg(
        ((pl.col(w) * pl.col("usd")).sum() / pl.col(w).sum()).alias(alias))


def priced_jobs(base: JobBase, prices: Prices) -> pl.DataFrame:
    """The job table of `base` at `prices`: per job, its group keys, allocated/held/real/idle-held seconds and
    the $/GPU-h its idle part is priced at (its GPUs' held-weighted price, else its hosts' allocation-weighted
    one, else the default)."""
    a_usd = _weighted(prices.on_hosts(base.alloc_weights), "gpu_s", "a_usd")
    jobs = base.jobs.join(a_usd.with_columns(pl.col("a_usd").fill_nan(None)), on="jkey", how="left",
                          maintain_order="left")
    held = base.held.join(_weighted(prices.on_gpus(base.held_weights), "held_s", "p_usd"), on="jkey", how="left",
                          maintain_order="left")
    out = jobs.join(held, on="jkey", how="full", coalesce=True)
    out = out.with_columns(
        pl.col("allocated_s", "held_s", "real_s", "idle_held_s").fill_null(0.0),
        pl.coalesce("job", "p_job", pl.lit("")).alias("job"),
        pl.coalesce("a_user", pl.when(pl.col("p_user") != "").then(pl.col("p_user")),
                    pl.lit(_UNATTRIBUTED)).alias("user"),
        pl.coalesce("account", pl.lit(_NO_ALLOC)).alias("account"),
        pl.coalesce("partition", pl.lit(_NO_ALLOC)).alias("partition"),
        pl.coalesce("a_namespace", pl.when(pl.col("p_namespace") != "").then(pl.col("p_namespace")),
                    pl.lit(_NO_ALLOC)).alias("namespace"),
        pl.when(pl.col("jkey").str.starts_with("user:")).then(pl.lit("user"))
        .otherwise(pl.col("source").fill_null("processes")).alias("source"),
        pl.coalesce(pl.col("p_usd").fill_nan(None), "a_usd", pl.lit(prices.default)).alias("usd"),
    )
    out = out.select("jkey", "source", "job", *KEYS, "allocated_s", "held_s", "real_s", "idle_held_s",
                     "alloc_gpus", "gpus_used", "usd")
    # Sorted once here, not in every _group_table call: the per-key sums then run in a fixed order.
    return out.sort(out.columns, nulls_last=True)


def job_table(holder_hours: pl.DataFrame, alloc: pl.DataFrame | None, start_s: float, end_s: float,
              prices: Prices | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per job: group keys, allocated/held/real/idle-held seconds and the $/GPU-h its idle part is priced at;
    per job: its idle tail, idle_tails)."""
    base = job_base(holder_hours, alloc, start_s, end_s)
    return priced_jobs(base, prices or Prices(0.0)), base.tails


def _group_table(jobs: pl.DataFrame, by: str, usd_per_gpu_hour: float, unheld_real_s: float) -> Table:
    """Chargeback rows for one key, ranked by the cost of the unused part; rows sum to the fleet totals."""
    billed = pl.max_horizontal("allocated_s", "held_s")
    # a group's unused part at its jobs' own model prices, weighted by what each billed
    rows = jobs.group_by(by, maintain_order=True).agg(
        pl.col("allocated_s", "held_s", "real_s").sum(), pl.len().alias("jobs"),
        ((billed * pl.col("usd")).sum() / billed.sum()).fill_nan(None).alias("usd_per_gpu_hour"))
    rows = rows.with_columns(pl.col("usd_per_gpu_hour").fill_null(usd_per_gpu_hour))
    if unheld_real_s > 1e-9:
        rows = pl.concat([rows, pl.DataFrame({by: [_NO_PROCESS], "allocated_s": [0.0], "held_s": [0.0],
                                              "real_s": [unheld_real_s], "jobs": [0],
                                              "usd_per_gpu_hour": [usd_per_gpu_hour]}).cast(rows.schema)])
    rows = rows.with_columns(
        (pl.col("allocated_s") / H).alias("allocated_gpu_hours"), (pl.col("held_s") / H).alias("held_gpu_hours"),
        (pl.col("real_s") / H).alias("real_gpu_hours"),
        (pl.when(billed > 0).then(pl.col("real_s") / billed)).alias("efficiency"),
        ((billed - pl.col("real_s")).clip(lower_bound=0.0) / H).alias("unused_gpu_hours"),
    ).with_columns((pl.col("unused_gpu_hours") * pl.col("usd_per_gpu_hour")).alias("unused_usd")).sort(
        ["unused_usd", by], descending=[True, False])
    cols = (TableColumn(by, "", f"the {by} (from the allocation, else the processes)"),
            TableColumn("jobs", "count", "jobs (or pods) seen"),
            TableColumn("allocated_gpu_hours", "GPU-h", "allocated by the scheduler in the trial window"),
            TableColumn("held_gpu_hours", "GPU-h", "held by the jobs' processes"),
            TableColumn("real_gpu_hours", "GPU-h", "SM activity"),
            TableColumn("efficiency", "fraction", "real ÷ max(allocated, held)"),
            TableColumn("unused_gpu_hours", "GPU-h", "max(allocated, held) − real: billed hours the SMs did not use"),
            TableColumn("unused_usd", "USD", "unused GPU-hours × usd_per_gpu_hour"),
            TableColumn("usd_per_gpu_hour", "USD/GPU-h", "the cloud flexible price of the GPUs it used, each at its "
                        f"model's own (one model: ${usd_per_gpu_hour:g})"))
    return Table(f"chargeback_{by}", f"Chargeback per {by}, ranked by the cost of the unused part.", cols,
                 tuple(rows.select([c.name for c in cols]).to_dicts()), SRC)


def idle_tails(per_hour: pl.DataFrame) -> pl.DataFrame:
    """Per job with an hour of SM activity: its last such hour, how many, and the idle tail after it (its wall
    time and idle GPU-seconds). No price: idle_jobs prices it."""
    ph = per_hour.with_columns((pl.col("real_s") >= _ZERO_UTIL_BELOW * pl.col("held_s")).alias("active")).sort(
        "jkey", "hour_s")
    last_active = ph.filter(pl.col("active")).group_by("jkey").agg(pl.col("hour_s").max().alias("last_active_s"),
                                                                  pl.len().alias("active_hours"))
    # the idle tail's wall time: each clock hour's held seconds ÷ the GPUs held in it (a job idle for the first
    # 15 minutes of a new hour idled 0.25 h, not the hour it touched)
    tail = ph.join(last_active, on="jkey").filter(pl.col("hour_s") > pl.col("last_active_s")).group_by("jkey").agg(
        (pl.col("held_s") / pl.max_horizontal(pl.col("gpus"), pl.lit(1))).sum().alias("idle_wall_s"),
        (pl.col("held_s") - pl.col("real_s")).sum().alias("tail_idle_s"))
    return last_active.join(tail, on="jkey").sort("jkey")


def idle_jobs(jobs: pl.DataFrame, tails: pl.DataFrame) -> Table:
    """Jobs that held (or were allocated) GPUs at 0 % SM activity for at least MIN_IDLE_HOURS of wall time, and
    jobs that went idle after an active stretch (the clock hours held after the last with SM activity ≥ 1 %, for
    at least MIN_IDLE_HOURS of wall time in all)."""
    real = jobs.filter(pl.col("source") != "user")
    width = pl.max_horizontal(pl.col("gpus_used").fill_null(0), pl.col("alloc_gpus").fill_null(0), pl.lit(1))
    zero = real.filter(
        ((pl.col("held_s") > 0) & (pl.col("real_s") < _ZERO_UTIL_BELOW * pl.col("held_s"))
         & (pl.col("held_s") / width >= MIN_IDLE_HOURS * H))
        | ((pl.col("held_s") <= 0) & (pl.col("allocated_s") / width >= MIN_IDLE_HOURS * H))
    ).with_columns(
        pl.when(pl.col("held_s") > 0).then(pl.lit("0 % SM activity while held"))
        .otherwise(pl.lit("allocated, no process")).alias("reason"),
        (pl.max_horizontal("allocated_s", "held_s") / H).alias("idle_gpu_hours"),
        pl.lit(None, pl.Float64).alias("active_hours"))
    went = real.join(tails, on="jkey").filter(
        (pl.col("idle_wall_s") >= MIN_IDLE_HOURS * H - 1e-6) & ~pl.col("jkey").is_in(zero["jkey"].to_list())
    ).with_columns(pl.lit("idle after an active stretch").alias("reason"),
                   (pl.col("tail_idle_s") / H).alias("idle_gpu_hours"),
                   pl.col("active_hours").cast(pl.Float64))
    cols = (TableColumn("job", "", "job id (Slurm JobID, or namespace/pod)"), TableColumn("user", "", "user"),
            TableColumn("account", "", "account"), TableColumn("reason", "", "why it is listed"),
            TableColumn("allocated_gpu_hours", "GPU-h", "allocated"), TableColumn("held_gpu_hours", "GPU-h", "held"),
            TableColumn("real_gpu_hours", "GPU-h", "SM activity"),
            TableColumn("idle_gpu_hours", "GPU-h", "the idle part (after the active stretch for that reason)"),
            TableColumn("active_hours", "hours", "hours with SM activity before it went idle"),
            TableColumn("idle_usd", "USD", "idle GPU-hours × the cloud flexible price of its GPUs' model"))
    both = pl.concat([d.select("job", "user", "account", "reason", "allocated_s", "held_s", "real_s",
                               "idle_gpu_hours", "active_hours", "usd") for d in (zero, went)])
    both = both.with_columns((pl.col("allocated_s") / H).alias("allocated_gpu_hours"),
                             (pl.col("held_s") / H).alias("held_gpu_hours"),
                             (pl.col("real_s") / H).alias("real_gpu_hours"),
                             (pl.col("idle_gpu_hours") * pl.col("usd")).alias("idle_usd")).sort(
        ["idle_usd", "job"], descending=[True, False])
    return Table("idle_jobs", "Jobs that held GPUs at 0 % for at least an hour, or went idle for at least an "
                 "hour after an active stretch (Job Defense Shield style), most costly first.", cols,
                 tuple(both.select([c.name for c in cols]).to_dicts()), SRC)


def unheld_real_s(gpu_hours: pl.DataFrame) -> float:
    """SM activity outside held time (S − S while held), summed per GPU-hour: not the difference of two fleet
    totals, which loses the small remainder to rounding. A GPU-hour whose two sums differ by less than 10 ppm
    of its SM activity (an engine's float rounding, not a second of work) counts none."""
    d = pl.col("real_s") - pl.col("real_held_s")
    kept = pl.when(d > 1e-5 * pl.col("real_s")).then(d).otherwise(0.0)
    return float(gpu_hours.select(kept.sum()).item() or 0.0)


@dataclass(frozen=True)
class Prices:
    """The cloud flexible $/GPU-h an idle hour is priced at: per GPU (its model's) and per host (for allocations
    with no holder: the mean of its GPUs'), `default` where neither is known (one model: the only price)."""

    default: float
    by_gpu: dict[str, float] = field(default_factory=dict)
    by_host: dict[str, float] = field(default_factory=dict)

    def on_gpus(self, df: pl.DataFrame) -> pl.DataFrame:
        return df.with_columns(pl.col("gpu_uuid").replace_strict(self.by_gpu, default=self.default,
                                                                 return_dtype=pl.Float64).alias("usd"))

    def on_hosts(self, df: pl.DataFrame) -> pl.DataFrame:
        return df.with_columns(pl.col("host").replace_strict(self.by_host, default=self.default,
                                                                return_dtype=pl.Float64).alias("usd"))


def chargeback(holder_hours: pl.DataFrame, alloc: pl.DataFrame | None, start_s: float, end_s: float,
               usd_per_gpu_hour: float, unheld_real_s: float, prices: Prices | None = None) -> Chargeback:
    return priced_chargeback(job_base(holder_hours, alloc, start_s, end_s), usd_per_gpu_hour, unheld_real_s, prices)


def priced_chargeback(base: JobBase, usd_per_gpu_hour: float, unheld_real_s: float,
                      prices: Prices | None = None) -> Chargeback:
    """The chargeback tables of a job base at these prices."""
    jobs = priced_jobs(base, prices or Prices(usd_per_gpu_hour))
    tables = {by: _group_table(jobs, by, usd_per_gpu_hour, unheld_real_s) for by in KEYS}
    idle = idle_jobs(jobs, base.tails)
    if not base.allocated:  # nothing imported: allocated is unknown, not 0 GPU-h
        tables = {k: _unknown_allocated(t) for k, t in tables.items()}
        idle = _unknown_allocated(idle)
    return Chargeback(usd_per_gpu_hour=usd_per_gpu_hour, by_account=tables["account"], by_user=tables["user"],
                      by_partition=tables["partition"], by_namespace=tables["namespace"], idle_jobs=idle)


def _unknown_allocated(t: Table) -> Table:
    """The table with allocated_gpu_hours empty: without scheduler allocations there is no allocated figure (a
    0 there read as "nothing was allocated" beside the ledger's allocated = held)."""
    return dataclasses.replace(t, rows=tuple({**row, "allocated_gpu_hours": None} for row in t.rows))
