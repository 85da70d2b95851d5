"""Fixtures shared by test modules: a simulated node's frames and a node that grows by flushes
(tests/collection_helpers.py), and a moto S3 server on 127.0.0.1 (tests/s3_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from tests.collection_helpers import Node
from tests.s3_helpers import S3Server, moto_s3

from gpuaudit import schema, store
from gpuaudit.sim import bulk as sim


@pytest.fixture(scope="module")
def frames(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pl.DataFrame]:
    """One simulated 8-GPU node over 2 days (both tables), read back as frames."""
    root = tmp_path_factory.mktemp("sim")
    sim.simulate(root, "phantom", gpus=8, days=2, interval_s=900, seed=3)
    with store.open_dataset(root) as ds:
        # The tables an agent flushes (the simulator also writes the scheduler's allocations, which no node does).
        return {t: ds.query(f"SELECT * EXCLUDE (date) FROM {schema.VIEW_NAMES[t]} ORDER BY ALL")
                for t in (schema.SAMPLES, schema.PROCESSES)}


@pytest.fixture
def node(tmp_path: Path, frames: dict[str, pl.DataFrame]) -> Node:
    return Node(tmp_path / "node", frames)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with moto_s3() as server:
        yield server
