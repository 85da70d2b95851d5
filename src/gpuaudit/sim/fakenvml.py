"""A pynvml-shaped fake NVML with named hardware profiles, driven by a load function.

It is what tests and `gpuaudit agent run --simulate` hand to `gpuaudit.agent.nvml.Nvml` instead of the real
`pynvml`. It raises the real pynvml exception classes and returns the real ctypes structures (pynvml is
imported for them; importing pynvml does not load libnvidia-ml), so the agent's real code path runs.

Like real hardware, it keeps cumulative counters: the load function is integrated on a fixed time grid
(`resolution_s`, midpoint rule), GPM samples snapshot the integrals, nvmlGpmMetricsGet divides the
difference by the time between two samples, the energy counter is the integral of power, and the
utilization sample buffer holds one sample per grid step. A scripted step load whose steps fall on the
grid therefore has exactly computable interval averages, which is what the tests assert.
"""

from __future__ import annotations

import ctypes
import hashlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, NoReturn

import pynvml as _real

from gpuaudit.agent.nvml import GPM_METRICS
from gpuaudit.schema import MIB
from gpuaudit.sim.loads import GpuLoad, ProcessLoad

# Constants, exception classes and structs are the real ones.
for _name in dir(_real):
    if _name.startswith(("NVML_", "NVMLError", "c_nvml", "nvmlMemory_v", "struct_c_nvml")):
        globals()[_name] = getattr(_real, _name)
NVMLError = _real.NVMLError


# The simulated GPU state is the load model's own type (one definition for both).
Load = GpuLoad
ProcLoad = ProcessLoad


LoadFn = Callable[[float], Sequence[Any]]  # t (seconds on the fake's clock) -> one Load per unit


@dataclass
class Fault:
    """Make `fn` (a pynvml function name, or "*" for all) raise `error` (e.g. "GpuIsLost") for `gpu`
    (an index, or None for every device and init) while start_s <= t - t0 < end_s."""

    error: str
    gpu: int | None = None
    fn: str = "*"
    start_s: float = 0.0
    end_s: float = float("inf")


@dataclass
class _MigSpec:
    gi_id: int
    profile: str  # e.g. "3g.40gb"
    slices: int


@dataclass
class _GpuSpec:
    name: str = "NVIDIA H100 80GB HBM3"
    gpm: bool = True
    mem_total_bytes: int = 80 * 1024 * MIB
    mig: list[_MigSpec] | None = None
    unsupported_metrics: tuple[str, ...] = ()  # GPM metric constant names whose nvmlReturn fails


@dataclass
class Profile:
    """A hardware scenario: the GPUs, which functions are unsupported, which faults happen."""

    gpus: list[_GpuSpec]
    unsupported: tuple[str, ...] = ()  # pynvml function names raising NotSupported on every device
    faults: list[Fault] = field(default_factory=list)
    init_error: str | None = None  # e.g. "LibraryNotFound": nvmlInit always fails
    driver_version: str = "550.54.15"


def _h100(n: int, name: str = "NVIDIA H100 80GB HBM3", mem_gib: int = 80) -> list[_GpuSpec]:
    return [_GpuSpec(name=name, mem_total_bytes=mem_gib * 1024 * MIB) for _ in range(n)]


def profile(name: str, n_gpus: int = 8) -> Profile:
    """Named hardware scenarios (the fault matrix the agent is tested against)."""
    if name in ("h100", "normal"):
        return Profile(_h100(n_gpus))
    if name == "h200":
        return Profile(_h100(n_gpus, "NVIDIA H200", 141))
    if name == "pre-hopper":  # A100: no GPM, duty cycle only
        return Profile([_GpuSpec(name="NVIDIA A100-SXM4-80GB", gpm=False) for _ in range(n_gpus)])
    if name == "not-supported":  # consumer / virtualized boards: many fields missing
        return Profile(
            [_GpuSpec(name="NVIDIA L4", gpm=False, mem_total_bytes=24 * 1024 * MIB) for _ in range(n_gpus)],
            unsupported=("nvmlDeviceGetSamples", "nvmlDeviceGetTotalEnergyConsumption",
                         "nvmlDeviceGetTemperature", "nvmlDeviceGetProcessUtilization",
                         "nvmlDeviceGetMemoryInfo_v2"),
        )
    if name == "gpu-lost":  # GPU 1 falls off the bus after 3 s
        return Profile(_h100(n_gpus), faults=[Fault("GpuIsLost", gpu=1, start_s=3.0)])
    if name == "mig":  # GPU 0 split 3g + 2g + 1g + 1g, the rest whole
        mig = [_MigSpec(1, "3g.40gb", 3), _MigSpec(5, "2g.20gb", 2), _MigSpec(13, "1g.10gb", 1),
               _MigSpec(14, "1g.10gb", 1)]
        gpus = _h100(max(n_gpus, 1))
        gpus[0].mig = mig
        return Profile(gpus)
    if name == "zero-devices":
        return Profile([])
    if name == "library-missing":
        return Profile([], init_error="LibraryNotFound")
    if name == "driver-mismatch":
        return Profile(_h100(n_gpus), init_error="LibRmVersionMismatch")
    if name == "driver-reload":  # the driver goes away for 2 s after 2 s
        return Profile(_h100(n_gpus), faults=[Fault("Uninitialized", start_s=2.0, end_s=4.0)])
    raise ValueError(f"unknown fake NVML profile {name!r}; expected one of {', '.join(_PROFILES)}")


_PROFILES = ("h100", "h200", "pre-hopper", "not-supported", "gpu-lost", "mig", "zero-devices",
            "library-missing", "driver-mismatch", "driver-reload")


class _Handle:
    __slots__ = ("gi_id", "index", "mig_pos", "unit")

    def __init__(self, index: int, unit: int, mig_pos: int | None = None, gi_id: int | None = None) -> None:
        self.index, self.unit, self.mig_pos, self.gi_id = index, unit, mig_pos, gi_id

    def __repr__(self) -> str:
        return f"<fake nvml handle gpu={self.index} mig={self.gi_id}>"


# The agent's map (stored name -> pynvml constant), inverted: a metric id a request names -> what it measures.
_GPM_BY_ID = {getattr(_real, const): name for name, const in GPM_METRICS.items()}
_INTEGRATED = tuple(GPM_METRICS)


class _Unit:
    """Counters of one GPU or MIG instance."""

    def __init__(self) -> None:
        self.t = 0.0  # time up to which the integrals run
        self.integrals = dict.fromkeys(_INTEGRATED, 0.0)
        self.energy_mj = 0.0
        self.util_samples: deque[tuple[int, int, int]] = deque(maxlen=100)  # (ts_us, duty %, mem %)
        self.proc_samples: deque[tuple[int, int, float]] = deque(maxlen=400)  # (ts_us, pid, sm %)
        self.load: Any = Load()


class FakeNvml:
    """The pynvml-shaped module object. Attribute access falls back to the real pynvml for constants."""

    def __init__(self, prof: Profile, load: LoadFn | None = None, *, clock: Callable[[], float] = time.time,
                 resolution_s: float = 1.0, uuid_seed: str = "") -> None:
        self.profile = prof
        self.uuid_seed = uuid_seed  # simulated nodes sharing a dataset need distinct GPU UUIDs
        self.clock = clock
        self.resolution_s = resolution_s
        self.t0 = clock()
        self.initialized = False
        self.init_calls = 0
        self.calls: dict[str, int] = {}
        self.gpm_buffers: dict[int, tuple[ctypes.Array[Any], Any]] = {}  # address -> (keep-alive, snapshot)
        self.freed = 0
        # Units: one per whole GPU, one per MIG instance; `load` returns one Load per unit in this order.
        self.units: list[_Unit] = []
        self.unit_of: list[list[int]] = []  # gpu index -> unit ids
        for spec in prof.gpus:
            ids = []
            for _ in range(len(spec.mig or ()) or 1):  # one unit per MIG instance, or the whole GPU
                ids.append(len(self.units))
                self.units.append(_Unit())
            self.unit_of.append(ids)
        self.load_fn: LoadFn = load or (lambda t: [Load() for _ in self.units])
        grid = self._grid(self.t0)
        for u in self.units:
            u.t = grid
        self.procs: dict[int, Any] = {}  # pid -> the process's load entry (attribution in simulation)

    # --- plumbing ----------------------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        return getattr(_real, name)

    def _grid(self, t: float) -> float:
        return (t // self.resolution_s) * self.resolution_s

    def _advance(self) -> None:
        """Integrate the load up to the last grid point before now."""
        if not self.units:
            return
        now = self._grid(self.clock())
        t = self.units[0].t
        step = self.resolution_s
        while t + step <= now + 1e-9:
            loads = self.load_fn(t + step / 2)
            ts_us = round((t + step) * 1e6)
            for u, ld in zip(self.units, loads, strict=True):
                for k in _INTEGRATED:
                    u.integrals[k] += getattr(ld, k) * step
                u.energy_mj += ld.power_w * step * 1000.0
                u.util_samples.append((ts_us, round(ld.duty_cycle * 100), round(ld.mem_util * 100)))
                for p in ld.processes:
                    if p.sm_util is not None:
                        u.proc_samples.append((ts_us, p.pid, p.sm_util * 100))
                    self.procs[p.pid] = p
                u.load = ld
            t += step
        for u in self.units:
            u.t = t

    def _raise(self, error: str) -> NoReturn:
        raise getattr(_real, f"NVMLError_{error}")()

    def _enter(self, fn: str, handle: _Handle | None = None) -> None:
        self.calls[fn] = self.calls.get(fn, 0) + 1
        elapsed = self.clock() - self.t0
        for f in self.profile.faults:
            if f.start_s <= elapsed < f.end_s and f.fn in ("*", fn):
                if f.gpu is None:
                    self.initialized = False
                    self._raise(f.error)
                if handle is not None and handle.index == f.gpu:
                    self._raise(f.error)
        if not self.initialized:
            self._raise("Uninitialized")
        if fn in self.profile.unsupported:
            self._raise("NotSupported")

    def _unit(self, handle: _Handle) -> _Unit:
        self._advance()
        return self.units[handle.unit]

    def _spec(self, handle: _Handle) -> _GpuSpec:
        return self.profile.gpus[handle.index]

    # --- life cycle -----------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.profile.init_error:
            self._raise(self.profile.init_error)
        elapsed = self.clock() - self.t0
        for f in self.profile.faults:
            if f.gpu is None and f.start_s <= elapsed < f.end_s:
                self._raise("DriverNotLoaded")
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.profile.driver_version

    # --- devices --------------------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.profile.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.profile.gpus):
            self._raise("InvalidArgument")
        h = _Handle(index, self.unit_of[index][0])
        for f in self.profile.faults:  # a device that is already broken fails here too
            if f.gpu == index and f.start_s <= self.clock() - self.t0 < f.end_s and f.fn in ("*", "handle"):
                self._raise(f.error)
        return h

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        self._enter("nvmlDeviceGetUUID", handle)
        h = hashlib.sha1(f"fakenvml/{self.uuid_seed}/{handle.index}".encode()).hexdigest()
        base = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
        return base if handle.gi_id is None else f"MIG-{base[4:]}-{handle.gi_id}"

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        self._enter("nvmlDeviceGetName", handle)
        spec = self._spec(handle)
        if handle.mig_pos is None:
            return spec.name
        assert spec.mig is not None
        return f"{spec.name} MIG {spec.mig[handle.mig_pos].profile}"

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        self._enter("nvmlDeviceGetMigMode", handle)
        if self._spec(handle).mig is None:
            if self._spec(handle).gpm:  # MIG-capable board with MIG off
                return [0, 0]
            self._raise("NotSupported")
        return [1, 1]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", handle)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        mig = self._spec(handle).mig or []
        if index >= len(mig):
            self._raise("NotFound")
        return _Handle(handle.index, self.unit_of[handle.index][index], index, mig[index].gi_id)

    def nvmlDeviceGetGpuInstanceId(self, handle: _Handle) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", handle)
        if handle.gi_id is None:
            self._raise("InvalidArgument")
        return handle.gi_id

    def nvmlDeviceGetAttributes(self, handle: _Handle) -> Any:
        self._enter("nvmlDeviceGetAttributes", handle)
        attrs = _real.c_nvmlDeviceAttributes()
        spec = self._spec(handle)
        if handle.mig_pos is not None and spec.mig:
            attrs.gpuInstanceSliceCount = spec.mig[handle.mig_pos].slices
        else:
            attrs.gpuInstanceSliceCount = 7
        return attrs

    # --- metrics --------------------------------------------------------------------------------------
    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> Any:
        self._enter("nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo", handle)
        ld = self._unit(handle).load
        mem = _real.c_nvmlMemory_v2_t() if version else _real.c_nvmlMemory_t()
        total = ld.mem_total_bytes
        if handle.mig_pos is None:
            total = self._spec(handle).mem_total_bytes
        mem.total, mem.used, mem.free = total, ld.mem_used_bytes, max(total - ld.mem_used_bytes, 0)
        return mem

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:
        self._enter("nvmlDeviceGetUtilizationRates", handle)
        if handle.mig_pos is not None:
            self._raise("NotSupported")
        ld = self._unit(handle).load
        util = _real.c_nvmlUtilization_t()
        util.gpu, util.memory = round(ld.duty_cycle * 100), round(ld.mem_util * 100)
        return util

    def nvmlDeviceGetSamples(self, handle: _Handle, sampling_type: int, last_seen_us: int) -> Any:
        self._enter("nvmlDeviceGetSamples", handle)
        if handle.mig_pos is not None:
            self._raise("NotSupported")
        u = self._unit(handle)
        col = {_real.NVML_GPU_UTILIZATION_SAMPLES: 1, _real.NVML_MEMORY_UTILIZATION_SAMPLES: 2}.get(sampling_type)
        if col is None:
            self._raise("InvalidArgument")
        out = []
        for s in u.util_samples:
            if s[0] > last_seen_us:
                c = _real.c_nvmlSample_t()
                c.timeStamp = s[0]
                c.sampleValue.uiVal = s[col]
                out.append(c)
        if not out:
            self._raise("NotFound")
        return (_real.NVML_VALUE_TYPE_UNSIGNED_INT, out)

    def _parent_unit(self, handle: _Handle) -> list[_Unit]:
        self._advance()
        return [self.units[i] for i in self.unit_of[handle.index]]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:
        self._enter("nvmlDeviceGetTotalEnergyConsumption", handle)
        if handle.mig_pos is not None:
            self._raise("NotSupported")
        return int(sum(u.energy_mj for u in self._parent_unit(handle)))

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        self._enter("nvmlDeviceGetPowerUsage", handle)
        if handle.mig_pos is not None:
            self._raise("NotSupported")
        return int(sum(u.load.power_w for u in self._parent_unit(handle)) * 1000)

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature", handle)
        if handle.mig_pos is not None:
            self._raise("NotSupported")
        return int(max(u.load.temp_c for u in self._parent_unit(handle)))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses", handle)
        units = [self._unit(handle)] if handle.mig_pos is not None or not self._spec(handle).mig\
            else self._parent_unit(handle)
        return [SimpleNamespace(pid=p.pid, usedGpuMemory=p.mem_used_bytes, gpuInstanceId=handle.gi_id or 0,
                                computeInstanceId=0) for u in units for p in u.load.processes]

    def nvmlDeviceGetProcessUtilization(self, handle: _Handle, last_seen_us: int) -> list[Any]:
        self._enter("nvmlDeviceGetProcessUtilization", handle)
        if handle.mig_pos is not None:
            self._raise("NotSupported")
        u = self._unit(handle)
        per_pid: dict[int, list[float]] = {}
        latest: dict[int, int] = {}
        for ts, pid, sm in u.proc_samples:
            if ts > last_seen_us:
                per_pid.setdefault(pid, []).append(sm)
                latest[pid] = ts
        if not per_pid:
            self._raise("NotFound")
        out = []
        for pid, vals in per_pid.items():
            s = _real.c_nvmlProcessUtilizationSample_t()
            s.pid, s.timeStamp, s.smUtil = pid, latest[pid], round(sum(vals) / len(vals))
            out.append(s)
        return out

    # --- GPM ------------------------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle: _Handle) -> Any:
        self._enter("nvmlGpmQueryDeviceSupport", handle)
        support = _real.c_nvmlGpmSupport_t()
        support.version = _real.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(self._spec(handle).gpm)
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        raw = ctypes.create_string_buffer(16)
        ptr = ctypes.cast(raw, _real.c_nvmlGpmSample_t)
        self.gpm_buffers[ctypes.addressof(raw)] = (raw, None)
        return ptr

    def _buffer_key(self, ptr: Any) -> int:
        key = ctypes.cast(ptr, ctypes.c_void_p).value or 0
        if key not in self.gpm_buffers:
            self._raise("InvalidArgument")
        return key

    def nvmlGpmSampleFree(self, ptr: Any) -> None:
        self._enter("nvmlGpmSampleFree")
        del self.gpm_buffers[self._buffer_key(ptr)]
        self.freed += 1

    def _gpm_take(self, unit_id: int, ptr: Any) -> Any:
        key = self._buffer_key(ptr)
        self._advance()
        u = self.units[unit_id]
        self.gpm_buffers[key] = (self.gpm_buffers[key][0], (unit_id, u.t, dict(u.integrals), u.load))
        return ptr

    def nvmlGpmSampleGet(self, handle: _Handle, ptr: Any) -> Any:
        self._enter("nvmlGpmSampleGet", handle)
        if not self._spec(handle).gpm:
            self._raise("NotSupported")
        return self._gpm_take(handle.unit, ptr)

    def nvmlGpmMigSampleGet(self, handle: _Handle, gi_id: int, ptr: Any) -> Any:
        self._enter("nvmlGpmMigSampleGet", handle)
        mig = self._spec(handle).mig or []
        for pos, m in enumerate(mig):
            if m.gi_id == gi_id:
                return self._gpm_take(self.unit_of[handle.index][pos], ptr)
        self._raise("NotFound")
        return None

    def nvmlGpmMetricsGet(self, req: Any) -> Any:
        self._enter("nvmlGpmMetricsGet")
        if req.version != _real.NVML_GPM_METRICS_GET_VERSION:
            self._raise("ArgumentVersionMismatch")
        s1 = self.gpm_buffers[self._buffer_key(req.sample1)][1]
        s2 = self.gpm_buffers[self._buffer_key(req.sample2)][1]
        if s1 is None or s2 is None or s1[0] != s2[0]:
            self._raise("InvalidArgument")
        unit_id, t1, i1, _ = s1
        _, t2, i2, load2 = s2
        gpu = next(g for g, ids in enumerate(self.unit_of) if unit_id in ids)
        unsupported = {getattr(_real, k) for k in self.profile.gpus[gpu].unsupported_metrics}
        for i in range(req.numMetrics):
            metric = req.metrics[i]
            name = _GPM_BY_ID.get(metric.metricId)
            if name is None or metric.metricId in unsupported:
                metric.nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED
                continue
            metric.nvmlReturn = _real.NVML_SUCCESS
            # No grid step between the samples: report the instantaneous value, as a too-short real
            # interval would give the latest counter window.
            value = (i2[name] - i1[name]) / (t2 - t1) if t2 > t1 else getattr(load2, name)
            metric.value = value * 100.0
        return req

    # --- simulation attribution ---------------------------------------------------------------------
    def attribution(self, pid: int) -> dict[str, Any]:
        """Who a simulated pid belongs to (there is no /proc entry for it)."""
        p = self.procs.get(pid)
        if p is None:
            return {}
        return {k: getattr(p, k, None) for k in ("user", "job_id", "command", "k8s_namespace", "k8s_pod",
                                                  "container", "pod_uid")}


def make(profile_name: str, n_gpus: int = 8, load: LoadFn | None = None, *,
         clock: Callable[[], float] = time.time, resolution_s: float = 1.0) -> FakeNvml:
    return FakeNvml(profile(profile_name, n_gpus), load, clock=clock, resolution_s=resolution_s)
