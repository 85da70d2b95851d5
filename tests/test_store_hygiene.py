"""Dataset hygiene on the reader's side: what a directory anyone can write into may hold besides gpuaudit's
own files, and how every reader (the views, `gpuaudit sql`, the canned queries, `analyze`) treats it: left
out, and named."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import polars as pl
import pytest
from tests.collection_helpers import Node

from gpuaudit import schema, store
from gpuaudit.store import sqlquery
from gpuaudit.util import resources


def _one_flush(node: Node) -> Node:
    node.flush(0)
    return node


def _count(root: Path, view: str = "samples") -> int:
    with store.open_dataset(root) as ds:
        return int(ds.fetchall(f"SELECT count(*) FROM {view}")[0][0])


def _parts(root: Path, table: str = schema.SAMPLES) -> list[Path]:
    return sorted((root / table).glob("host=*/date=*"))


def test_an_exact_copy_of_a_file_is_counted_once_and_named(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    """Defect: `cp x.parquet y.parquet` doubled every row of x in `samples` and sql/fleet_summary.sql."""
    _one_flush(node)
    before = _count(node.root)
    original = sorted(_parts(node.root)[0].glob("*.parquet"))[0]
    copy = original.with_name("zz-copy.parquet")
    shutil.copyfile(original, copy)
    with caplog.at_level(logging.WARNING, logger="gpuaudit"), _sql_dataset(node.root) as ds:
        assert int(ds.fetchall("SELECT count(*) FROM samples")[0][0]) == before
        assert [p for p, _ in ds.skipped] == [copy]
        with_copy = sqlquery.run_query(ds, resources.load_sql("fleet_summary")).to_pylist()
    assert any(str(copy) in r.getMessage() and str(original) in r.getMessage() for r in caplog.records)
    copy.unlink()
    with _sql_dataset(node.root) as ds:  # the canned query counts each row once
        assert sqlquery.run_query(ds, resources.load_sql("fleet_summary")).to_pylist() == with_copy
        assert int(ds.fetchall("SELECT count(*) FROM samples")[0][0]) == before


def _sql_dataset(root: Path) -> store.Dataset:
    """The dataset as `gpuaudit sql` opens it (locked down, with the analyzer's streams for the canned queries)."""
    from gpuaudit.analysis.stage1.streams import user_views

    return store.open_dataset(root, strict=True, views=user_views())


def test_files_of_the_same_size_but_other_rows_are_both_read(node: Node) -> None:
    """Only an exact copy is left out: two files of one size with different rows both count."""
    node.flush(0)
    part = _parts(node.root)[0]
    f = sorted(part.glob("*.parquet"))[0]
    df = pl.read_parquet(f)
    shifted = df.with_columns(pl.col("ts") + pl.duration(seconds=1))
    store.write_table(node.root, schema.SAMPLES, shifted.with_columns(pl.lit(part.parent.name[5:]).alias("host")))
    with store.open_dataset(node.root) as ds:
        assert ds.skipped == []


def test_a_date_directory_that_is_not_a_date_is_skipped_and_named(node: Node,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """Defect: one `date=notadate` directory made every `sql` query reading `date` fail."""
    _one_flush(node)
    before = _count(node.root)
    good = _parts(node.root)[0]
    bad = good.with_name("date=notadate")
    shutil.copytree(good, bad)
    with caplog.at_level(logging.WARNING, logger="gpuaudit"), store.open_dataset(node.root, strict=True) as ds:
        table = sqlquery.run_query(ds, "SELECT count(*) AS n, count(DISTINCT date) AS d FROM samples")
        assert table.column("n").to_pylist() == [before]
        assert bad in [p for p, _ in ds.skipped]
    assert any(str(bad) in r.getMessage() for r in caplog.records)


def test_a_symlink_out_of_the_data_root_is_not_followed(node: Node, tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """Defect: a symlink to a file outside the data root was read and counted."""
    _one_flush(node)
    before = _count(node.root)
    part = _parts(node.root)[0]
    outside = tmp_path / "elsewhere.parquet"
    shutil.copyfile(sorted(part.glob("*.parquet"))[0], outside)
    pl.read_parquet(outside).with_columns(pl.col("ts") + pl.duration(seconds=1)).write_parquet(outside)
    link = part / "link.parquet"
    link.symlink_to(outside)
    inside = part / "inside.parquet"  # a link within the root is just another name: followed
    with caplog.at_level(logging.WARNING, logger="gpuaudit"), store.open_dataset(node.root) as ds:
        assert int(ds.fetchall("SELECT count(*) FROM samples")[0][0]) == before
        assert [p for p, _ in ds.skipped] == [link]
    assert any(str(link) in r.getMessage() and "outside" in r.getMessage() for r in caplog.records)
    link.unlink()
    outside.rename(part / "real.parquet")
    inside.symlink_to(part / "real.parquet")
    with store.open_dataset(node.root) as ds:  # link and target are one file: the copy rule keeps one
        assert len([p for p, _ in ds.skipped]) == 1


def test_a_samples_file_in_gpu_processes_is_not_process_rows(node: Node) -> None:
    """Defect: a samples-shaped file dropped into gpu_processes counted as process rows."""
    _one_flush(node)
    before = _count(node.root, "processes")
    sample_file = sorted(_parts(node.root)[0].glob("*.parquet"))[0]
    stray = _parts(node.root, schema.PROCESSES)[0] / "stray.parquet"
    shutil.copyfile(sample_file, stray)
    with store.open_dataset(node.root) as ds:
        assert int(ds.fetchall("SELECT count(*) FROM processes")[0][0]) == before
        (path, why), = ds.skipped
        assert path == stray and "gpu_samples" in why


def test_negative_counts_and_indices_are_rejected(node: Node) -> None:
    """Defect: n_processes = -5 passed the contract."""
    _one_flush(node)
    before = _count(node.root)
    part = _parts(node.root)[0]
    df = pl.read_parquet(sorted(part.glob("*.parquet"))[0])
    bad = df.head(3).with_columns(pl.lit(-5, pl.Int16).alias("n_processes"), pl.col("ts") + pl.duration(seconds=1))
    bad.write_parquet(part / "negative.parquet")
    with store.open_dataset(node.root) as ds:
        assert int(ds.fetchall("SELECT count(*) FROM samples")[0][0]) == before
        assert ("gpu_samples", "n_processes negative", 3) in ds.rejected_rows()


def test_a_file_under_host_without_a_date_is_named(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    """Defect: a Parquet file directly under host= (no date=) was ignored silently."""
    _one_flush(node)
    part = _parts(node.root)[0]
    loose = part.parent / "loose.parquet"
    shutil.copyfile(sorted(part.glob("*.parquet"))[0], loose)
    with caplog.at_level(logging.WARNING, logger="gpuaudit"), store.open_dataset(node.root) as ds:
        assert loose in [p for p, _ in ds.skipped]
    assert any(str(loose) in r.getMessage() and "date=" in r.getMessage() for r in caplog.records)
