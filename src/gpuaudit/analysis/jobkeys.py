"""Job keys: how an allocation and a process name the same job, for the ledger and the chargeback.

An allocation (gpu_allocations) and a holder (gpu_processes, per GPU-hour) are joined on a key:

    j:<id>             Slurm: the allocation's JobID and JobIDRaw; the process's job id (cgroup or hpc_job label)
    p:<namespace/pod>  Kubernetes: the allocation's job_id; the process's k8s_namespace + "/" + k8s_pod
    u:<uid>            Kubernetes: the allocation's job_id_raw (pod UID); the process's pod_uid (the agent's
                       cgroup, dcgm-exporter's pod_uid label), and its k8s_pod where only the UID is known

Every allocation source other than Kubernetes is keyed as Slurm (a job id). The rule (`matches`, the one the
ledger and the chargeback both use): an allocation matches the holders of its keys on its host in the hours it
overlaps; where some of them match by pod UID, only those (a StatefulSet's next pod reuses the name, never the
UID).
"""

from __future__ import annotations

import polars as pl

from gpuaudit.schema import ALLOC_SOURCE_KUBERNETES

JOB, POD, UID = "j:", "p:", "u:"


def _is_kubernetes() -> pl.Expr:
    return pl.col("source") == ALLOC_SOURCE_KUBERNETES


def alloc_keys(a: pl.DataFrame, id_col: str, job_col: str) -> pl.DataFrame:
    """(id_col, key) pairs an allocation matches holders by, in a fixed order (JobID before JobIDRaw, pod name
    before UID); `job_col` holds the scheduler's job id (Slurm JobID, Kubernetes namespace/pod)."""
    k8s = _is_kubernetes()
    raw = pl.col("job_id_raw").is_not_null()
    return pl.concat([
        a.filter(~k8s).select(id_col, (JOB + pl.col(job_col)).alias("key")),
        a.filter(~k8s & raw).select(id_col, (JOB + pl.col("job_id_raw")).alias("key")),
        a.filter(k8s).select(id_col, (POD + pl.col(job_col)).alias("key")),
        a.filter(k8s & raw).select(id_col, (UID + pl.col("job_id_raw")).alias("key")),
    ])


def _pod() -> pl.Expr:
    return pl.col("k8s_namespace") + "/" + pl.col("k8s_pod")


def holder_keys(h: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    """Every key a holder row can match (job id, pod name, pod UID), with `cols` carried along. A holders frame
    without the pod_uid column matches by name and name-as-UID only."""
    uid = [h.filter(pl.col("pod_uid") != "").select(*cols, (UID + pl.col("pod_uid")).alias("key"))]\
        if "pod_uid" in h.columns else []
    return pl.concat([
        h.filter(pl.col("job_id") != "").select(*cols, (JOB + pl.col("job_id")).alias("key")),
        h.filter(pl.col("k8s_pod") != "").select(*cols, (POD + _pod()).alias("key")),
        h.filter(pl.col("k8s_pod") != "").select(*cols, (UID + pl.col("k8s_pod")).alias("key")),
        *uid,
    ]).unique()


def matches(alloc_hours: pl.DataFrame, id_col: str, holders: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    """(id_col, host, hour_s, *cols, key, by_uid): the holder rows each allocation matches. `alloc_hours` has
    one row per allocation per host-hour it overlaps (id_col, source, job_id, job_id_raw, host, hour_s);
    `holders` one per holder per host-hour, `cols` naming a holder row (its GPU, or a row id)."""
    keys = alloc_keys(alloc_hours.select(id_col, "source", "job_id", "job_id_raw").unique(id_col, maintain_order=True),
                      id_col, "job_id").unique(maintain_order=True)
    hits = keys.join(holder_keys(holders, ["host", "hour_s", *cols]), on="key").join(
        alloc_hours.select(id_col, "host", "hour_s").unique(), on=[id_col, "host", "hour_s"], how="semi")
    hits = hits.with_columns(pl.col("key").str.starts_with(UID).alias("by_uid"))
    by_uid = hits.filter(pl.col("by_uid"))
    return pl.concat([by_uid, hits.join(by_uid.select(id_col).unique(), on=id_col, how="anti")])


def _holder_key() -> pl.Expr:
    """A holder's first key: its job id, else its pod name (null when it has neither)."""
    return (pl.when(pl.col("job_id") != "").then(JOB + pl.col("job_id"))
            .when(pl.col("k8s_pod") != "").then(POD + _pod())
            .otherwise(pl.lit(None)))


def _uid_key() -> pl.Expr:
    """A holder's pod as a UID key (for a pod known by its UID only)."""
    return UID + pl.col("k8s_pod")
