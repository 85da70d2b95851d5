"""`gpuaudit selftest`: the calibrated-load schedule, the comparison, the report and every refusal, run end to end
against the fake NVML (`--simulate`) with a real load process (its pid, user and cgroup attributed via /proc)."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.helpers import one_error_line, run_cli, wait_until

from gpuaudit import selftest as st

ME = pwd.getpwuid(os.getuid()).pw_name


def selftest_json(*args: str) -> tuple[int, dict]:
    r = run_cli("selftest", "--simulate", "--json", *args, timeout=120)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr == "", r.stderr  # --json in a pipe: the report and nothing else
    return r.returncode, json.loads(r.stdout)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_simulated_selftest_passes_every_step_within_tolerance() -> None:
    rc, report = selftest_json()
    assert rc == 0 and report["passed"] is True
    steps = report["steps"]
    assert [(s["k"], s["d"]) for s in steps] == [(k, d) for k in (132, 66, 1) for d in (1.0, 0.5, 0.25)]
    for s in steps:
        assert s["expected_sm_active"] == pytest.approx(s["k"] / 132 * s["d"])
        assert abs(s["measured_sm_active"] - s["expected_sm_active"]) <= 0.05
        assert s["expected_duty_cycle"] == s["d"] and abs(s["measured_duty_cycle"] - s["d"]) <= 0.1
        assert s["intervals"] == 4 and s["seconds"] == pytest.approx(4.0)
        # One resident warp of the SM's 64 per busy SM: occupancy is SM activity / 64 (reported, not judged).
        assert s["expected_sm_occupancy"] == pytest.approx(s["expected_sm_active"] / 64)
        assert s["measured_sm_occupancy"] == pytest.approx(s["expected_sm_occupancy"], abs=1e-3)
        assert s["passed"] and s["sm_active_ok"] and s["duty_cycle_ok"] and s["attribution_ok"]
        # The agent found the load's own process (a different pid from the selftest's) and whose it is.
        assert s["process"]["pid"] == report["load"]["pid"] != os.getpid()
        assert s["process"]["user"] == ME
        assert s["energy_j"] > 0 and s["energy_delta_j"] >= 0
    # Power follows the busy SMs: all SMs at d=1 draw more than one SM at d=1.
    assert steps[0]["power_w"] > steps[6]["power_w"] > report["idle"]["power_w"] - 1e-9
    assert report["device"]["gpm"] is True and report["device"]["sm_count"] == 132
    assert report["tolerances"] == {"sm_active": 0.05, "duty_cycle": 0.1}
    assert report["passed_steps"] == report["total_steps"] == 9
    assert _gone(report["load"]["pid"])  # the load process ended with the selftest


def test_text_report_shows_each_step_and_the_verdict() -> None:
    r = run_cli("selftest", "--simulate", "--simulate-gpus", "2", "--gpu", "1", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "GPU 1 NVIDIA H100 80GB HBM3" in r.stdout
    assert r.stdout.count(" PASS\n") == 9 and "PASSED: 9/9 steps within tolerance" in r.stdout


def test_a_gpu_that_reads_high_fails_the_selftest() -> None:
    """A GPM that reads 0.1 too high while the load runs (capped at 1): the steps it pushes outside ±0.05 fail,
    and so does the run (a comparison that could not fail would prove nothing)."""
    rc, report = selftest_json("--simulate-fault", "miscalibrated")
    assert rc == 1 and report["passed"] is False
    by_step = {(s["k"], s["d"]): s for s in report["steps"]}
    assert by_step[(66, 1.0)]["measured_sm_active"] == pytest.approx(0.6)  # busy all along: 0.5 + 0.1
    assert by_step[(66, 1.0)]["sm_active_ok"] is False
    assert by_step[(1, 1.0)]["measured_sm_active"] == pytest.approx(1 / 132 + 0.1)
    assert by_step[(132, 1.0)]["sm_active_ok"] is True  # capped at 1.0: nothing to see there
    for s in report["steps"]:
        off = abs(s["measured_sm_active"] - s["expected_sm_active"]) > 0.05
        assert s["sm_active_ok"] is (not off) and s["passed"] is (not off) and s["duty_cycle_ok"] is True
        assert off == any("from the expected" in n for n in s["notes"])
    assert report["passed_steps"] == sum(not s["notes"] for s in report["steps"]) < 9


def test_the_load_listed_under_another_pid_fails_attribution() -> None:
    rc, report = selftest_json("--simulate-fault", "foreign-pid")
    assert rc == 1
    for s in report["steps"]:
        assert s["sm_active_ok"] and not s["process_found"] and not s["attribution_ok"] and not s["passed"]
        assert any("PID namespace" in n for n in s["notes"])


def test_a_busy_gpu_is_refused_unless_forced() -> None:
    r = run_cli("selftest", "--simulate", "--simulate-fault", "busy", timeout=120)
    one_error_line(r, "is busy with other work", "SM activity 0.300", "--force")
    rc, report = selftest_json("--simulate-fault", "busy", "--force")
    assert rc == 1 and report["forced"] is True  # the foreign load adds to every figure: the steps fail
    assert any("--force" in n for n in report["notes"])
    assert report["idle"]["before_load"]["sm_active"] == pytest.approx(0.3)


def test_without_gpm_only_the_duty_cycle_steps_run_and_the_report_says_so() -> None:
    rc, report = selftest_json("--simulate-hardware", "pre-hopper")
    assert rc == 0 and report["device"]["gpm"] is False
    assert all(s["measured_sm_active"] is None and s["sm_active_ok"] is None and s["duty_cycle_ok"]
               for s in report["steps"])
    assert any("GPM is not supported" in n and "duty-cycle checks" in n for n in report["notes"])


def test_a_mig_gpu_is_refused_naming_its_instances_or_run_inside_one() -> None:
    r = run_cli("selftest", "--simulate", "--simulate-hardware", "mig", timeout=120)
    one_error_line(r, "has MIG enabled", "gi1 (3g.40gb)", "gi5 (2g.20gb)", "--mig-instance")
    r = run_cli("selftest", "--simulate", "--simulate-hardware", "mig", "--mig-instance", "9", timeout=120)
    one_error_line(r, "no MIG instance gi9")
    r = run_cli("selftest", "--simulate", "--mig-instance", "1", timeout=120)
    one_error_line(r, "MIG disabled")
    rc, report = selftest_json("--simulate-hardware", "mig", "--mig-instance", "5")
    assert rc == 0, report
    assert report["device"]["mig_instance"] == 5 and report["load"]["cuda_uuid"].startswith("MIG-")
    assert all(s["measured_duty_cycle"] is None and s["sm_active_ok"] for s in report["steps"])
    assert report["device"]["sm_count"] == round(132 * 2 / 7)


@pytest.mark.parametrize(("args", "needles"), [
    (("--simulate-hardware", "zero-devices"), ("no NVIDIA GPU found",)),
    (("--simulate-hardware", "library-missing"), ("NVML library not found",)),
    (("--simulate-fault", "no-libcuda"), ("CUDA driver library cannot be loaded", "libcuda.so.1 comes with")),
    (("--gpu", "3"), ("no GPU 3",)),
    (("--simulate-fault", "nope"), ("unknown --simulate-fault",)),
])
def test_what_cannot_run_is_one_line(args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    one_error_line(run_cli("selftest", "--simulate", *args, timeout=120), *needles)


def test_simulate_options_without_simulate_are_refused() -> None:
    one_error_line(run_cli("selftest", "--simulate-fault", "busy"), "need --simulate")


def test_hold_runs_the_half_load_and_reports_it_as_json_lines() -> None:
    r = run_cli("selftest", "--simulate", "--hold", "3", timeout=120)
    assert r.returncode == 0, r.stderr
    start, done = (json.loads(line) for line in r.stdout.splitlines())
    assert start["event"] == "running" and done["event"] == "done"
    assert start["k"] == 132 and start["expected_sm_active"] == 0.5 and start["expected_duty_cycle"] == 0.5
    assert start["expected_process"]["pid"] == start["load"]["pid"] and _gone(start["load"]["pid"])


def test_ctrl_c_stops_the_load_at_once(tmp_path: Path) -> None:
    """SIGINT to the selftest in the middle of a step (real time): it kills the load process and exits 130 with
    one line, at once, not after the step. The step is made 600 s long and the selftest says when it enters
    it (to a file: its stderr must hold the one line), so the signal lands inside it on any machine."""
    marks = tmp_path / "progress"
    code = ("import dataclasses, functools, sys\n"
            "from gpuaudit import selftest as st\n"
            "from gpuaudit.selftest import simulated as sf\n"
            "sf.simulated_environment = functools.partial(sf.simulated_environment, virtual_time=False)\n"
            "_run = st.run\n"
            "def say(msg):\n"
            f"    with open({str(marks)!r}, 'a') as f: f.write(msg + '\\n')\n"
            "st.run = lambda config, env, progress=None: _run(dataclasses.replace(config, measure_s=600.0), env,"
            " progress=say)\n"
            "sys.argv = ['gpuaudit', 'selftest', '--simulate', '--json']\n"
            "from gpuaudit.cli import main\nmain()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: proc.poll() is not None or (marks.exists() and "step 1/" in marks.read_text()))
        assert proc.poll() is None, proc.communicate()
        kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        children = [int(p) for p in kids.read_text().split()]
        assert children, "the load process is not running"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert time.monotonic() - t0 < 60  # at once, on any machine: the step had 600 s to go
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == [f"gpuaudit: error: interrupted: the calibrated load was stopped "
                                        f"(pid {children[0]})"]
    assert all(_gone(pid) for pid in children)


# --------------------------------------------------------------------------- the pieces


def test_schedule_is_all_half_one_sm_times_three_duties() -> None:
    assert [(s.k, s.d) for s in st.schedule(132)] == [(k, d) for k in (132, 66, 1) for d in (1.0, 0.5, 0.25)]
    assert [s.k for s in st.schedule(2)] == [2, 2, 2, 1, 1, 1]  # half of 2 is 1: each k once
    assert [s.k for s in st.schedule(1)] == [1, 1, 1]
    assert st.expected_sm_active(st.Step(66, 0.5), 132) == 0.25


def _rows(sm: float | None, duty: float | None, n: int = 4) -> list[dict]:
    return [{"interval_s": 1.0, "sm_active": sm, "duty_cycle": duty, "power_w": 300.0, "energy_j": 300.0}
            for _ in range(n)]


def test_compare_holds_the_stated_tolerance_and_no_more() -> None:
    proc = {"pid": 42, "user": "alice", "job_id": None, "container": None, "k8s_pod_uid": None}
    procs = [{"pid": 42, "user": "alice", "job_id": None, "container": None}]
    step = st.Step(132, 0.5)  # expected 0.5
    assert st.compare(step, 132, _rows(0.549, 0.5), procs, proc, 70.0, gpm=True).passed
    bad = st.compare(step, 132, _rows(0.551, 0.5), procs, proc, 70.0, gpm=True)
    assert not bad.passed and bad.sm_active_ok is False and bad.duty_cycle_ok is True
    assert not st.compare(step, 132, _rows(0.5, 0.61), procs, proc, 70.0, gpm=True).passed
    assert st.compare(step, 132, _rows(None, 0.5), procs, proc, 70.0, gpm=False).passed  # duty only
    assert not st.compare(step, 132, _rows(None, None), procs, proc, 70.0, gpm=False).passed  # nothing measured
    assert not st.compare(step, 132, [], procs, proc, 70.0, gpm=True).passed  # no sample at all
    ok = st.compare(step, 132, _rows(0.5, 0.5), procs, proc, 70.0, gpm=True)
    assert ok.power_w == 300.0 and ok.energy_j == 1200.0 and ok.energy_delta_j == pytest.approx(1200 - 280)


def test_attribution_checks_user_and_the_slurm_job_from_the_load_s_cgroup() -> None:
    """The load says which cgroup it is in; the agent's row must carry the job that cgroup names."""
    info = {"pid": 7, "user": "alice", "cgroup": "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n"}
    expected = st.expected_attribution(info)
    assert expected["job_id"] == "4242"
    found, ok, _, notes = st.check_attribution(expected, [{"pid": 7, "user": "alice", "job_id": "4242"}])
    assert found and ok and not notes
    found, ok, _, notes = st.check_attribution(expected, [{"pid": 7, "user": "alice", "job_id": None}])
    assert found and not ok and notes == ["process job_id: the agent recorded None, the load is '4242'"]
    found, ok, _, notes = st.check_attribution(expected, [{"pid": 8, "user": "bob"}])
    assert not found and "(8)" in notes[0]
