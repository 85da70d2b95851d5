"""A clock that was ahead once never hides every later row: the agent trusts the wall clock (monotonic
within a run), warns when its stored state is ahead, and never writes rows readers refuse."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuaudit import schema
from gpuaudit.agent.nvml import Nvml
from gpuaudit.agent.runner import MAX_LEAD_S, Agent, AgentConfig, Stamper
from gpuaudit.agent.status import status_name
from gpuaudit.sim import fakenvml
from gpuaudit.sim.agentfake import static_load
from gpuaudit.store import open_dataset, write_json


def _agent(root: Path, **kw) -> Agent:  # type: ignore[no-untyped-def]
    prof = fakenvml.profile("h100", 2)
    fake = fakenvml.FakeNvml(prof, static_load(2), resolution_s=0.05)
    config = AgentConfig(root=root, host="node-a", interval_s=0.1, flush_interval_s=0.3, duration_s=0.5)
    return Agent(config, Nvml(fake), attributor=fake.attribution, **kw)


def _seen_and_rejected(root: Path) -> tuple[int, list]:
    with open_dataset(root) as ds:
        return ds.fetchall("SELECT count(*) FROM samples")[0][0], ds.rejected_rows()


def test_a_status_file_a_year_ahead_does_not_push_new_rows_into_the_future(tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    """Defect: a restarted agent continued after the stored last_ts (a year ahead): every new row was stamped
    in that future and dropped by readers ("more than a day in the future"), without a warning."""
    ahead = datetime.now(UTC) + timedelta(days=365)
    write_json(tmp_path, status_name("node-a"), {"host": "node-a", "last_ts": ahead.isoformat()})
    with caplog.at_level(logging.WARNING, logger="gpuaudit"):
        st = _agent(tmp_path).run()
    assert st["rows_written"] > 0
    seen, rejected = _seen_and_rejected(tmp_path)
    assert seen > 0
    assert rejected == []
    assert datetime.fromisoformat(st["last_ts"]) < datetime.now(UTC) + timedelta(minutes=1)
    warning = [r.getMessage() for r in caplog.records if "status_ahead_of_clock" in r.getMessage()]
    assert warning and status_name("node-a") in warning[0] and "ahead_s=" in warning[0]


def test_a_previous_stamp_behind_the_clock_is_continued_after() -> None:
    """The ordinary restart: the previous run's last stamp is in the past; stamps follow the wall clock."""
    wall = [1_800_000_000.0]
    st = Stamper(datetime.fromtimestamp(wall[0] - 60, UTC), wall=lambda: wall[0], mono=lambda: 0.0)
    assert st.ahead_s == 0
    assert st.stamp().timestamp() == wall[0]


def test_a_slightly_ahead_previous_stamp_keeps_stamps_monotonic() -> None:
    wall = [1_800_000_000.0]
    after = datetime.fromtimestamp(wall[0] + 0.5, UTC)  # a clock slewed back half a second
    st = Stamper(after, wall=lambda: wall[0], mono=lambda: 0.0)
    assert st.stamp() > after and st.ahead_s == 0


def test_a_wall_clock_corrected_far_back_within_a_run_is_followed() -> None:
    """Monotonic within a run, but never so far ahead of the wall clock that readers would refuse the rows: a
    step back of two days (a wrong clock corrected) re-anchors the stamps on the wall clock."""
    wall, mono = [1_800_000_000.0], [0.0]
    st = Stamper(wall=lambda: wall[0], mono=lambda: mono[0])
    st.stamp()
    wall[0] -= 2 * 86400
    mono[0] += 10
    t = st.stamp().timestamp()
    assert t == wall[0] and st.reanchored == 1
    assert t - wall[0] <= MAX_LEAD_S < schema.TS_MAX_AHEAD_S


def test_a_clock_before_2000_writes_no_row_readers_refuse(tmp_path: Path) -> None:
    """A clock reset to 1970: the rows would be refused (ts before 2000-01-01), so none is written; the
    intervals are counted as skipped and the status says so."""
    st = _agent(tmp_path, wall=lambda: 86400.0).run()
    assert st["rows_written"] == 0 and st["clock_skipped"] > 0
    seen, rejected = _seen_and_rejected(tmp_path)
    assert seen == 0 and rejected == []
