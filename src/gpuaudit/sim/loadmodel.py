"""The load model: the job schedule of one scenario (sim/schedule.py) and how hard each GPU works at each
instant. One model per (scenario, fleet size, seed, start) drives both the vectorized simulator (`gpuaudit
simulate`, `evaluate` on arrays) and the fake NVML (`agent run --simulate`, point queries through `at`).
Everything is a pure function of the seed: per-sample noise comes from a counter-based hash of (seed, GPU,
second) (sim/noise.py), so a point query at a sample's timestamp reproduces exactly the row the bulk generator
wrote.

Values are quantized to what the real source reports: GPM ratios to 0.1 %, duty cycle and memory
utilization to integer percent, power to 1 W, temperature to 1 °C, memory to MiB.

numpy is imported only inside the methods: the fake NVML's hand-scripted loads (sim/loads.py) are the
agent's lean install's.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpuaudit.schema import MIB
from gpuaudit.sim.loads import GpuLoad, ProcessLoad
from gpuaudit.sim.noise import GOLDEN, M2, mix, uniforms
from gpuaudit.sim.schedule import Schedule
from gpuaudit.sim.workload import WorkloadScenario, default_start, get_scenario

if TYPE_CHECKING:
    import numpy as np


class LoadModel(Schedule):
    """The schedule and what each GPU does under it. `at(t)` answers point queries (fake NVML); `evaluate`
    answers arrays (the simulator)."""

    def __init__(self, scenario: WorkloadScenario, n_gpus: int, seed: int, start: datetime, days: float) -> None:
        import numpy as np

        super().__init__(scenario, n_gpus, seed, start, days)
        mask = (1 << 64) - 1  # any Python int seed (negative, huge) maps onto 64 bits
        seed_words = np.array([(self.seed * 0x100000001 + g) & mask for g in range(n_gpus)], dtype=np.uint64)
        self._gpu_key = mix(seed_words ^ np.uint64(GOLDEN))
        # Each GPU's board: its power range (float32, the precision of every power figure below).
        board = [self.models[m] for m in self.gpu_model.tolist()]
        self._tdp_w, self._idle_w, self._held_idle_w, self._min_w = (
            np.array([getattr(b, f) for b in board], dtype=np.float32)
            for f in ("tdp_w", "idle_power_w", "held_idle_power_w", "min_power_w"))

    def _base_power(self, gpu: np.ndarray, j: np.ndarray, held: np.ndarray, debug: np.ndarray) -> np.ndarray:
        """Noise-free board power of a state: what temperature relaxes towards."""
        import numpy as np

        jobs = self.jobs
        jc = np.maximum(j, 0)
        idle, held_idle, tdp = self._idle_w[gpu], self._held_idle_w[gpu], self._tdp_w[gpu]
        if not len(jobs.lane):
            return idle.copy()
        sm = jobs.sm[jc]
        load = np.minimum(1.0, 0.55 * sm + 0.5 * sm * jobs.tensor_ratio[jc] + 0.25 * sm * jobs.dram_ratio[jc])
        active = held_idle + (tdp - held_idle) * load
        return np.where(held, np.where(debug, held_idle, active), idle).astype(np.float32)

    def evaluate(self, gpu: np.ndarray, t: np.ndarray) -> dict[str, np.ndarray]:
        """Sample values for GPU indices `gpu` at times `t` (seconds since start), quantized like the real
        sources. Returns integer-coded arrays: sm_k / occ_k / tensor_k / dram_k in 1/1000, duty_pct and
        mem_util_pct in percent, power_w and temp_c whole, mem_mib, n_processes, job (index or -1)."""
        import numpy as np

        gpu = np.asarray(gpu, dtype=np.int64)
        t = np.asarray(t, dtype=np.float64)
        j, held, debug, edge = self._state(gpu, t)
        jobs = self.jobs
        jc = np.maximum(j, 0)
        active = held & ~debug
        # Noise: a hash of (seed, GPU, whole second), so point queries see what the bulk writer wrote.
        t_int = np.floor(self.start_epoch + t).astype(np.int64).astype(np.uint64)
        h1 = mix(t_int * np.uint64(GOLDEN) + self._gpu_key[gpu])
        u0, u1, u2, u3 = uniforms(h1)
        h2 = mix(h1 ^ np.uint64(M2))
        u4, u5, u6, u7 = uniforms(h2)

        if len(jobs.lane):
            sm_level, occ_r, ten_r, dram_r = jobs.sm[jc], jobs.occ_ratio[jc], jobs.tensor_ratio[jc], jobs.dram_ratio[jc]
            fill = jobs.duty_fill[jc]
        else:
            sm_level = occ_r = ten_r = dram_r = fill = np.zeros(len(t), dtype=np.float32)
        # Compute phases: the job's level with up to +-8 % sample noise (less near saturation); debug: stray
        # kernels (a few 0.1 %).
        amp = np.minimum(np.float32(0.08) * sm_level, np.float32(0.6) * (1 - sm_level) + np.float32(0.01))
        sm = np.where(active, sm_level + amp * (u0 + u1 - 1),
                      np.where(held, np.float32(0.006) * u0 * (u1 < 0.3), 0))
        sm = np.clip(sm, 0, 1)
        sm_k = np.rint(sm * 1000).astype(np.int16)
        smq = sm_k.astype(np.float32) / 1000
        occ_k = np.rint(np.clip(smq * occ_r * (1 + np.float32(0.1) * (u2 - 0.5)), 0, 1) * 1000).astype(np.int16)
        ten_k = np.rint(np.clip(smq * ten_r * (1 + np.float32(0.2) * (u3 - 0.5)), 0, 1) * 1000).astype(np.int16)
        dram_k = np.rint(np.clip(smq * dram_r * (1 + np.float32(0.2) * (u4 - 0.5)), 0, 1) * 1000).astype(np.int16)
        # Duty cycle counts any kernel running: it overstates (one busy SM reads as 100 %), never understates.
        duty = np.where(active, smq + (1 - smq) * fill * (1 + np.float32(0.04) * (u5 - 0.5)),
                        np.where(held, smq * 3 + np.float32(0.02) * (u1 < 0.3) * u5, 0))
        duty_pct = np.maximum(np.rint(np.clip(duty, 0, 1) * 100), np.ceil(sm_k / 10)).astype(np.int16)
        mem_util_pct = np.rint(np.clip(dram_k / 1000 * (0.85 + 0.1 * u6), 0, 1) * 100).astype(np.int16)

        base = self._base_power(gpu, j, held, debug)
        held_idle, tdp = self._held_idle_w[gpu], self._tdp_w[gpu]
        dyn = np.float32(0.55) * smq + np.float32(0.5) * ten_k / 1000 + np.float32(0.25) * dram_k / 1000
        power = np.where(active, held_idle + (tdp - held_idle) * np.minimum(dyn, 1),
                         base) * (1 + np.float32(0.03) * (u6 + u7 - 1))
        power_w = np.rint(np.clip(power, self._min_w[gpu], tdp)).astype(np.int16)
        # Temperature relaxes from the previous state's power towards the current one (tau 3 min).
        j_prev, held_prev, debug_prev, _ = self._state(gpu, edge - 1e-3)
        prev = self._base_power(gpu, j_prev, held_prev, debug_prev)
        w = np.exp(-np.maximum(t - edge, 0) / 180.0).astype(np.float32)
        p_eff = base + (prev - base) * w
        temp_c = np.rint(27 + 0.062 * p_eff + 1.2 * (u2 - 0.5)).astype(np.int16)

        mem_mib = np.where(held, jobs.mem_mib[jc] if len(jobs.lane) else 0, 0).astype(np.int64)
        nproc = np.where(held, jobs.nproc[jc] if len(jobs.lane) else 0, 0).astype(np.int16)
        return {
            "sm_k": sm_k, "occ_k": occ_k, "tensor_k": ten_k, "dram_k": dram_k, "duty_pct": duty_pct,
            "mem_util_pct": mem_util_pct, "power_w": power_w, "temp_c": temp_c, "mem_mib": mem_mib,
            "n_processes": nproc, "job": j,
        }

    def process_split(self, job: np.ndarray, proc: np.ndarray, gpu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(pid, share of the GPU's memory and SM work) for process number `proc` of `job` on `gpu`."""
        import numpy as np

        jobs = self.jobs
        nproc = jobs.nproc[job].astype(np.int64)
        pid = jobs.pid[job] + self.pos_in_lane[gpu] * 2 + proc
        share = np.where(nproc == 1, 1.0, np.where(proc == 0, 0.85, 0.15)).astype(np.float32)
        return pid, share

    def at(self, t: float) -> list[GpuLoad]:
        """Instantaneous state of every GPU at epoch seconds `t` (what a fake NVML reports)."""
        import numpy as np

        gpus = np.arange(self.n_gpus)
        rel = np.full(self.n_gpus, float(t) - self.start_epoch)
        v = self.evaluate(gpus, rel)
        out = []
        for g in range(self.n_gpus):
            j = int(v["job"][g])
            procs: list[ProcessLoad] = []
            if j >= 0:
                n = int(v["n_processes"][g])
                pid, share = self.process_split(np.full(n, j), np.arange(n), np.full(n, g))
                for k in range(n):
                    procs.append(self._process(j, int(pid[k]), float(share[k]), int(v["mem_mib"][g]),
                                               int(v["sm_k"][g])))
            out.append(GpuLoad(
                sm_active=int(v["sm_k"][g]) / 1000, sm_occupancy=int(v["occ_k"][g]) / 1000,
                tensor_active=int(v["tensor_k"][g]) / 1000, dram_active=int(v["dram_k"][g]) / 1000,
                duty_cycle=int(v["duty_pct"][g]) / 100, mem_util=int(v["mem_util_pct"][g]) / 100,
                mem_used_bytes=int(v["mem_mib"][g]) * MIB,
                mem_total_bytes=self.models[int(self.gpu_model[g])].mem_total_bytes,
                power_w=float(v["power_w"][g]), temp_c=int(v["temp_c"][g]), processes=procs,
            ))
        return out

    def _process(self, j: int, pid: int, share: float, mem_mib: int, sm_k: int) -> ProcessLoad:
        jobs = self.jobs
        user_i, pod_i, ns_i = int(jobs.user[j]), int(jobs.pod[j]), int(jobs.namespace[j])
        jid = int(jobs.job_id[j])
        return ProcessLoad(
            pid=pid, uid=(1000 + user_i) if pod_i < 0 else 0,
            user=self.users[user_i] if user_i >= 0 else None,
            job_id=str(jid) if jid >= 0 else None,
            command=self.commands[int(jobs.command[j])],
            mem_used_bytes=process_mem_mib(mem_mib, share) * MIB,
            sm_util=process_sm_pct(sm_k, share) / 100,
            k8s_namespace=self.namespaces[ns_i] if ns_i >= 0 else None,
            k8s_pod=self.pods[pod_i] if pod_i >= 0 else None,
            container="vllm" if pod_i >= 0 else None,
        )


def process_mem_mib(mem_mib: Any, share: Any) -> Any:
    """A process's memory in MiB: its share of the GPU's used memory (rounded down to whole MiB)."""
    import numpy as np

    return np.floor(np.asarray(mem_mib) * np.asarray(share)).astype(np.int64) if not isinstance(mem_mib, int) \
        else math.floor(mem_mib * share)


def process_sm_pct(sm_k: Any, share: Any) -> Any:
    """A process's SM utilization in integer percent, as NVML's per-process utilization reports it."""
    import numpy as np

    if isinstance(sm_k, int):
        return round(sm_k / 10 * share)
    return np.rint(np.asarray(sm_k) / 10 * np.asarray(share)).astype(np.int16)


def load_model(scenario: str, n_gpus: int | None = None, seed: int = 0, start: datetime | None = None,
               days: float | None = None) -> LoadModel:
    """The load model of `scenario`: `n_gpus` (default: the scenario's), from `start`
    (default: midnight UTC seven days ago) for `days` (default: 37, so a live agent has a month ahead of it)."""
    sc = get_scenario(scenario)
    if start is None:
        start = default_start(7)
    return LoadModel(sc, n_gpus if n_gpus is not None else sc.default_gpus, seed, start,
                     37 if days is None else days)
