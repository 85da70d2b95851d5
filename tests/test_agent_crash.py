"""Crash safety: SIGKILL the agent at random moments, many times, and check the invariants each time:
every visible file is whole and readable, no row is duplicated, every flush that completed is on disk,
and a restart continues without duplicates."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
from tests.helpers import REPO, wait_until

from gpuaudit.store import open_dataset, read_json

KILLS = 14


def _start(root: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "gpuaudit", "agent", "run", "--simulate", "static", "--simulate-gpus", "3",
             "--interval", "0.1", "--flush-interval", "0.3", "--data", str(root), "--host", "crashy"],
            stdout=subprocess.DEVNULL, stderr=err, cwd=REPO, env={**os.environ})


def _check(root: Path, flushed_by_runs: int) -> int:
    table_files = [p for t in ("gpu_samples", "gpu_processes") for p in (root / t).rglob("*") if p.is_file()]
    for f in table_files:
        assert f.suffix == ".parquet" and f.name.startswith("agent-crashy-"), f  # nothing partial in view
        duckdb.sql(f"SELECT count(*) FROM read_parquet('{f}')").fetchall()  # whole and readable
    with open_dataset(root) as ds:
        assert ds.skipped == []
        n, distinct = ds.fetchall(
            "SELECT count(*), count(DISTINCT (gpu_uuid, coalesce(mig_instance, -1), ts)) FROM samples")[0]
        assert n == distinct, "duplicate sample rows"
        np_, distinct_p = ds.fetchall("SELECT count(*), count(DISTINCT (gpu_uuid, pid, ts)) FROM processes")[0]
        assert np_ == distinct_p, "duplicate process rows"
    assert n + np_ >= flushed_by_runs, "a completed flush is missing"
    return n


def test_sigkill_at_random_moments(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("GPUAUDIT_CRASH_SEED", "7")))
    root = tmp_path / "data"
    log = tmp_path / "agent.log"
    flushed = 0
    last_n = 0
    for _ in range(KILLS):
        p = _start(root, log)
        # The kill lands anywhere: start-up, sampling, mid-write, status update ... (the input, not a wait).
        time.sleep(rng.uniform(0.2, 2.2))
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        st = read_json(root, "agent-status-crashy.json")
        if st and st["pid"] == p.pid:  # written after a flush completed: that many rows must be on disk
            flushed += st["rows_written"]
        n = _check(root, flushed)
        assert n >= last_n  # nothing that was visible ever disappears
        last_n = n
    # A clean run afterwards continues the same dataset without duplicates: stopped once it has flushed.
    p = _start(root, log)

    def flushed_once() -> bool:
        st = read_json(root, "agent-status-crashy.json")
        return p.poll() is not None or bool(st and st["pid"] == p.pid and st["rows_written"] > 0)

    assert wait_until(flushed_once), log.read_text()
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 0
    flushed += read_json(root, "agent-status-crashy.json")["rows_written"]
    assert flushed > 0 and _check(root, flushed) > last_n
    assert "Traceback" not in log.read_text()
