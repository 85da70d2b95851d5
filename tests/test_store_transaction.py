"""store/transaction: the one "replace this source's rows in this window" that importers use: staged,
recorded, published all at once, restored when publishing fails part-way."""

from __future__ import annotations

import hashlib
import os
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

from gpuaudit import schema, store
from gpuaudit.store import transaction
from store_helpers import T0, samples_frame

SOURCE = schema.IMPORT_SOURCES[0]
MINE = pl.col("source") == SOURCE


def _rows(n: int, sm: float, host: str = "node-a", gpu: str = "GPU-0") -> pl.DataFrame:
    return samples_frame(n, hosts=(host,)).with_columns(pl.lit(gpu).alias("gpu_uuid"), pl.lit(sm).alias("sm_active"),
                                                        pl.lit(SOURCE).alias("source"))


def _replace(root: Path, rows: pl.DataFrame, window: tuple, match: pl.Expr | None = None) -> int:
    parts = [transaction.Part(str(h), d.isoformat(), p.drop("_d"), match) for (h, d), p in
             rows.with_columns(pl.col("ts").dt.date().alias("_d")).partition_by("host", "_d", as_dict=True).items()]
    with transaction.replacing(root, "own") as tx:
        n = tx.replace(schema.SAMPLES, parts, source=MINE, window=window)
    assert tx.files and all(f.is_file() and f.name.startswith("own-") for f in tx.files)
    return n


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file() and store.STAGING not in p.parts and not p.name.endswith(".lock")}


def _sm(root: Path) -> list[tuple]:
    with store.open_dataset(root) as ds:
        return ds.fetchall("SELECT source, round(sm_active::DOUBLE, 3), count(*) FROM samples "
                           "GROUP BY ALL ORDER BY ALL")


def test_a_transaction_replaces_the_sources_rows_in_its_window_only(tmp_path: Path) -> None:
    root = tmp_path / "d"
    store.write_table(root, schema.SAMPLES, samples_frame(20, hosts=("node-a",)))  # another source: kept
    end = T0 + timedelta(seconds=20 * 10)
    assert _replace(root, _rows(10, 0.25), (T0 - timedelta(seconds=20), end)) == 0
    # Again over the second half: its rows replace those five, the first five stay, nothing counted twice.
    again = _rows(10, 0.75).filter(pl.col("ts") > T0 + timedelta(seconds=20 * 4))
    assert _replace(root, again, (T0 + timedelta(seconds=20 * 4), end)) == 5
    assert _sm(root) == sorted([(SOURCE, 0.25, 5), (SOURCE, 0.75, 5)] + [
        ("simulated", round(i / 10, 3), 2) for i in range(10)])
    own = sorted(p.name for p in root.rglob("own-*.parquet"))
    assert len(own) == 1  # the earlier file was replaced (no reader held the dataset open)
    assert not list((root / store.STAGING).glob(f"{transaction.STAGE_PREFIX}*"))


def test_a_rename_failing_part_way_leaves_the_dataset_as_it_was(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Two partitions published; the second file's rename fails: the first is put back (it replaced the
    owner's earlier file there), the record that hid it removed, and the error says so."""
    root = tmp_path / "d"
    window = (T0 - timedelta(seconds=20), T0 + timedelta(seconds=200))
    first = pl.concat([_rows(10, 0.25, "node-a"), _rows(10, 0.25, "node-b", "GPU-1")])
    _replace(root, first, window)
    before, rows = _snapshot(root), _sm(root)
    real, calls = os.replace, []

    def replace(src: os.PathLike[str] | str, dst: os.PathLike[str] | str) -> None:
        if Path(dst).suffix == ".parquet" and root in Path(dst).parents and store.STAGING not in Path(dst).parts:
            calls.append(dst)
            if len(calls) == 2:
                raise OSError(5, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(transaction.WriteFailed, match=r"cannot write to .*Input/output error") as e:
        _replace(root, first.with_columns(pl.lit(0.75).alias("sm_active")), window)
    assert e.value.begun
    assert _snapshot(root) == before and _sm(root) == rows
    assert not list((root / store.STAGING).glob(f"{transaction.STAGE_PREFIX}*"))
