"""NVML -> rows: one `gpu_samples` row per GPU (or MIG instance) per interval, holding interval averages,
plus one `gpu_processes` row per compute process.

Averages, not point polls: GPM counters between the start and end samples of the interval; duty cycle and
memory-controller utilization as the mean of the driver's sample buffer since the last timestamp it
returned; power as the energy counter's delta over the interval. Each unit keeps its own baseline, so a
unit that failed an interval simply has no row for it (a visible gap) and restarts from a fresh baseline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuaudit import schema
from gpuaudit.agent.log import event
from gpuaudit.agent.nvml import GPM_METRICS, DeviceFault, GpmBuffers, Handle, Nvml
from gpuaudit.agent.procinfo import Attributor

_LOST_RETRY_MIN_S = 30.0
_LOST_RETRY_MAX_S = 600.0


@dataclass
class Unit:
    """A row source: a whole GPU, or one MIG instance of it."""

    gpu_index: int
    gpu_uuid: str
    gpu_name: str | None
    handle: Handle
    parent: Handle  # the physical GPU's handle (== handle for a whole GPU)
    mig_instance: int | None = None
    mig_profile: str | None = None
    gpu_fraction: float = 1.0
    gpm: GpmBuffers | None = None
    gpm_supported: bool = False
    t_start: float = 0.0  # monotonic start of the current interval
    util_ts: int = 0  # last timestamps NVML returned (passed back as lastSeenTimeStamp)
    mem_ts: int = 0
    proc_ts: int = 0
    energy_mj: int | None = None
    samples_supported: bool = True
    ok: bool = False  # has a baseline; False after a fault until re-primed
    retry_at: float = 0.0
    retry_s: float = _LOST_RETRY_MIN_S
    failures: int = 0  # consecutive faults
    supported: dict[str, bool] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.gpu_index}" if self.mig_instance is None else f"{self.gpu_index}/gi{self.mig_instance}"


def _mig_profile(name: str | None) -> str | None:
    """'NVIDIA H100 80GB HBM3 MIG 3g.40gb' -> '3g.40gb'."""
    if name and " MIG " in name:
        return name.rsplit(" MIG ", 1)[1].strip() or None
    return None


class Sampler:
    def __init__(self, nvml: Nvml, host: str, attributor: Attributor, *,
                 clock: Callable[[], float] = time.monotonic, stop: Callable[[], bool] | None = None) -> None:
        self.nvml = nvml
        # Asked before each GPU of a pass: a stop request (SIGTERM) ends discovery or sampling there instead of
        # after every GPU (NVML calls on a sick GPU can take long; a pass over many GPUs adds up).
        self.stop: Callable[[], bool] = stop or (lambda: False)
        self.host = host
        self.attributor = attributor
        self.clock = clock
        self.units: list[Unit] = []
        self.driver_version: str | None = None

    # --- discovery ---------------------------------------------------------------------------------------
    def discover(self) -> list[Unit]:
        """Find the GPUs and MIG instances and take each one's baseline. A device that fails discovery is
        skipped (logged), the others still count. DriverGone / NvmlUnavailable propagate."""
        self.close()
        nv = self.nvml
        nv.init()
        self.driver_version = nv.driver_version()
        count = nv.device_count()
        units: list[Unit] = []
        for index in range(count):
            if self.stop():
                break
            try:
                units.extend(self._discover_gpu(index))
            except DeviceFault as e:
                event("device_skipped", logging.WARNING, gpu=index, error=e.code)
        self.units = units
        for u in units:
            self._prime(u)
        event("devices", count=count, units=len(units),
              gpm=sum(u.gpm is not None for u in units), driver=self.driver_version)
        return units

    def _discover_gpu(self, index: int) -> list[Unit]:
        nv = self.nvml
        handle = nv.handle(index)
        uuid = nv.uuid(handle)
        name = nv.name(handle)
        gpm = nv.gpm_supported(handle)
        if not nv.mig_enabled(handle):
            unit = Unit(index, uuid, name, handle, handle, gpm_supported=gpm)
            if gpm:
                unit.gpm = nv.gpm_buffers(handle)
            return [unit]
        units = []
        for child in nv.mig_children(handle):
            unit = Unit(index, uuid, name, child.handle, handle, mig_instance=child.gi_id,
                        mig_profile=_mig_profile(child.name),
                        gpu_fraction=(child.slices / child.max_slices) if child.slices else 1.0 / child.max_slices,
                        gpm_supported=gpm)
            if gpm:
                unit.gpm = nv.gpm_buffers(handle, child.gi_id)
            units.append(unit)
        return units

    def close(self) -> None:
        """Free GPM buffers (before a re-init or at exit)."""
        for u in self.units:
            if u.gpm is not None:
                u.gpm.free()
        self.units = []

    # --- baselines -----------------------------------------------------------------------------------
    def _drain(self, u: Unit, kind: str, last: int) -> tuple[float | None, int]:
        """Mean of the driver's `kind` samples newer than `last` (0-1) and the newest timestamp it returned."""
        if not u.samples_supported:
            return None, last
        samples = self.nvml.utilization_samples(u.handle, kind, last)
        if samples is None:
            u.samples_supported = False
            return None, last
        values = [s.percent for s in samples if s.timestamp_us > last]
        newest = max((s.timestamp_us for s in samples), default=last)
        if not values:
            return None, max(newest, last)
        return min(max(sum(values) / len(values) / 100.0, 0.0), 1.0), max(newest, last)

    def _prime(self, u: Unit) -> bool:
        """Start a fresh interval for `u`: GPM start sample, drain the sample buffers, energy baseline."""
        try:
            if u.gpm is not None:
                u.gpm.prime()
            _, u.util_ts = self._drain(u, "gpu", u.util_ts)
            _, u.mem_ts = self._drain(u, "memory", u.mem_ts)
            u.energy_mj = self.nvml.energy_mj(u.parent)
            self._process_util(u)
        except DeviceFault as e:
            self._fault(u, e)
            return False
        u.t_start = self.clock()
        u.ok = True
        return True

    def _fault(self, u: Unit, e: DeviceFault) -> None:
        """Drop this unit's baseline. A lost GPU is retried with backoff; any other error at once the
        first time (a transient glitch costs one interval), then with backoff if it keeps failing."""
        u.ok = False
        u.failures += 1
        if e.code == "NVMLError_GpuIsLost" or u.failures > 1:
            delay = u.retry_s
            u.retry_s = min(u.retry_s * 2, _LOST_RETRY_MAX_S)
        else:
            delay = 0.0
        u.retry_at = self.clock() + delay
        if u.failures & (u.failures - 1) == 0:  # log the 1st, 2nd, 4th, 8th ... failure in a row
            event("device_fault", logging.WARNING, gpu=u.label, uuid=u.gpu_uuid, error=e.code, detail=str(e),
                  failures=u.failures, retry_in_s=round(delay, 1))

    # --- one interval -----------------------------------------------------------------------------
    def sample(self, ts: datetime) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """End the current interval of every unit: its sample row (and process rows), stamped `ts`.
        A unit that faults yields nothing this interval; DriverGone propagates to the life cycle."""
        rows: list[dict[str, Any]] = []
        procs: list[dict[str, Any]] = []
        now = self.clock()
        live: set[int] = set()
        for u in self.units:
            if self.stop():  # the GPUs not read yet have no row for this interval: a gap, as for a fault
                break
            if not u.ok:
                if now >= u.retry_at:
                    self._prime(u)  # its next interval starts now; this one is a gap
                continue
            try:
                row, prow = self._sample_unit(u, ts)
            except DeviceFault as e:
                self._fault(u, e)
                continue
            u.failures = 0
            u.retry_s = _LOST_RETRY_MIN_S
            rows.append(row)
            procs.extend(prow)
            live.update(p["pid"] for p in prow)
        prune = getattr(self.attributor, "prune", None)
        if prune is not None:
            prune(live)
        return rows, procs

    def _sample_unit(self, u: Unit, ts: datetime) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        nv = self.nvml
        gpm = u.gpm.advance() if u.gpm is not None else None
        end = self.clock()
        interval_s = max(end - u.t_start, 1e-6)
        duty, u.util_ts = self._drain(u, "gpu", u.util_ts)
        mem_util, u.mem_ts = self._drain(u, "memory", u.mem_ts)
        if (duty is None or mem_util is None) and u.mig_instance is None:
            rates = nv.utilization_rates(u.handle)  # point value: better than none
            if rates is not None:
                duty = rates.gpu_pct / 100.0 if duty is None else duty
                mem_util = rates.memory_pct / 100.0 if mem_util is None else mem_util
        mem = nv.memory(u.handle)
        power_w, energy_j = self._power(u, interval_s)
        temp = nv.temperature_c(u.parent)
        listed = nv.compute_processes(u.handle)
        running = listed or []
        sm_by_pid = self._process_util(u)
        u.t_start = end

        values = gpm.values if gpm is not None else {}
        sm_active = values.get("sm_active")
        row: dict[str, Any] = {
            "ts": ts, "interval_s": interval_s, "host": self.host, "gpu_uuid": u.gpu_uuid,
            "gpu_index": u.gpu_index, "gpu_name": u.gpu_name, "mig_instance": u.mig_instance,
            "mig_profile": u.mig_profile, "gpu_fraction": u.gpu_fraction,
            "sm_active": sm_active, "sm_occupancy": values.get("sm_occupancy"),
            "tensor_active": values.get("tensor_active"), "dram_active": values.get("dram_active"),
            "duty_cycle": duty, "mem_util": mem_util,
            "mem_used_bytes": mem.used_bytes if mem is not None else None,
            "mem_total_bytes": mem.total_bytes if mem is not None else None,
            "power_w": power_w, "energy_j": energy_j,
            "temp_c": temp,
            "n_processes": len(running),
            "source": schema.SOURCE_NVML_GPM if sm_active is not None else schema.SOURCE_NVML,
        }
        u.supported = {**{k: values.get(k) is not None for k in GPM_METRICS},
                       "duty_cycle": duty is not None, "power_w": power_w is not None,
                       "temp_c": temp is not None, "processes": listed is not None}
        prows = []
        for p in running:
            pid = p.pid
            who = self.attributor(pid)
            prows.append({
                "ts": ts, "host": self.host, "gpu_uuid": u.gpu_uuid, "mig_instance": u.mig_instance,
                "pid": pid, "user": who.get("user"), "job_id": who.get("job_id"),
                "k8s_namespace": who.get("k8s_namespace"), "k8s_pod": who.get("k8s_pod"),
                "pod_uid": who.get("pod_uid"), "container": who.get("container"), "command": who.get("command"),
                "mem_used_bytes": p.used_bytes,
                "sm_util": sm_by_pid.get(pid),
            })
        return row, prows

    def _power(self, u: Unit, interval_s: float) -> tuple[float | None, float | None]:
        """Average power and energy over the interval from the energy counter (a MIG instance gets its
        share of the parent GPU's); falls back to instantaneous power x time."""
        nv = self.nvml
        energy = nv.energy_mj(u.parent)
        prev, u.energy_mj = u.energy_mj, energy
        if energy is not None and prev is not None and energy >= prev:  # a reset counter is not a delta
            energy_j = (energy - prev) / 1000.0 * u.gpu_fraction
            return energy_j / interval_s, energy_j
        mw = nv.power_mw(u.parent)
        if mw is None:
            return None, None
        power_w = mw / 1000.0 * u.gpu_fraction
        return power_w, power_w * interval_s

    def _process_util(self, u: Unit) -> dict[int, float]:
        """Per-process SM utilization since the last call (0-1). NVML refuses this in many ways
        (NotFound when idle, NotSupported on MIG, ...): any NVML error just means unknown."""
        try:
            samples = self.nvml.process_utilization(u.handle, u.proc_ts)
        except DeviceFault as e:
            if e.code == "NVMLError_GpuIsLost":
                raise
            return {}
        acc: dict[int, list[float]] = {}
        for s in samples:
            if s.timestamp_us > u.proc_ts:
                acc.setdefault(s.pid, []).append(s.sm_pct)
        u.proc_ts = max((s.timestamp_us for s in samples), default=u.proc_ts)
        return {pid: min(sum(v) / len(v) / 100.0, 1.0) for pid, v in acc.items()}

    def describe(self) -> list[dict[str, Any]]:
        """What `agent status` shows per unit."""
        return [{
            "index": u.gpu_index, "uuid": u.gpu_uuid, "name": u.gpu_name, "mig_instance": u.mig_instance,
            "mig_profile": u.mig_profile, "gpu_fraction": round(u.gpu_fraction, 4),
            "path": "gpm" if u.gpm is not None else "duty-cycle fallback",
            "ok": u.ok, "supported": u.supported,
        } for u in self.units]
