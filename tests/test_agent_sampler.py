"""The sampler against the scripted fake NVML: every stored value is the average the fake produced over
the interval (computed here independently from the script), across the hardware fault matrix."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tests.agent_helpers import make_sampler, scaled

from gpuaudit.sim import fakenvml

GIB = 1024**3
TS = datetime(2026, 1, 1, tzinfo=UTC)

# 0-4 s light, 4-10 s heavy: every interval average is (4*a + 6*b) / 10.
LIGHT = fakenvml.Load(sm_active=0.2, sm_occupancy=0.1, tensor_active=0.0, dram_active=0.1, duty_cycle=0.5,
                      mem_util=0.2, mem_used_bytes=10 * GIB, power_w=100.0, temp_c=40,
                      processes=[fakenvml.ProcLoad(pid=101, user="alice", job_id="7", sm_util=0.2)])
HEAVY = fakenvml.Load(sm_active=0.7, sm_occupancy=0.35, tensor_active=0.5, dram_active=0.6, duty_cycle=1.0,
                      mem_util=0.7, mem_used_bytes=30 * GIB, power_w=400.0, temp_c=70,
                      processes=[fakenvml.ProcLoad(pid=101, user="alice", job_id="7", sm_util=0.6),
                                 fakenvml.ProcLoad(pid=202, user="bob", job_id=None, sm_util=None,
                                                   command="python serve.py")])
SCRIPT = [(0.0, LIGHT), (4.0, HEAVY)]


def avg(a: float, b: float) -> float:
    return (4 * a + 6 * b) / 10


def test_h100_rows_are_interval_averages() -> None:
    sampler, _fake, clock = make_sampler("h100", SCRIPT, per_unit=scaled)
    units = sampler.discover()
    assert [u.gpm is not None for u in units] == [True, True]
    clock.advance(10)
    rows, procs = sampler.sample(TS)
    assert len(rows) == 2
    for i, r in enumerate(rows):
        assert r["gpu_index"] == i and r["host"] == "node-1" and r["ts"] == TS
        assert r["interval_s"] == pytest.approx(10.0)
        assert r["source"] == "nvml-gpm"
        assert r["sm_active"] == pytest.approx(avg(0.2, 0.7) * (i + 1) / 8)
        assert r["sm_occupancy"] == pytest.approx(avg(0.1, 0.35))
        assert r["tensor_active"] == pytest.approx(avg(0.0, 0.5))
        assert r["dram_active"] == pytest.approx(avg(0.1, 0.6))
        assert r["duty_cycle"] == pytest.approx(avg(0.5, 1.0))
        assert r["mem_util"] == pytest.approx(avg(0.2, 0.7))
        assert r["energy_j"] == pytest.approx(4 * 100 + 6 * 400)
        assert r["power_w"] == pytest.approx(avg(100, 400))
        assert r["mem_used_bytes"] == 30 * GIB and r["mem_total_bytes"] == 80 * GIB
        assert r["temp_c"] == 70 and r["n_processes"] == 2
        assert r["gpu_fraction"] == 1.0 and r["mig_instance"] is None and r["mig_profile"] is None
    by_pid = {p["pid"]: p for p in procs if p["gpu_uuid"] == rows[0]["gpu_uuid"]}
    assert by_pid[101]["sm_util"] == pytest.approx(avg(0.2, 0.6))  # per-process utilization, averaged
    assert by_pid[101]["user"] == "alice" and by_pid[101]["job_id"] == "7"
    assert by_pid[202]["sm_util"] is None and by_pid[202]["command"] == "python serve.py"
    assert by_pid[202]["mem_used_bytes"] == 1024**3


def test_process_rows_carry_the_pod_uid() -> None:
    """The agent's cgroup attribution knows the pod's UID (procinfo.ProcAttributor): its process rows carry it in
    pod_uid beside the pod's name, so the ledger can tell a recreated pod of the same name from its predecessor."""
    who = {"user": "alice", "job_id": None, "k8s_namespace": "ml", "k8s_pod": "web-0",
           "pod_uid": "6f1c1a52-8a3e-4b7e-9d57-2f0e5a9b1c11", "container": "0123456789ab", "command": "python"}
    sampler, _fake, clock = make_sampler("h100", SCRIPT, attributor=lambda pid: dict(who))
    sampler.discover()
    clock.advance(10)
    _rows, procs = sampler.sample(TS)
    assert procs and all(p["pod_uid"] == who["pod_uid"] and p["k8s_pod"] == "web-0" for p in procs)


def test_each_interval_has_its_own_baseline() -> None:
    sampler, _, clock = make_sampler("h100", [(0.0, LIGHT), (10.0, HEAVY), (13.0, LIGHT)])
    sampler.discover()
    clock.advance(10)
    first, _ = sampler.sample(TS)
    clock.advance(5)  # 3 s heavy + 2 s light
    second, _ = sampler.sample(TS)
    assert first[0]["sm_active"] == pytest.approx(0.2)
    assert second[0]["interval_s"] == pytest.approx(5.0)
    assert second[0]["sm_active"] == pytest.approx((3 * 0.7 + 2 * 0.2) / 5)
    assert second[0]["duty_cycle"] == pytest.approx((3 * 1.0 + 2 * 0.5) / 5)
    assert second[0]["energy_j"] == pytest.approx(3 * 400 + 2 * 100)


def test_overrun_is_a_longer_interval() -> None:
    sampler, _, clock = make_sampler("h100", SCRIPT)
    sampler.discover()
    clock.advance(25)  # the tick came 15 s late
    rows, _ = sampler.sample(TS)
    assert rows[0]["interval_s"] == pytest.approx(25.0)
    assert rows[0]["sm_active"] == pytest.approx((4 * 0.2 + 21 * 0.7) / 25)


def test_pre_hopper_falls_back_to_duty_cycle() -> None:
    sampler, _, clock = make_sampler("pre-hopper", SCRIPT)
    units = sampler.discover()
    assert all(u.gpm is None for u in units)
    clock.advance(10)
    rows, _ = sampler.sample(TS)
    r = rows[0]
    assert r["source"] == "nvml" and r["sm_active"] is None and r["sm_occupancy"] is None
    assert r["duty_cycle"] == pytest.approx(avg(0.5, 1.0))
    assert r["gpu_name"] == "NVIDIA A100-SXM4-80GB"


def test_not_supported_fields_are_null_or_fallbacks() -> None:
    sampler, fake, clock = make_sampler("not-supported", SCRIPT)
    sampler.discover()
    clock.advance(10)
    rows, procs = sampler.sample(TS)
    r = rows[0]
    assert r["temp_c"] is None
    assert r["duty_cycle"] == pytest.approx(1.0)  # nvmlDeviceGetUtilizationRates: the point value
    assert r["power_w"] == pytest.approx(400.0)  # nvmlDeviceGetPowerUsage x time
    assert r["energy_j"] == pytest.approx(4000.0)
    assert r["mem_total_bytes"] == 24 * GIB  # memory info v1 when v2 is missing
    assert {p["sm_util"] for p in procs} == {None}
    assert fake.calls["nvmlDeviceGetMemoryInfo"] >= 1


def test_mig_instances_are_rows_of_their_own() -> None:
    def per_unit(i: int, ld: fakenvml.Load) -> fakenvml.Load:
        return fakenvml.Load(sm_active=0.1 * (i + 1), mem_used_bytes=GIB * (i + 1), power_w=350.0,
                             processes=[fakenvml.ProcLoad(pid=500 + i)])

    sampler, _, clock = make_sampler("mig", [(0.0, fakenvml.Load())], n_gpus=2, per_unit=per_unit)
    units = sampler.discover()
    assert [(u.gpu_index, u.mig_instance, u.mig_profile) for u in units] == [
        (0, 1, "3g.40gb"), (0, 5, "2g.20gb"), (0, 13, "1g.10gb"), (0, 14, "1g.10gb"), (1, None, None)]
    clock.advance(10)
    rows, procs = sampler.sample(TS)
    mig = [r for r in rows if r["mig_instance"] is not None]
    assert [r["gpu_fraction"] for r in mig] == pytest.approx([3 / 7, 2 / 7, 1 / 7, 1 / 7])
    assert [r["sm_active"] for r in mig] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert len({r["gpu_uuid"] for r in mig}) == 1  # the parent GPU's UUID
    assert [r["mem_used_bytes"] for r in mig] == [GIB, 2 * GIB, 3 * GIB, 4 * GIB]
    # The parent's energy (4 instances x 350 W) is shared out by slice fraction.
    assert sum(r["energy_j"] for r in mig) == pytest.approx(4 * 350 * 10 * (7 / 7))
    assert mig[0]["energy_j"] == pytest.approx(1400 * 10 * 3 / 7)
    assert all(r["source"] == "nvml-gpm" for r in rows)
    assert {p["pid"]: p["mig_instance"] for p in procs if p["mig_instance"]} == {500: 1, 501: 5, 502: 13, 503: 14}


def test_lost_gpu_never_stops_the_others() -> None:
    sampler, _, clock = make_sampler("gpu-lost", SCRIPT, n_gpus=3)
    sampler.discover()
    clock.advance(2)
    rows, _ = sampler.sample(TS)
    assert [r["gpu_index"] for r in rows] == [0, 1, 2]
    for _ in range(3):
        clock.advance(2)
        rows, _ = sampler.sample(TS)
        assert [r["gpu_index"] for r in rows] == [0, 2]  # GPU 1 is lost from t=3 s: a gap, not a crash
    assert not sampler.units[1].ok


@pytest.mark.parametrize("error", ["Unknown", "NoPermission", "NotSupported", "GpuIsLost"])
def test_one_device_failing_a_core_query(error: str) -> None:
    sampler, fake, clock = make_sampler("h100", SCRIPT, n_gpus=2)
    sampler.discover()
    fake.profile.faults.append(fakenvml.Fault(error, gpu=0, fn="nvmlGpmSampleGet", start_s=5, end_s=12))
    clock.advance(6)
    rows, _ = sampler.sample(TS)
    assert [r["gpu_index"] for r in rows] == [1]
    clock.advance(7)  # fault over; a non-lost GPU re-primes at once, then has a row again
    rows, _ = sampler.sample(TS)
    clock.advance(5)
    rows, _ = sampler.sample(TS)
    if error == "GpuIsLost":
        assert [r["gpu_index"] for r in rows] == [1]  # lost: retried only after its backoff
        clock.advance(60)
        sampler.sample(TS)
        clock.advance(5)
        rows, _ = sampler.sample(TS)
    assert [r["gpu_index"] for r in rows] == [0, 1]
    assert rows[0]["interval_s"] == pytest.approx(5.0)


def test_zero_devices() -> None:
    sampler, _, clock = make_sampler("zero-devices", SCRIPT)
    assert sampler.discover() == []
    clock.advance(10)
    assert sampler.sample(TS) == ([], [])


def test_close_frees_gpm_buffers() -> None:
    sampler, fake, _clock = make_sampler("mig", SCRIPT, n_gpus=2)
    sampler.discover()
    assert len(fake.gpm_buffers) == 10  # two per unit
    sampler.close()
    assert fake.gpm_buffers == {}


def test_a_persistently_failing_gpu_backs_off(caplog) -> None:
    import logging

    caplog.set_level(logging.INFO, logger="gpuaudit")
    sampler, fake, clock = make_sampler("h100", SCRIPT, n_gpus=2)
    sampler.discover()
    fake.profile.faults.append(fakenvml.Fault("Unknown", gpu=0, fn="nvmlGpmSampleGet", start_s=0.5))
    for _ in range(60):
        clock.advance(1)
        rows, _ = sampler.sample(TS)
        assert [r["gpu_index"] for r in rows] == [1]  # GPU 1 unaffected throughout
    faults = [r for r in caplog.records if "event=device_fault" in r.getMessage()]
    # Fault, immediate retry, then 30 s backoff: a handful of attempts, not one per interval.
    assert 3 <= sampler.units[0].failures <= 4
    assert len(faults) <= 3
