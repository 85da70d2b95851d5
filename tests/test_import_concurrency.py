"""A reader during an import's publish sees every row exactly once: an import that replaces earlier rows (its
own file, or rows a compaction merged into another file) keeps the files an open reader listed, and never
rewrites a file in place under the reader. Against a real Prometheus (tests/prom_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest
from tests.helpers import require_binary
from tests.prom_helpers import START, Gpu, PromServer, fleet_server

from gpuaudit import schema, store
from gpuaudit.importer.promclient import transport
from gpuaudit.importer.prometheus import import_prometheus
from gpuaudit.importer.prometheus.mapping import build_mapping

pytestmark = pytest.mark.prometheus
HOW = "install Prometheus (it ships promtool): apt-get install --no-install-recommends prometheus"
COUNT = "SELECT (SELECT count(*) FROM samples), (SELECT count(*) FROM processes)"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PromServer, list[Gpu]]]:
    yield from fleet_server(require_binary("prometheus", HOW), require_binary("promtool", HOW),
                            tmp_path_factory.mktemp("prom"))


def _import(server: PromServer, root: Path, hours: tuple[int, int]) -> None:
    start, end = START + timedelta(hours=hours[0]), START + timedelta(hours=hours[1])
    import_prometheus(root, transport(server.url, retries=0), build_mapping(), start, end, 300)


def _count(ds: store.Dataset) -> tuple[int, int]:
    n = ds.fetchall(COUNT)[0]
    return int(n[0]), int(n[1])


def _parquet(root: Path) -> set[Path]:
    return set(root.glob("gpu_*/*/*/*.parquet"))


def test_a_reader_open_during_a_reimport_keeps_its_rows(prom: tuple[PromServer, list[Gpu]], tmp_path: Path) -> None:
    """Defect: the re-import moved its earlier file away under an open reader, which then skipped it as
    unreadable (every imported row gone from its view)."""
    server, _ = prom
    root = tmp_path / "d"
    _import(server, root, (0, 24))
    store.compact(root)  # lock files exist, as on any node that compacts
    _import(server, root, (0, 24))  # the importer's own file again, not merged
    with store.open_dataset(root) as ds:
        truth = _count(ds)
        listed = _parquet(root)
        _import(server, root, (12, 24))  # the same rows again: the counts do not change
        assert listed <= _parquet(root)  # kept for the open reader
        assert _count(ds) == truth and ds.skipped == [] and ds.relists == 0
        with store.open_dataset(root) as fresh:
            assert _count(fresh) == truth and fresh.skipped == []


def test_rows_merged_by_a_compaction_are_replaced_under_a_new_name(prom: tuple[PromServer, list[Gpu]],
                                                                  tmp_path: Path) -> None:
    """Defect: a re-import rewrote the compacted file in place (its imported rows left out, their replacements
    in the import's new file), so a reader that had listed it read the new version without the replacements:
    rows missing. Now the rewrite gets a new name and a record; the reader keeps reading what it listed."""
    server, _ = prom
    root = tmp_path / "d"
    agent_row = {"ts": [START + timedelta(hours=5)], "interval_s": [10.0], "host": ["node-a"],
                 "gpu_uuid": ["GPU-agent"], "gpu_fraction": [1.0], "sm_active": [0.9], "n_processes": [1],
                 "source": [schema.SOURCE_NVML_GPM]}
    store.write_table(root, schema.SAMPLES, pl.DataFrame(agent_row))
    _import(server, root, (0, 24))
    store.compact(root)  # the importer's rows now live in compact-*.parquet files, with the agent's row
    compacted = {f: f.read_bytes() for f in _parquet(root)}
    with store.open_dataset(root) as ds:
        truth = _count(ds)
        _import(server, root, (12, 24))
        for f, data in compacted.items():  # what the reader listed is there, unchanged
            assert f.read_bytes() == data
        assert _count(ds) == truth and ds.skipped == []
    with store.open_dataset(root) as fresh:
        assert _count(fresh) == truth and fresh.skipped == []
    store.compact(root)  # no reader open: the replaced versions go
    with store.open_dataset(root) as ds:
        assert _count(ds) == truth
        assert not set(compacted) & _parquet(root)
