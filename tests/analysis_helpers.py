"""Tiny hand-made datasets for the analyzer tests, written through the real store into tmp_path."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from gpuaudit import schema, store

T0 = dt.datetime(2026, 3, 2, 0, 0, tzinfo=dt.UTC)  # a Monday, 00:00 UTC


def gpu_rows(
    host: str,
    uuid: str,
    n: int,
    *,
    interval_s: float = 60.0,
    start: dt.datetime = T0,
    sm: float | Callable[[int], float | None] | None = 0.0,
    duty: float | Callable[[int], float | None] | None = None,
    procs: int | Callable[[int], int] = 0,
    power_w: float | None = 300.0,
    source: str = schema.SOURCE_SIMULATED,
    mig_instance: int | None = None,
    gpu_fraction: float = 1.0,
    mem_used_bytes: int = 1_000_000,
) -> list[dict[str, Any]]:
    """n consecutive samples of one GPU; the i-th interval ends at start + (i+1) × interval_s.
    sm / duty / procs may be constants or functions of i."""

    def val(x: Any, i: int) -> Any:
        return x(i) if callable(x) else x

    rows = []
    for i in range(n):
        s = val(sm, i)
        d = val(duty, i)
        rows.append(
            {
                "ts": start + dt.timedelta(seconds=(i + 1) * interval_s),
                "interval_s": interval_s,
                "host": host,
                "gpu_uuid": uuid,
                "gpu_index": 0,
                "gpu_name": "NVIDIA H100 80GB HBM3",
                "mig_instance": mig_instance,
                "gpu_fraction": gpu_fraction,
                "sm_active": s,
                "duty_cycle": s if d is None else d,
                "mem_used_bytes": mem_used_bytes,
                "mem_total_bytes": 80_000_000_000,
                "power_w": power_w,
                "energy_j": None if power_w is None else power_w * interval_s,
                "n_processes": val(procs, i),
                "source": source,
            }
        )
    return rows


def proc_rows(
    host: str, uuid: str, times: Sequence[dt.datetime], *, user: str = "alice", job_id: str | None = None,
    pod: str | None = None, pid: int = 100, mig_instance: int | None = None,
) -> list[dict[str, Any]]:
    return [
        {"ts": t, "host": host, "gpu_uuid": uuid, "mig_instance": mig_instance, "pid": pid, "user": user,
         "job_id": job_id, "k8s_namespace": "ml" if pod else None, "k8s_pod": pod, "command": "python train.py",
         "mem_used_bytes": 1_000_000}
        for t in times
    ]


def ends(rows: list[dict[str, Any]], pred: Callable[[int], bool] | None = None) -> list[dt.datetime]:
    """The ts of rows (optionally only where pred(i) holds): where to put process rows."""
    return [r["ts"] for i, r in enumerate(rows) if pred is None or pred(i)]


def write(root: Path, samples: list[dict[str, Any]], processes: list[dict[str, Any]] | None = None) -> Path:
    sample_schema = {
        "ts": pl.Datetime("us", "UTC"), "interval_s": pl.Float64, "host": pl.String, "gpu_uuid": pl.String,
        "gpu_index": pl.Int16, "gpu_name": pl.String, "mig_instance": pl.Int16, "gpu_fraction": pl.Float64,
        "sm_active": pl.Float64, "duty_cycle": pl.Float64, "mem_used_bytes": pl.Int64,
        "mem_total_bytes": pl.Int64, "power_w": pl.Float64, "energy_j": pl.Float64, "n_processes": pl.Int16,
        "source": pl.String,
    }
    store.write_table(root, schema.SAMPLES, pl.DataFrame(samples, schema=sample_schema))
    if processes:
        proc_schema = {
            "ts": pl.Datetime("us", "UTC"), "host": pl.String, "gpu_uuid": pl.String, "mig_instance": pl.Int16,
            "pid": pl.Int32, "user": pl.String, "job_id": pl.String, "k8s_namespace": pl.String,
            "k8s_pod": pl.String, "command": pl.String, "mem_used_bytes": pl.Int64,
        }
        store.write_table(root, schema.PROCESSES, pl.DataFrame(processes, schema=proc_schema))
    return root


def rollups(samples: list[dict[str, Any]], processes: list[dict[str, Any]] | None = None,
            allocations: list[dict[str, Any]] | None = None) -> Any:
    """The analyzer's stage-1 rollups computed by the real SQL in an in-memory DuckDB (no files): fast
    enough for property tests."""
    import duckdb

    from gpuaudit.analysis.stage1.rollup import rollups_from

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for view, table, rows in (("samples", schema.SAMPLES, samples), ("processes", schema.PROCESSES, processes),
                              ("allocations", schema.ALLOCATIONS, allocations)):
        if rows:
            frame = pl.DataFrame(rows, infer_schema_length=None)
            con.register(f"_{view}", frame)
            select = f"SELECT {schema.typed_select(table, set(frame.columns))} FROM _{view}"
        else:
            select = schema.empty_select(table)
        con.execute(f"CREATE VIEW {view} AS {select}")
    class _Engine:
        def materialize(self, name: str, sql: str) -> None:
            con.execute(f"CREATE TEMP TABLE {name} AS {sql}")

        def query(self, sql: str) -> Any:
            return con.sql(sql).pl()

    return rollups_from(_Engine())
