"""The importer's staging area: stages left by an import that crashed are swept at the next import, through
the store's public names only (a stage older than a day must not fail the import)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gpuaudit import store
from gpuaudit.store.base import STALE_STAGING_S
from gpuaudit.store.transaction import STAGE_PREFIX, remove_stale_stages


def test_a_crashed_imports_stage_is_removed_and_a_recent_one_kept(tmp_path: Path) -> None:
    staging = tmp_path / "data" / store.STAGING
    stale, recent, other = staging / f"{STAGE_PREFIX}old", staging / f"{STAGE_PREFIX}new", staging / "compact-x"
    for d in (stale, recent, other):
        d.mkdir(parents=True)
        (d / "samples.parquet").write_bytes(b"PAR1")
    old = time.time() - STALE_STAGING_S - 60
    os.utime(stale, (old, old))
    os.utime(other, (old, old))

    remove_stale_stages(staging)

    assert not stale.exists()
    assert (recent / "samples.parquet").exists()  # may belong to an import still running
    assert (other / "samples.parquet").exists()  # not the importer's: left to its owner
