"""Small datasets for the store, reader and sql tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from gpuaudit import schema, store

T0 = datetime(2026, 3, 1, 23, 0, tzinfo=UTC)


def samples_frame(n: int = 600, hosts: tuple[str, ...] = ("node-a", "node-b"), step_s: int = 20) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "ts": [T0 + timedelta(seconds=step_s * (i // len(hosts))) for i in range(n)],
            "interval_s": [float(step_s)] * n,
            "host": [hosts[i % len(hosts)] for i in range(n)],
            "gpu_uuid": [f"GPU-{i % len(hosts)}" for i in range(n)],
            "gpu_index": [0] * n,
            "gpu_fraction": [1.0] * n,
            "sm_active": [round((i % 10) / 10, 3) for i in range(n)],
            "duty_cycle": [min(1.0, (i % 10) / 10 + 0.1) for i in range(n)],
            "n_processes": [i % 2 for i in range(n)],
            "source": ["simulated"] * n,
        }
    )


def count(root: Path, view: str = "samples") -> int:
    with store.open_dataset(root) as ds:
        return ds.fetchall(f"SELECT count(*) FROM {view}")[0][0]


def raw_file(root: Path, table: str, rows: list[dict], name: str = "foreign", *, contract: bool = True,
             change=None) -> Path:
    """Write `rows` (one host, one UTC date) as a Parquet file straight into the partition, bypassing
    store.write_table and its checks: what a foreign producer or a hand-edited file looks like. `contract`
    casts the columns to their contract types first; `change` edits the frame before it is written."""
    frame = pl.DataFrame(rows, infer_schema_length=None)
    if contract:
        types = {c.name: _POLARS[c.sql_type] for c in schema.COLUMNS[table]}
        frame = frame.with_columns(pl.col(n).cast(types[n]) for n in frame.columns if n in types)
    host, date = rows[0]["host"], rows[0]["ts"].astimezone(UTC).date().isoformat()
    frame = frame.drop("host")
    if change is not None:
        frame = change(frame)
    path = store.partition_dir(root, table, host, date) / f"{name}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.write_parquet(path)
    return path


def _fragmented(root: Path, writes: int = 3, hosts: int = 8) -> None:
    names = tuple(f"node-{i}" for i in range(hosts))
    for k in range(writes):
        store.write_table(root, schema.SAMPLES, samples_frame(20 * hosts, hosts=names).with_columns(
            ts=pl.col("ts") + timedelta(minutes=10 * k)))


_POLARS = {"FLOAT": pl.Float32, "SMALLINT": pl.Int16, "INTEGER": pl.Int32, "BIGINT": pl.Int64,
           "VARCHAR": pl.String, "TIMESTAMPTZ": pl.Datetime("us", "UTC")}
