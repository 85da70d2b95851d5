"""The state of one GPU and its processes at an instant: what the load model gives per GPU and what the fake
NVML reports. The defaults (an idle H100, a small training process) are for loads a test scripts by hand. No
numpy: the agent's lean install imports this."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuaudit.schema import MIB


@dataclass(frozen=True)
class ProcessLoad:
    pid: int
    uid: int | None = 1000
    user: str | None = "alice"
    job_id: str | None = None
    command: str | None = "python train.py"
    mem_used_bytes: int = 1024 * MIB
    sm_util: float | None = None
    k8s_namespace: str | None = None
    k8s_pod: str | None = None
    container: str | None = None
    pod_uid: str | None = None  # what the agent reads from a pod's cgroup path


@dataclass(frozen=True)
class GpuLoad:
    sm_active: float = 0.0
    sm_occupancy: float = 0.0
    tensor_active: float = 0.0
    dram_active: float = 0.0
    duty_cycle: float = 0.0
    mem_util: float = 0.0
    mem_used_bytes: int = 0
    mem_total_bytes: int = 80 * 1024 * MIB
    power_w: float = 70.0
    temp_c: int = 35
    processes: list[ProcessLoad] = field(default_factory=list)
