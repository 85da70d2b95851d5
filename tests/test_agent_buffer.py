"""The buffer and flusher with the real store: bounded memory, idempotent retries, no duplicates."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.agent_helpers import make_sampler

from gpuaudit.agent.buffer import Flusher, RowBuffer, store_writer
from gpuaudit.sim import fakenvml
from gpuaudit.store import open_dataset

LOAD = [(0.0, fakenvml.Load(sm_active=0.3, processes=[fakenvml.ProcLoad(pid=7, sm_util=0.3)]))]


def _rows(n_intervals: int, start: datetime) -> tuple[list[dict], list[dict]]:
    sampler, _, clock = make_sampler("h100", LOAD, n_gpus=2)
    sampler.discover()
    samples, procs = [], []
    for i in range(n_intervals):
        clock.advance(1)
        s, p = sampler.sample(start + timedelta(seconds=i))
        samples += s
        procs += p
    return samples, procs


def test_half_written_batch_is_replaced_not_duplicated(tmp_path: Path) -> None:
    calls: list[str] = []

    def flaky(root, table, columns, name):  # writes the processes file, then "the disk fills up"
        store_writer(root, table, columns, name)
        calls.append(table)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")

    buf = RowBuffer()
    flusher = Flusher(tmp_path, "h", buf, writer=flaky)
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    s, p = _rows(3, t0)
    buf.add(s, p)
    assert not flusher.flush() and len(buf) == len(s) + len(p)
    assert "No space left" in (flusher.last_error or "")
    s2, p2 = _rows(2, t0 + timedelta(seconds=10))
    buf.add(s2, p2)  # more rows arrive while the disk is full
    flusher.retry_at = 0
    assert flusher.flush() and len(buf) == 0
    with open_dataset(tmp_path) as ds:
        n_p, distinct_p = ds.fetchall("SELECT count(*), count(DISTINCT (gpu_uuid, pid, ts)) FROM processes")[0]
        n_s = ds.fetchall("SELECT count(*) FROM samples")[0][0]
    assert n_p == distinct_p == len(p) + len(p2)  # the half-written file was replaced, not added to
    assert n_s == len(s) + len(s2)


def test_a_compaction_between_attempts_loses_nothing(tmp_path: Path) -> None:
    """A compaction merges the half-written attempt's processes file; its record would hide a retry that reused
    the name, losing the rows that arrived meanwhile."""
    from gpuaudit.store import compact

    calls: list[str] = []

    def flaky(root, table, columns, name):  # type: ignore[no-untyped-def]
        store_writer(root, table, columns, name)
        calls.append(table)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")

    t0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
    earlier = RowBuffer()
    s0, p0 = _rows(2, t0 - timedelta(seconds=30))
    earlier.add(s0, p0)
    assert Flusher(tmp_path, "h", earlier, writer=store_writer, fork=False).flush()
    buf = RowBuffer()
    flusher = Flusher(tmp_path, "h", buf, writer=flaky)
    s, p = _rows(3, t0)
    buf.add(s, p)
    assert not flusher.flush()
    assert compact(tmp_path).files_before >= 2  # the attempt's processes file is merged with the earlier one
    s2, p2 = _rows(2, t0 + timedelta(seconds=10))
    buf.add(s2, p2)
    flusher.retry_at = 0
    assert flusher.flush() and len(buf) == 0
    with open_dataset(tmp_path) as ds:
        distinct_p = ds.fetchall("SELECT count(DISTINCT (gpu_uuid, pid, ts)) FROM processes")[0][0]
        n_s = ds.fetchall("SELECT count(*) FROM samples")[0][0]
    assert distinct_p == len(p0) + len(p) + len(p2)  # nothing hidden
    assert n_s == len(s0) + len(s) + len(s2)


def test_buffer_drops_oldest_and_counts() -> None:
    buf = RowBuffer(max_rows=10)
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    s, p = _rows(6, t0)  # 12 sample + 12 process rows
    buf.add(s, p)
    assert len(buf) == 10 and buf.dropped == 14
    kept = [r["ts"] for r in buf.samples] + [r["ts"] for r in buf.processes]
    assert min(kept) >= t0 + timedelta(seconds=3)  # the newest survive


def test_running_agent_never_imports_polars_or_pyarrow(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path\n"
        "from gpuaudit.agent.runner import Agent, AgentConfig\n"
        "from gpuaudit.sim.agentfake import build_fake\n"
        "from gpuaudit.agent.nvml import Nvml\n"
        "fake = build_fake('static', n_gpus=2, interval_s=0.1)\n"
        f"cfg = AgentConfig(root=Path({str(tmp_path)!r}), host='h', interval_s=0.1, flush_interval_s=0.2, "
        "duration_s=0.6, fork_writer=False)\n"
        "st = Agent(cfg, Nvml(fake), attributor=fake.attribution).run()\n"
        "assert st['rows_written'] > 0, st\n"
        "print(sorted(m for m in ('polars', 'pyarrow', 'pandas', 'numpy') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
