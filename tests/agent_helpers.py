"""Fixtures for the agent tests: a manual clock, a virtual clock for a whole running agent, and scripted step
loads for the fake NVML."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from gpuaudit.agent.nvml import Nvml
from gpuaudit.agent.sampler import Sampler
from gpuaudit.sim import fakenvml


class ManualClock:
    """One clock for the fake NVML and the sampler: time moves only when the test says so."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class _VirtualWake(threading.Event):
    """The agent's wake-up event on a ManualClock: a sleep that is not woken moves the clock by exactly the
    time asked for. `real`: the sleep also passes in real time (paced for a scraper outside the process)."""

    def __init__(self, clock: ManualClock, real: bool) -> None:
        super().__init__()
        self.clock, self.real = clock, real

    def wait(self, timeout: float | None = None) -> bool:
        woke = super().wait(timeout if self.real else 0)
        if not woke and timeout is not None:
            self.clock.advance(timeout)
        return woke


def on_virtual_time(agent: Any, clock: ManualClock, *, real: bool = False) -> None:
    """Run `agent` (built with mono=clock, its fake NVML with clock=clock) on virtual time: the clock moves
    only while the agent sleeps, so every tick lands exactly on its grid and every interval is as long as
    configured, whatever the machine's speed. Without `real` a run of any --duration takes no real time.
    Intervals and the fake's resolution should be binary fractions (0.125, 0.0625) so that the grid is exact."""
    agent.wake = _VirtualWake(clock, real)


def step_load(t0: float, steps: Sequence[tuple[float, fakenvml.Load]], n_units: int,
              per_unit: Callable[[int, fakenvml.Load], fakenvml.Load] | None = None) -> fakenvml.LoadFn:
    """A piecewise-constant load: steps[i] = (start offset s from t0, load), the same for every unit
    unless `per_unit` varies it."""

    def load(t: float) -> list[Any]:
        current = steps[0][1]
        for start, ld in steps:
            if t - t0 >= start:
                current = ld
        return [per_unit(i, current) if per_unit else current for i in range(n_units)]

    return load


def scaled(i: int, ld: fakenvml.Load) -> fakenvml.Load:
    """Unit i runs at (i+1)/8 of the scripted SM activity: per-GPU values are distinguishable."""
    return replace(ld, sm_active=ld.sm_active * (i + 1) / 8)


def make_sampler(profile: str, steps: Sequence[tuple[float, fakenvml.Load]], *, n_gpus: int = 2,
                 per_unit: Callable[[int, fakenvml.Load], fakenvml.Load] | None = None,
                 attributor: Callable[[int], dict[str, Any]] | None = None,
                 ) -> tuple[Sampler, fakenvml.FakeNvml, ManualClock]:
    clock = ManualClock()
    prof = fakenvml.profile(profile, n_gpus)
    n_units = sum(len(g.mig or [None]) for g in prof.gpus)
    fake = fakenvml.FakeNvml(prof, step_load(clock.t, steps, n_units, per_unit), clock=clock, resolution_s=1.0)
    sampler = Sampler(Nvml(fake), "node-1", attributor or fake.attribution, clock=clock)
    return sampler, fake, clock
