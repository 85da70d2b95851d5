"""The agent's life cycle: timing and stamps, flush and shutdown, faults, unwritable disk, the CLI."""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.agent_helpers import ManualClock, on_virtual_time
from tests.helpers import REPO, run_cli, wait_until

from gpuaudit.agent.nvml import Nvml
from gpuaudit.agent.runner import Agent, AgentConfig, Stamper
from gpuaudit.errors import GpuauditError
from gpuaudit.sim import fakenvml
from gpuaudit.sim.agentfake import build_fake, static_load
from gpuaudit.store import open_dataset, read_json

INTERVAL_S = 0.125  # binary fractions: the virtual clock's grid is exact
FLUSH_S = 0.375


def _agent(root: Path, profile: str = "h100", *, n_gpus: int = 2, load=None, clock: ManualClock | None = None,
           **cfg) -> Agent:
    """An agent on the fake NVML and a virtual clock (tests/agent_helpers.on_virtual_time): each run takes
    exactly its configured intervals, however busy the machine."""
    clock = clock or ManualClock()
    prof = fakenvml.profile(profile, n_gpus)
    n_units = sum(len(g.mig or [None]) for g in prof.gpus)
    fake = fakenvml.FakeNvml(prof, load or static_load(n_units), clock=clock, resolution_s=INTERVAL_S / 2)
    config = AgentConfig(root=root, host="node-a", **{"interval_s": INTERVAL_S, "flush_interval_s": FLUSH_S, **cfg})
    agent = Agent(config, Nvml(fake), attributor=fake.attribution, mono=clock)
    on_virtual_time(agent, clock)
    return agent


def _samples(root: Path) -> list[tuple]:
    with open_dataset(root) as ds:
        assert ds.skipped == []
        return ds.fetchall("SELECT gpu_uuid, mig_instance, ts, interval_s, sm_active FROM samples ORDER BY ts")


# --- time stamps ----------------------------------------------------------------------------------------
def test_stamper_survives_wall_clock_jumps() -> None:
    wall, mono = [1_000_000.0], [50.0]
    st = Stamper(wall=lambda: wall[0], mono=lambda: mono[0])
    stamps = []
    for step in range(6):
        wall[0] += 10
        mono[0] += 10
        if step == 2:
            wall[0] -= 3600  # NTP steps the clock an hour back
        if step == 4:
            wall[0] += 7200  # ... and two hours forward
        stamps.append(st.stamp().timestamp())
    assert all(b > a for a, b in itertools.pairwise(stamps))  # no duplicate, no reordering
    assert stamps[2] - stamps[1] == pytest.approx(10.0)  # backwards jump: follows the monotonic clock
    assert stamps[4] - stamps[3] > 3600  # forward jump: follows the wall clock, nothing dropped


def test_stamper_continues_after_a_previous_run() -> None:
    after = datetime.now(UTC)  # the previous run's last stamp (one in our future: tests/test_agent_clock.py)
    st = Stamper(after)
    assert st.stamp() > after


# --- runs -------------------------------------------------------------------------------------------------
def test_run_writes_interval_averages_and_status(tmp_path: Path) -> None:
    agent = _agent(tmp_path, duration_s=1.0)
    st = agent.run()
    rows = _samples(tmp_path)
    assert st["buffered_rows"] == 0 and st["rows_written"] > 0
    per_gpu = {}
    for uuid, _, _, interval_s, sm in rows:
        per_gpu.setdefault(uuid, []).append(interval_s)
        assert sm == pytest.approx(0.4)
    assert len(per_gpu) == 2
    for intervals in per_gpu.values():
        assert intervals == [pytest.approx(INTERVAL_S)] * 8  # 1 s of 0.125 s intervals, none missed
    assert st["intervals"] == 8 and st["overruns"] == 0
    status = read_json(tmp_path, "agent-status-node-a.json")
    assert status["last_flush"] and status["devices"][0]["path"] == "gpm"


def test_restart_continues_without_duplicates(tmp_path: Path) -> None:
    _agent(tmp_path, duration_s=0.5).run()
    first = _samples(tmp_path)
    _agent(tmp_path, duration_s=0.5).run()
    both = _samples(tmp_path)
    keys = [(u, m, ts) for u, m, ts, _, _ in both]
    assert len(keys) == len(set(keys)) and len(both) > len(first)
    assert min(ts for _, _, ts, _, _ in both[len(first):]) > max(ts for _, _, ts, _, _ in first)


def test_overrun_is_recorded_not_hidden(tmp_path: Path) -> None:
    clock = ManualClock()
    t0, base = clock.t, static_load(1)
    slow = {"done": False}

    def load(t: float):
        if not slow["done"] and t > t0 + 0.35:
            slow["done"] = True
            clock.advance(0.5)  # the sampler is stuck for four ticks
        return base(t)

    agent = _agent(tmp_path, n_gpus=1, load=load, clock=clock, duration_s=1.5)
    st = agent.run()
    assert st["overruns"] == 1
    intervals = [r[3] for r in _samples(tmp_path)]
    assert max(intervals) >= 0.5  # the late row says how long it really covered
    assert sum(intervals) == pytest.approx(1.5)  # nothing double counted, nothing lost


def test_driver_reload_reinitialises_with_a_visible_gap(tmp_path: Path) -> None:
    prof = fakenvml.profile("h100", 2)
    prof.faults.append(fakenvml.Fault("Uninitialized", start_s=0.5, end_s=1.3))
    clock = ManualClock()
    fake = fakenvml.FakeNvml(prof, static_load(2), clock=clock, resolution_s=INTERVAL_S / 2)
    agent = Agent(AgentConfig(root=tmp_path, host="n", interval_s=INTERVAL_S, flush_interval_s=0.5, duration_s=2.5),
                  Nvml(fake), attributor=fake.attribution, mono=clock)
    on_virtual_time(agent, clock)
    agent.run()
    assert fake.init_calls >= 2
    ts = sorted({r[2].timestamp() for r in _samples(tmp_path)})
    gaps = [b - a for a, b in itertools.pairwise(ts)]
    assert max(gaps) >= 0.7  # the outage shows as missing intervals
    assert ts[-1] - ts[0] >= 1.8  # and sampling resumed after it


@pytest.mark.parametrize("fork_writer", [True, False])
def test_unwritable_data_dir_keeps_sampling_bounded_then_recovers(tmp_path: Path, caplog,
                                                                  fork_writer: bool) -> None:
    caplog.set_level(logging.INFO, logger="gpuaudit")
    blocker = tmp_path / "blocker"
    blocker.write_text("a regular file where a directory should be (root ignores chmod)")
    root = blocker / "data"
    clock = ManualClock()
    t0, base = clock.t, static_load(2)

    def load(t: float):
        if t > t0 + 1.25 and blocker.is_file():  # the disk is fixed while the agent samples, at 1.25 s
            blocker.unlink()
            blocker.mkdir()
        return base(t)

    agent = _agent(root, load=load, clock=clock, duration_s=2.0, max_buffer_rows=20, fork_writer=fork_writer)
    st = agent.run()
    assert st["dropped_rows"] > 0  # 2 GPUs x 8 Hz x 1.25 s of samples+processes rows > 20
    assert st["buffered_rows"] == 0 and st["flush_error"] is None
    messages = [r.getMessage() for r in caplog.records]
    assert any("event=flush_failed" in m and "Not a directory" in m for m in messages)
    assert sum("event=buffer_full" in m for m in messages) == 1  # rate-limited, not one per interval
    assert any("event=flush_recovered" in m for m in messages)
    rows = _samples(root)
    assert 0 < len(rows) < 2 * st["intervals"]  # bounded buffer, then everything after recovery
    assert len({(r[0], r[2]) for r in rows}) == len(rows)


def test_zero_devices_runs_and_writes_nothing(tmp_path: Path) -> None:
    st = _agent(tmp_path, "zero-devices", once=True).run()
    assert st["devices"] == [] and st["rows_written"] == 0


def test_config_is_validated() -> None:
    with pytest.raises(GpuauditError, match="--interval"):
        AgentConfig(root=Path("x"), interval_s=0).validate()
    with pytest.raises(GpuauditError, match="--duration"):
        AgentConfig(root=Path("x"), duration_s=-1).validate()


def test_simulated_workload_attribution(tmp_path: Path) -> None:
    fake = build_fake("steady-training", n_gpus=8, interval_s=0.25)
    clock = ManualClock(fake.clock())  # the scenario's load follows the date: start at today's
    fake.clock = clock
    agent = Agent(AgentConfig(root=tmp_path, host="sim", interval_s=0.25, duration_s=1.0), Nvml(fake),
                  attributor=fake.attribution, mono=clock)
    on_virtual_time(agent, clock)
    agent.run()
    with open_dataset(tmp_path) as ds:
        n, users = ds.fetchall("SELECT count(*), count(user) FROM processes")[0]
        s = ds.fetchall("SELECT count(*), count(sm_active), max(n_processes) FROM samples")[0]
    assert s[0] == 8 * 4 and s[1] == s[0]
    assert n >= 1 and users == n  # the load model's users come through the attribution seam


# --- the CLI -------------------------------------------------------------------------------------------
def test_cli_simulate_phantom_writes_readable_data(tmp_path: Path) -> None:
    r = run_cli("agent", "run", "--simulate", "phantom", "--duration", "3", "--interval", "1",
                "--data", str(tmp_path), "--host", "sim-node", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "event=start" in r.stderr and "event=stop" in r.stderr
    with open_dataset(tmp_path) as ds:
        n, hosts, gpus, src = ds.fetchall(
            "SELECT count(*), count(DISTINCT host), count(DISTINCT gpu_uuid), min(source) FROM samples")[0]
    intervals = read_json(tmp_path, "agent-status-sim-node.json")["intervals"]
    assert intervals >= 1 and n == 8 * intervals  # every interval of every GPU, however many the machine ran
    assert hosts == 1 and gpus == 8 and src == "nvml-gpm"
    st = run_cli("agent", "status", "--simulate", "phantom", "--data", str(tmp_path), "--host", "sim-node")
    assert st.returncode == 3, st.stderr  # NVML fine, but the agent has stopped
    assert "8 devices" in st.stdout and "last flush:" in st.stdout and "via gpm" in st.stdout
    assert "agent:           NOT RUNNING (stopped at " in st.stdout


def test_cli_status_without_nvml_exits_1(tmp_path: Path) -> None:
    r = run_cli("agent", "status", "--simulate", "static", "--simulate-hardware", "library-missing",
                "--data", str(tmp_path))
    assert r.returncode == 1
    assert "unavailable: NVML library not found" in r.stdout
    assert "no status file yet" in r.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--simulate", "no-such-scenario"], "unknown scenario"),
    (["--simulate", "static", "--simulate-hardware", "driver-mismatch"], "different versions"),
    (["--simulate", "static", "--interval", "-1"], "--interval must be between 0.1 and 3600 seconds"),
])
def test_cli_bad_input_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    r = run_cli("agent", "run", "--once", "--data", str(tmp_path), *args)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("gpuaudit: error:")
    assert message in r.stderr and "Traceback" not in r.stderr


def _intervals_served(log_path: Path) -> float:
    """The agent's interval counter, from its own metrics endpoint (0 until the endpoint is up)."""
    import urllib.request

    m = re.search(r"event=metrics_listen address=(\S+)", log_path.read_text())
    if not m:
        return 0
    with urllib.request.urlopen(f"http://{m.group(1)}/metrics", timeout=30) as r:
        text = r.read().decode()
    found = re.search(r"^gpuaudit_agent_intervals_total\{[^}]*\} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_flushes_and_exits_0(tmp_path: Path, sig: signal.Signals) -> None:
    log_path = tmp_path / "stderr.log"
    with log_path.open("w") as log_file:
        p = subprocess.Popen(
            [sys.executable, "-m", "gpuaudit", "agent", "run", "--simulate", "static", "--simulate-gpus", "2",
             "--interval", "0.2", "--flush-interval", "600", "--data", str(tmp_path / "d"), "--host", "h",
             "--metrics-listen", "127.0.0.1:0"],
            stderr=log_file, cwd=REPO, env={**os.environ})
    try:
        # Four intervals sampled, none flushed yet (flush interval 600 s): counted, not timed.
        assert wait_until(lambda: p.poll() is not None or _intervals_served(log_path) >= 4), log_path.read_text()
        assert p.poll() is None, log_path.read_text()
        assert not (tmp_path / "d" / "gpu_samples").exists()
        p.send_signal(sig)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = log_path.read_text()
    assert p.returncode == 0, err
    assert f"signal={sig.name}" in err
    assert len(_samples(tmp_path / "d")) >= 2 * 4  # all of them came from the final flush


def test_cli_once_on_mig_hardware_and_status_json(tmp_path: Path) -> None:
    r = run_cli("agent", "run", "--once", "--interval", "0.5", "--simulate", "static", "--simulate-hardware", "mig",
                "--simulate-gpus", "2", "--data", str(tmp_path), "--host", "mig-node")
    assert r.returncode == 0, r.stderr
    with open_dataset(tmp_path) as ds:
        rows = ds.fetchall("SELECT gpu_index, mig_instance, mig_profile, gpu_fraction FROM samples "
                           "ORDER BY gpu_index, mig_instance")
    assert [(g, m, p) for g, m, p, _ in rows] == [
        (0, 1, "3g.40gb"), (0, 5, "2g.20gb"), (0, 13, "1g.10gb"), (0, 14, "1g.10gb"), (1, None, None)]
    assert sum(f for g, _, _, f in rows if g == 0) == pytest.approx(1.0)
    st = run_cli("agent", "status", "--json", "--simulate", "static", "--simulate-hardware", "mig",
                 "--simulate-gpus", "2", "--data", str(tmp_path), "--host", "mig-node")
    assert st.returncode == 3, st.stderr  # the --once agent is no longer running
    doc = json.loads(st.stdout)
    assert doc["agent_running"] is False and doc["agent_state"].startswith("stopped at ")
    assert doc["nvml_error"] is None and len(doc["devices"]) == 5
    assert doc["agent"]["rows_written"] == 5 + 5  # one interval: 5 sample rows, 5 process rows
