"""`agent run --simulate`: the real sampler against the fake NVML, driven by a workload scenario.

The load comes from `gpuaudit.sim.loadmodel.load_model` (the same job schedule the offline simulator uses), or
from `static`, a constant load without numpy (what the overhead benchmark uses). Simulated processes
have no /proc entry, so their attribution comes from the load model too.
"""

from __future__ import annotations

import time
from typing import Any

from gpuaudit.errors import GpuauditError
from gpuaudit.sim import fakenvml

_STATIC = "static"
# --simulate-gpus: a node holds a handful of GPUs; 1024 simulated ones sample in under a second a pass, while
# 100,000 took minutes and gigabytes before the first flush.
MAX_GPUS = 1024


def static_load(n_units: int) -> fakenvml.LoadFn:
    """A fixed, busy-ish load: 40 % SM activity at 90 % duty cycle, one process per GPU."""
    loads = [fakenvml.Load(sm_active=0.4, sm_occupancy=0.25, tensor_active=0.2, dram_active=0.3,
                           duty_cycle=0.9, mem_util=0.35, mem_used_bytes=40 * 1024 * fakenvml.MIB,
                           power_w=420.0, temp_c=61,
                           processes=[fakenvml.ProcLoad(pid=4000 + i, user="sim", job_id=str(9000 + i),
                                                        command="python train.py", sm_util=0.4)])
             for i in range(n_units)]
    return lambda t: loads


def _scenario_names() -> list[str]:
    from gpuaudit.sim.workload import SCENARIOS

    return [*SCENARIOS, _STATIC]


def build_fake(scenario: str, *, n_gpus: int = 8, hardware: str = "h100", seed: int = 0,
               interval_s: float = 10.0, host: str = "") -> fakenvml.FakeNvml:
    """A fake NVML whose GPUs run `scenario`. The integration grid is fine enough for the interval."""
    if not 1 <= n_gpus <= MAX_GPUS:
        raise GpuauditError(f"--simulate-gpus must be between 1 and {MAX_GPUS}, got {n_gpus}")
    try:
        prof = fakenvml.profile(hardware, n_gpus)
    except ValueError as e:
        raise GpuauditError(str(e)) from None
    n_units = sum(len(g.mig or [None]) for g in prof.gpus)
    resolution_s = min(1.0, interval_s / 2)
    if scenario == _STATIC:
        load = static_load(n_units)
    else:
        from gpuaudit.sim.loadmodel import load_model
        from gpuaudit.sim.workload import SCENARIOS

        if scenario not in SCENARIOS:
            raise GpuauditError(f"unknown scenario {scenario!r}; known: {', '.join(_scenario_names())}")
        if n_units == 0:
            load = static_load(0)
        else:
            model = load_model(scenario, n_units, seed)
            load = _cached(model.at, resolution_s)
            if hardware in ("h100", "normal") and n_units == len(prof.gpus):
                _boards(prof, model)
    return fakenvml.FakeNvml(prof, load, clock=time.time, resolution_s=resolution_s, uuid_seed=host)


def _boards(prof: fakenvml.Profile, model: Any) -> None:
    """Whole GPUs show the board the scenario puts on their host where it is another model than the profile's
    (mixed-models' T4s: their name, memory, no GPM), so that the agent records what it would on that host."""
    for spec, board_i in zip(prof.gpus, model.gpu_model.tolist(), strict=True):
        board = model.models[board_i]
        if board.name != spec.name:
            spec.name, spec.mem_total_bytes, spec.gpm = board.name, board.mem_total_bytes, board.gpm


def _cached(at: Any, resolution_s: float) -> fakenvml.LoadFn:
    """The fake asks for each grid step once; this only guards against a repeat of the same step."""
    last: list[Any] = [None, None]

    def load(t: float) -> Any:
        if last[0] != t:
            last[0], last[1] = t, at(t)
        return last[1]

    return load
