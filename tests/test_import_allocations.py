"""The allocation importers (Slurm, Kubernetes) write through the store's one transaction: an import replaces
every partition it changes, or none."""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from gpuaudit import store
from gpuaudit.importer.slurm import import_sacct
from gpuaudit.store import open_dataset, transaction

FIXTURE = Path(__file__).parent / "data" / "sacct" / "cluster.txt"
NOW = datetime(2026, 1, 5, 16, 0, tzinfo=UTC)


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file() and store.STAGING not in p.parts and not p.name.endswith(".lock")}


def _rows(root: Path) -> list[tuple]:
    with open_dataset(root) as ds:
        return ds.fetchall("SELECT job_id, host, gpus, start_ts, end_ts FROM allocations ORDER BY ALL")


def test_a_rename_failing_part_way_leaves_the_allocations_as_they_were(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A re-import in the right zone moves every job's rows (ten partitions); the second partition's rename
    fails: the first is put back, the dataset reads as before, and the error is one line saying why."""
    root = tmp_path / "d"
    import_sacct(root, FIXTURE.read_text(), tz=UTC, now=NOW)
    before, rows = _snapshot(root), _rows(root)
    real, calls = os.replace, []

    def replace(src: os.PathLike[str] | str, dst: os.PathLike[str] | str) -> None:
        if Path(dst).suffix == ".parquet" and root in Path(dst).parents and store.STAGING not in Path(dst).parts:
            calls.append(dst)
            if len(calls) == 2:
                raise OSError(5, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(transaction.WriteFailed, match=r"cannot write to .*Input/output error"):
        import_sacct(root, FIXTURE.read_text(), tz=ZoneInfo("Europe/Berlin"), now=NOW)
    assert len(calls) == 2
    assert _snapshot(root) == before and _rows(root) == rows
    monkeypatch.setattr(os, "replace", real)
    # Without the failure the same import lands whole: every job an hour earlier.
    import_sacct(root, FIXTURE.read_text(), tz=ZoneInfo("Europe/Berlin"), now=NOW)
    moved = _rows(root)
    assert len(moved) == len(rows)
    assert {r[3] for r in moved if r[0] == "1001"} == {datetime(2026, 1, 5, 8, 0, tzinfo=UTC)}
