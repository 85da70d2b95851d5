"""Process attribution: cgroup parsers on real path samples, and the /proc reader on real processes."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import wait_until

from gpuaudit.agent.procinfo import (
    COMMAND_MAX,
    CgroupInfo,
    PodNames,
    ProcAttributor,
    parse_cgroup,
    parse_cmdline,
    parse_status_uid,
)

SAMPLES = Path(__file__).parent / "data" / "cgroup"

EXPECTED = {
    "slurm-v1.txt": CgroupInfo(job_id="4242"),
    "slurm-v2.txt": CgroupInfo(job_id="4242"),
    "slurm-v1-multi-slurmd.txt": CgroupInfo(job_id="918273"),
    "k8s-systemd-v2-containerd.txt": CgroupInfo(pod_uid="dde1244b-5bb5-4297-b544-85f3bc0d80bf",
                                                 container="acb623915785"),
    "k8s-systemd-v1-containerd.txt": CgroupInfo(pod_uid="4415fd05-2c0f-4533-909b-f2180dca8d7c",
                                                container="6a3f2b1c9d8e"),
    "k8s-systemd-v2-crio-besteffort.txt": CgroupInfo(pod_uid="1a2b3c4d-0000-4e5f-8a9b-0c1d2e3f4a5b",
                                                     container="9f86d081884c"),
    "k8s-systemd-v2-guaranteed-docker.txt": CgroupInfo(pod_uid="8e7c3a51-96f0-4c7d-b7a3-1f2e3d4c5b6a",
                                                       container="111111111111"),
    "k8s-cgroupfs-v1-docker.txt": CgroupInfo(pod_uid="4a163a05-439d-484b-8e53-2968bc15824f",
                                             container="cde6dfaf5007"),
    "k8s-cgroupfs-v2-guaranteed.txt": CgroupInfo(pod_uid="0d2b7f52-3c6e-4c1e-9d55-7b8a9c0d1e2f",
                                                 container="2b7d4f1e9a8c"),
    "docker-v1.txt": CgroupInfo(container="4f2a8c9b7d6e"),
    "docker-systemd-v2.txt": CgroupInfo(container="7be92808767a"),
    "containerd-runc-colon.txt": CgroupInfo(pod_uid="8e7c3a51-96f0-4c7d-b7a3-1f2e3d4c5b6a",
                                            container="fedcba987654"),
    "user-session-v2.txt": CgroupInfo(),
    "systemd-service-v2.txt": CgroupInfo(),
}


def test_every_sample_has_an_expectation() -> None:
    assert sorted(p.name for p in SAMPLES.glob("*.txt")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parse_cgroup_samples(name: str) -> None:
    assert parse_cgroup((SAMPLES / name).read_text()) == EXPECTED[name]


@pytest.mark.parametrize("text", ["", "garbage", "0::", "5:memory", "\n\n", "0::/slurm/job_x/"])
def test_parse_cgroup_never_raises_on_junk(text: str) -> None:
    assert parse_cgroup(text) == CgroupInfo()


def test_status_and_cmdline_parsers() -> None:
    assert parse_status_uid("Name:\tpython\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\n") == 1000
    assert parse_status_uid("Name:\tx\n") is None
    assert parse_cmdline(b"python\0train.py\0--lr\x000.1\0") == "python train.py --lr 0.1"
    assert parse_cmdline(b"") is None
    assert len(parse_cmdline(b"x" * 1000) or "") == COMMAND_MAX


def test_attributor_reads_a_real_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "marker-arg"])
    try:
        cmdline = Path(f"/proc/{child.pid}/cmdline")
        assert wait_until(lambda: b"marker-arg" in cmdline.read_bytes())  # until the child has exec'd
        info = ProcAttributor()(child.pid)
    finally:
        child.kill()
        child.wait()
    assert info["user"] == pwd.getpwuid(os.getuid()).pw_name
    assert info["command"].endswith("marker-arg") and "python" in info["command"]
    own = Path("/proc/self/cgroup").read_text()
    assert info["job_id"] == parse_cgroup(own).job_id  # same cgroup as the test itself


def test_attributor_gone_process_is_all_null() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    info = ProcAttributor()(child.pid)  # reaped: /proc/<pid> no longer exists
    assert set(info.values()) == {None}


def test_attributor_on_a_recorded_proc_tree(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    pid_dir = proc / "4242"
    pid_dir.mkdir(parents=True)
    (pid_dir / "cgroup").write_text((SAMPLES / "k8s-systemd-v2-containerd.txt").read_text())
    (pid_dir / "status").write_text("Name:\tvllm\nUid:\t0\t0\t0\t0\n")
    (pid_dir / "cmdline").write_bytes(b"python3\0-m\0vllm.entrypoints.openai.api_server\0")
    pods = tmp_path / "pods"
    (pods / "inference_vllm-7d9f_dde1244b-5bb5-4297-b544-85f3bc0d80bf" / "vllm").mkdir(parents=True)
    attrib = ProcAttributor(proc, PodNames(pods))
    info = attrib(4242)
    # The pod's name from the kubelet's log directory, its UID from the cgroup: both recorded (a StatefulSet's
    # next pod reuses the name, never the UID).
    assert info == {"user": "root", "job_id": None, "k8s_namespace": "inference", "k8s_pod": "vllm-7d9f",
                    "pod_uid": "dde1244b-5bb5-4297-b544-85f3bc0d80bf", "container": "acb623915785",
                    "command": "python3 -m vllm.entrypoints.openai.api_server"}
    # Unreadable pieces are null, the rest still comes through.
    (pid_dir / "status").unlink()
    attrib.prune(set())
    info = attrib(4242)
    assert info["user"] is None and info["k8s_pod"] == "vllm-7d9f"
    # Without the kubelet's pod log directory the pod is known by its UID.
    info = ProcAttributor(proc, PodNames(tmp_path / "missing"))(4242)
    assert info["k8s_pod"] == "dde1244b-5bb5-4297-b544-85f3bc0d80bf" and info["k8s_namespace"] is None
    assert info["pod_uid"] == "dde1244b-5bb5-4297-b544-85f3bc0d80bf"


def test_attributor_cache_is_pruned(tmp_path: Path) -> None:
    attrib = ProcAttributor(tmp_path)
    for pid in range(10):
        attrib(pid)
    attrib.prune({3})
    assert list(attrib._cache) == [3]
