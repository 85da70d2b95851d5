"""`gpuaudit selftest --simulate`: the selftest's Environment on the fake NVML, with a simulated load.

The load is a real process (`python -m gpuaudit.selftest --backend simulated`: its pid, user and cgroup
are attributed through /proc like any other) that runs no kernel; what its kernel would do goes into the fake
NVML's load (CalibratedPattern) at the time it happens, so the sampler reads the calibrated figures. Time is virtual
by default: a sleep moves the clock, so the selftest's minute runs at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuaudit.agent.nvml import Nvml
from gpuaudit.errors import GpuauditError
from gpuaudit.selftest.load import LoadProcess
from gpuaudit.selftest.steps import Environment, Load, SelftestConfig, Target
from gpuaudit.sim import fakenvml

_SIMULATED_FAULTS = ("busy", "no-libcuda", "miscalibrated", "foreign-pid")
# SMs of the simulated boards (a MIG instance gets its share); the load reports them as CUDA would.
_SIMULATED_SMS = {"H100": 132, "H200": 132, "A100": 108, "L4": 58}


@dataclass
class _CalibratedPattern:
    """A LoadFn for `gpuaudit selftest --simulate`: what a GPU shows while the calibrated spin kernel runs.

    `k` of `sm_count` SMs hold one spinning block each for the first `d` of every `period_s`, then the GPU
    idles: SM activity is k / sm_count while busy (0 otherwise), the duty cycle 1 while busy, power rises from
    idle with the busy SMs. The selftest records each change with `set` at the time it happened; the fake asks
    for any earlier time when it integrates, so the history is kept. `sm_offset` (a GPU whose GPM reads high
    while the load runs and `foreign` (someone else's work on the same GPU) are the faults the selftest must
    catch.
    """

    n_units: int
    unit: int  # the fake unit (whole GPU or MIG instance) the load runs on
    sm_count: int
    period_s: float = 0.1
    idle_power_w: float = 70.0
    max_power_w: float = 700.0
    sm_offset: float = 0.0
    foreign: fakenvml.Load | None = None
    segments: list[tuple[float, int, float, list[fakenvml.ProcLoad]]] = field(default_factory=list)

    def set(self, t: float, k: int, d: float, processes: list[fakenvml.ProcLoad]) -> None:
        """From time t on: k blocks busy d of each period (k = 0: idle), `processes` listed on the GPU."""
        self.segments.append((t, k, d, list(processes)))

    def _at(self, t: float) -> tuple[float, int, float, list[fakenvml.ProcLoad]]:
        current: tuple[float, int, float, list[fakenvml.ProcLoad]] = (t, 0, 0.0, [])
        for seg in self.segments:
            if seg[0] <= t:
                current = seg
        return current

    def __call__(self, t: float) -> list[Any]:
        start, k, d, procs = self._at(t)
        busy = k > 0 and (d >= 1.0 or (t - start) % self.period_s < d * self.period_s)
        frac = k / self.sm_count if busy else 0.0
        sm = min(frac + self.sm_offset, 1.0) if k > 0 else 0.0  # a miscalibrated GPU reads high all along
        processes = list(procs)
        mem = 512 * fakenvml.MIB if procs else 0
        duty = 1.0 if busy else 0.0
        if self.foreign is not None:
            f = self.foreign
            sm, duty = min(sm + f.sm_active, 1.0), max(duty, f.duty_cycle)
            frac = min(frac + f.sm_active, 1.0)
            processes += f.processes
            mem += f.mem_used_bytes
        target = fakenvml.Load(sm_active=sm, sm_occupancy=sm / 64, duty_cycle=duty, mem_util=0.0, mem_used_bytes=mem,
                      power_w=self.idle_power_w + (self.max_power_w - self.idle_power_w) * frac,
                      temp_c=40 + round(30 * frac), processes=processes)
        idle = fakenvml.Load(power_w=self.idle_power_w)
        return [target if i == self.unit else idle for i in range(self.n_units)]


class _VirtualClock:
    """Simulated time: a sleep moves the clock instead of waiting."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += max(seconds, 0.0)


class _SimulatedLoad:
    """The simulated load process, and what its kernel would do written into the pattern as it happens."""

    def __init__(self, proc: LoadProcess, pattern: _CalibratedPattern, clock: Callable[[], float], *,
                 listed_pid: int) -> None:
        self.proc, self.pattern, self.clock = proc, pattern, clock
        self.info = proc.info
        self._procs = [fakenvml.ProcLoad(pid=listed_pid, user=None, command=None)]
        pattern.set(clock(), 0, 0.0, self._procs)  # a context exists: the process is listed from now on

    def run(self, k: int, d: float) -> None:
        self.proc.run(k, d)
        self.pattern.set(self.clock(), k, d, self._procs)

    def idle(self) -> None:
        self.proc.idle()
        self.pattern.set(self.clock(), 0, 0.0, self._procs)

    def close(self) -> None:
        self.pattern.set(self.clock(), 0, 0.0, [])
        self.proc.close()

    def kill(self) -> None:
        self.pattern.set(self.clock(), 0, 0.0, [])
        self.proc.kill()


def simulated_environment(config: SelftestConfig, *, hardware: str = "h100", n_gpus: int = 1,
                          fault: str | None = None, virtual_time: bool = True, host: str = "selftest-sim",
                          load_backend: str = "simulated") -> Environment:
    """The fake NVML (`hardware` profile) showing the calibrated pattern; `fault` injects what the selftest
    must catch: busy (someone else's work on the GPU), no-libcuda, miscalibrated (GPM reads 0.1 high),
    foreign-pid (NVML lists the load under a pid this process cannot see). `load_backend="driver"` runs the
    real ctypes load against whatever libcuda $GPUAUDIT_LIBCUDA names (the tests' stand-in)."""
    if fault is not None and fault not in _SIMULATED_FAULTS:
        raise GpuauditError(f"unknown --simulate-fault {fault!r}; expected one of {', '.join(_SIMULATED_FAULTS)}")
    if not 1 <= n_gpus <= 64:
        raise GpuauditError(f"--simulate-gpus must be between 1 and 64, got {n_gpus}")
    try:
        prof = fakenvml.profile(hardware, n_gpus)
    except ValueError as e:
        raise GpuauditError(str(e)) from None
    vclock = _VirtualClock() if virtual_time else None
    clock: Callable[[], float] = vclock if vclock is not None else time.monotonic
    n_units = sum(len(g.mig or [None]) for g in prof.gpus)
    foreign = None
    if fault == "busy":
        foreign = fakenvml.Load(sm_active=0.3, duty_cycle=0.6, mem_used_bytes=8 * 1024 * fakenvml.MIB,
                                processes=[fakenvml.ProcLoad(pid=2**22 + 17, user="bob", command="python train.py")])
    pattern = _CalibratedPattern(n_units, 0, sm_count=1, period_s=config.period_s,
                                         sm_offset=0.1 if fault == "miscalibrated" else 0.0, foreign=foreign)
    fake = fakenvml.FakeNvml(prof, pattern, clock=clock, resolution_s=config.period_s / 4, uuid_seed=host)

    def start(t: Target, c: SelftestConfig) -> Load:
        whole = next((n for key, n in _SIMULATED_SMS.items() if key in (t.unit.gpu_name or "")), 132)
        sms = max(round(whole * t.unit.gpu_fraction), 1)
        pattern.unit, pattern.sm_count = t.unit.handle.unit, sms
        extra = ["--sm-count", str(sms), *(["--fail", "no-libcuda"] if fault == "no-libcuda" else [])]
        if load_backend == "simulated":
            proc = LoadProcess("simulated", cuda_device=t.cuda_device, period_s=c.period_s, extra_args=extra)
        else:
            proc = LoadProcess(load_backend, cuda_device=None, period_s=c.period_s)
            pattern.sm_count = int(proc.info["sm_count"])
        listed = proc.pid + 2**22 if fault == "foreign-pid" else proc.pid  # beyond pid_max: no such process here
        return _SimulatedLoad(proc, pattern, clock, listed_pid=listed)

    return Environment(nvml=Nvml(fake), start_load=start, clock=clock,
                       sleep=vclock.sleep if vclock is not None else time.sleep, host=host, simulated=True)
