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

# The modules with the longest single tests (a JVM, a fresh venv, a real Prometheus scraping an agent, random
# kills), measured with --durations: started first, so that no worker begins a long one when the rest are done.
LONG_FIRST = ("test_spark.py", "test_package.py", "test_analysis_scenarios.py", "test_agent_crash.py",
              "test_collection.py", "test_gpu_check.py", "test_import_prometheus_agent.py", "test_rollup_cache.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each module keeps its order


@pytest.fixture(autouse=True)
def _own_cache_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own $XDG_CACHE_HOME (its processes inherit it): no test reads charts or an s3:// dataset's
    rollups another test cached, and none writes into the ~/.cache of whoever runs the suite."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg")))


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
