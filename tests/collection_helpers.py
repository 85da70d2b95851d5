"""A simulated node whose dataset grows by flushes, and how to compare datasets: shared by the collection
tests (test_collection.py, test_push.py; their fixtures are in conftest.py)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from gpuaudit import schema, store

CHUNKS = 4  # the simulated node "flushes" its rows in this many batches; each touches every partition


class Node:
    """A node's dataset that grows by flushes (one new file per partition and table each), as the agent's does."""

    def __init__(self, root: Path, frames: dict[str, pl.DataFrame]) -> None:
        self.root, self.frames = root, frames

    def flush(self, k: int) -> None:
        for table, df in self.frames.items():
            part = df.filter(pl.int_range(pl.len()) % CHUNKS == k)
            store.write_table(self.root, table, part, prefix=f"agent-flush{k}")

    def files(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.glob("gpu_*/*/*/*.parquet"))


def rows(root: Path | str) -> dict[str, pl.DataFrame]:
    """Every row of both views, sorted: equal frames mean no row lost and none counted twice."""
    with store.open_dataset(root) as ds:
        assert ds.skipped == []
        return {v: ds.query(f"SELECT * FROM {v} ORDER BY ALL") for v in schema.VIEW_NAMES.values()}


def assert_same_rows(a: Path | str, b: Path | str) -> None:
    ra, rb = rows(a), rows(b)
    for view in ra:
        assert ra[view].height == rb[view].height, view
        assert ra[view].equals(rb[view]), view


def target_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.glob("gpu_*/*/*/*.parquet"))


# --- the pure rule ---------------------------------------------------------------------------------------
