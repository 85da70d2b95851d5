"""Readers during a compaction, an import's publish and a push's prune see every row exactly once, at every
moment, and never call a file that was compacted away damaged. Deterministic: the writer runs in this thread
and calls a hook after each of its steps, where readers open, query and compare."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from tests.collection_helpers import CHUNKS, Node

from gpuaudit import push, schema, store
from gpuaudit.analysis.stage1.rollup import DuckDBEngine, rollups_from
from gpuaudit.store import readers, sqlquery

COUNT = "SELECT (SELECT count(*) FROM samples), (SELECT count(*) FROM processes)"


def _flushed(node: Node) -> Node:
    for k in range(CHUNKS):
        node.flush(k)
    return node


def _truth(node: Node) -> tuple[int, int]:
    return node.frames[schema.SAMPLES].height, node.frames[schema.PROCESSES].height


def _count(ds: store.Dataset) -> tuple[int, int]:
    n = ds.fetchall(COUNT)[0]
    return int(n[0]), int(n[1])


def _parquet(root: Path) -> list[Path]:
    return sorted(root.glob("gpu_*/*/*/*.parquet"))


def test_a_reader_opened_before_a_first_compaction_sees_every_row(node: Node) -> None:
    """Defect: files the compaction deleted after the reader listed them were skipped as "unreadable" and the
    merged file was not in the listing: 1/4 of the rows, exit 0. No lock file existed when the reader opened
    (no compaction ever ran), so the compaction deletes at once: the reader must notice and list again."""
    _flushed(node)
    with store.open_dataset(node.root) as ds:
        store.compact(node.root)
        assert len(_parquet(node.root)) == 2 * 2  # two tables, two days: deleted at once, nobody held the lock
        assert _count(ds) == _truth(node)
        assert ds.skipped == []  # compacted away is not damaged
        assert ds.relists == 1


def test_a_reader_holding_the_dataset_keeps_the_replaced_files_until_a_later_compaction(node: Node) -> None:
    """Once the lock files exist, an open reader keeps the files it listed: the compaction hides them (its
    record) and leaves them; the reader reads its snapshot without listing again. A later compaction with no
    reader open removes them."""
    node.flush(0)
    store.compact(node.root)  # creates the lock files
    for k in range(1, CHUNKS):
        node.flush(k)
    before = _parquet(node.root)
    with store.open_dataset(node.root) as ds:
        stats = store.compact(node.root)
        assert stats.kept == len(before)
        assert set(before) <= set(_parquet(node.root))  # nothing this reader listed is gone
        assert _count(ds) == _truth(node) and ds.relists == 0 and ds.skipped == []
        with store.open_dataset(node.root) as fresh:  # a new reader hides the kept files
            assert _count(fresh) == _truth(node) and len(fresh.files[schema.SAMPLES]) == 2
    store.compact(node.root)
    assert len(_parquet(node.root)) == 2 * 2
    with store.open_dataset(node.root) as ds:
        assert _count(ds) == _truth(node)


@pytest.mark.parametrize("held", [False, True], ids=["no-reader-held", "reader-held"])
def test_every_step_of_a_compaction_shows_every_row_once(node: Node, held: bool) -> None:
    """At each step (record published, merged file published, each replaced file removed or kept) a reader
    opened before the compaction, a fresh one and (`held`) one opened at the previous step all count exactly
    the rows; none of them skips a file. Without `held` no reader holds the lock (the first opened before the
    lock files existed), so the replaced files go at once and the first reader lists again."""
    node.flush(0)
    node.flush(1)
    if held:
        store.compact(node.root)  # lock files exist: open readers hold them
    node.flush(2)
    node.flush(3)
    truth = _truth(node)
    first = store.open_dataset(node.root)
    previous: list[store.Dataset] = [store.open_dataset(node.root)] if held else []
    steps: list[str] = []

    def check(step: str, path: Path) -> None:
        steps.append(step)
        with store.open_dataset(node.root) as fresh:
            assert _count(fresh) == truth, (step, path)
            assert fresh.skipped == []
        assert _count(first) == truth, (step, path)
        assert first.skipped == []
        if held:
            assert _count(previous[-1]) == truth, (step, path)
            assert previous[-1].skipped == []
            previous[-1].close()
            previous.append(store.open_dataset(node.root))

    try:
        store.compact(node.root, on_step=check)
    finally:
        for ds in [first, *previous]:
            ds.close()
    assert steps.count("merged") == 2 * 2
    assert ("kept" in steps) == held and ("removed" in steps) != held


def test_the_sql_path_lists_again_on_a_locked_connection(node: Node) -> None:
    """`gpuaudit sql` locks its connection to the files it listed: after a compaction it must read the merged
    file, through a new connection locked the same way."""
    _flushed(node)
    with store.open_dataset(node.root, strict=True) as ds:
        store.compact(node.root)
        table = sqlquery.run_query(ds, "SELECT count(*) AS n FROM samples")
        assert table.column("n").to_pylist() == [_truth(node)[0]]
        assert ds.locked and ds.skipped == []
        with pytest.raises(store.GpuauditError if hasattr(store, "GpuauditError") else Exception):
            sqlquery.run_query(ds, "SELECT * FROM read_csv('/etc/passwd')")


def test_the_analyzer_sees_every_gpu_hour_during_a_compaction(node: Node) -> None:
    """Defect: `analyze` counted 384 of 1,536 observed GPU-hours while a compaction ran."""
    _flushed(node)
    with store.open_dataset(node.root) as ds:
        truth = rollups_from(DuckDBEngine(ds)).gpu_hours
    with store.open_dataset(node.root) as ds:
        store.compact(node.root)
        seen = rollups_from(DuckDBEngine(ds)).gpu_hours
        assert ds.skipped == []
    assert seen.height == truth.height
    assert seen.sort(seen.columns).equals(truth.sort(truth.columns))


def test_a_push_prune_keeps_what_an_open_reader_of_the_target_listed(node: Node, tmp_path: Path) -> None:
    """A collection directory's reader during a push that prunes the superseded flushes: the prune waits for
    the readers (the next push removes them); the reader never loses a row."""
    central = tmp_path / "central"
    _flushed(node)
    push.push(node.root, central)
    store.compact(node.root)
    readers.prepare(central)  # as the first push would have left it
    with store.open_dataset(central) as ds:
        stats = push.push(node.root, central)
        assert stats.pruned == 0
        assert _count(ds) == _truth(node) and ds.skipped == []
    stats = push.push(node.root, central)
    assert stats.pruned == 2 * 2 * CHUNKS
    with store.open_dataset(central) as ds:
        assert _count(ds) == _truth(node)


def test_a_reader_of_a_target_without_lock_files_lists_again_after_a_prune(node: Node, tmp_path: Path) -> None:
    """Where nothing protects the reader (a target whose lock files were never made, as an s3:// one), the
    pruned files make it list again, never skip."""
    central = tmp_path / "central"
    _flushed(node)
    push.push(node.root, central)
    store.compact(node.root)
    for name in readers.LOCK_FILES:
        (central / name).unlink(missing_ok=True)
    with store.open_dataset(central) as ds:
        stats = push.push(node.root, central)
        assert stats.pruned == 2 * 2 * CHUNKS
        assert _count(ds) == _truth(node) and ds.skipped == [] and ds.relists == 1


def test_a_damaged_file_is_still_skipped_and_named(node: Node) -> None:
    """Listing again is for files that vanished: a file damaged in place is still left out with a warning."""
    _flushed(node)
    victim = _parquet(node.root)[0]
    data = victim.read_bytes()
    victim.write_bytes(data[:4] + b"\0" * (len(data) - 12) + data[-8:])  # header and footer intact
    with store.open_dataset(node.root) as ds:
        rows = ds.query("SELECT * FROM samples")
        assert [p for p, _ in ds.skipped] == [victim] and ds.relists == 0
        assert isinstance(rows, pl.DataFrame)


def test_rejected_rows_after_a_compaction_count_the_new_listing(node: Node) -> None:
    """The analyzer's last step compares the rows it saw with the files' footers: after a compaction replaced
    the listed files it must use the new listing, not fail on the old one."""
    _flushed(node)
    samples, processes = _truth(node)
    with store.open_dataset(node.root) as ds:
        store.compact(node.root)
        assert ds.rejected_rows({schema.SAMPLES: samples, schema.PROCESSES: processes}) == []
        assert ds.rejected_rows() == [] and ds.skipped == [] and ds.relists == 1


def test_a_file_compacted_away_between_listing_and_check_is_not_called_unreadable(
        node: Node, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The concurrency benchmark's first-ever compaction: 239 fresh reads named a flush "unreadable file: No such
    file or directory" because it was merged and deleted after the partition was listed. The partition is
    listed again instead."""
    from gpuaudit.store import reader

    for k in range(CHUNKS):
        node.flush(k)
    real = readers.stable_names
    calls: list[Path] = []

    def listing_with_a_ghost(part_dir: Path) -> list[str]:
        names = real(part_dir)
        calls.append(part_dir)
        if calls.count(part_dir) == 1:  # the first listing still names a file that is gone now
            names = sorted([*names, "agent-flush9-compacted-away.parquet"])
        return names

    monkeypatch.setattr(reader.readers, "stable_names", listing_with_a_ghost)
    with caplog.at_level("WARNING"):
        good, bad = store.table_files(node.root, schema.SAMPLES)
    assert bad == []
    assert not any("unreadable" in r.getMessage() for r in caplog.records)
    assert sorted(str(p.relative_to(node.root)) for p in good) == [
        f for f in node.files() if f.startswith(schema.SAMPLES)]
