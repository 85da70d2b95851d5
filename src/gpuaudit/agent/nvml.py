"""THE NVML seam: every call into NVML goes through `Nvml`, and only here are NVML's function names written.

Callers use its typed device calls (utilization samples, energy, processes, GPM samples, MIG children, ...),
each returning a small typed value; the pynvml function names, constants and structs stay inside this module.
The `pynvml` module (nvidia-ml-py) is a dependency handed in, so tests and `agent run --simulate` pass the
pynvml-shaped fake from `gpuaudit.sim.fakenvml` and this same code runs against it; production passes nothing
and the real module is imported on first use. NVML errors are translated here, once, into what the agent can
act on:

- NotSupported / FunctionNotFound / NoPermission on a field  -> `None` (the field is unmeasured)
- GpuIsLost, Unknown, anything else on one device           -> `DeviceFault` (that device only)
- Uninitialized / DriverNotLoaded / RM mismatch mid-run      -> `DriverGone` (re-init with backoff)
- library or driver missing at start                         -> `NvmlUnavailable`, a one-line fatal error
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gpuaudit.errors import GpuauditError

log = logging.getLogger("gpuaudit.agent")

# GPM metric names we store -> the pynvml constant holding their id. GPM reports percent (0-100).
GPM_METRICS: dict[str, str] = {
    "sm_active": "NVML_GPM_METRIC_SM_UTIL",
    "sm_occupancy": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "tensor_active": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "dram_active": "NVML_GPM_METRIC_DRAM_BW_UTIL",
}

# Error class names (pynvml generates NVMLError_<CamelCase> for each NVML_ERROR_* code).
_FIELD_UNAVAILABLE = ("NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLError_NoPermission")
_DRIVER_GONE = ("NVMLError_Uninitialized", "NVMLError_DriverNotLoaded", "NVMLError_LibRmVersionMismatch",
                "NVMLError_LibraryNotFound")

_HINT_LIBRARY = ("install the NVIDIA driver on this node (it provides libnvidia-ml.so.1), "
                "or try the agent without a GPU: gpuaudit agent run --simulate phantom")
_HINT_MODULE = "install the NVML bindings: pip install nvidia-ml-py"


class NvmlUnavailable(GpuauditError):
    """NVML cannot be used at all on this machine (no bindings, no driver, version mismatch)."""


class DeviceFault(Exception):
    """One device (or MIG instance) failed a query; the others carry on."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class DriverGone(Exception):
    """NVML lost its driver (reload, uninitialized): shut down, re-init with backoff."""


def _error_name(exc: BaseException) -> str:
    return type(exc).__name__


def unavailable(e: DeviceFault) -> bool:
    """Whether a fault only says that this device cannot give the field (NotSupported, FunctionNotFound,
    NoPermission), as opposed to a device in trouble."""
    return e.code in _FIELD_UNAVAILABLE


Handle = Any  # an NVML device handle: pynvml's c_nvmlDevice_t, or the fake's; opaque to callers

# pynvml value-type code -> the union member holding it
_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
_SAMPLE_KINDS = {"gpu": "NVML_GPU_UTILIZATION_SAMPLES", "memory": "NVML_MEMORY_UTILIZATION_SAMPLES"}


@dataclass(frozen=True)
class Sample:
    """One entry of the driver's utilization sample buffer."""

    timestamp_us: int
    percent: float


@dataclass(frozen=True)
class Utilization:
    """nvmlDeviceGetUtilizationRates: a point value, percent."""

    gpu_pct: float
    memory_pct: float


@dataclass(frozen=True)
class Memory:
    used_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class _ComputeProcess:
    pid: int
    used_bytes: int | None  # None: the driver does not say (e.g. no permission)


@dataclass(frozen=True)
class _ProcessSample:
    """One entry of nvmlDeviceGetProcessUtilization: a process's SM utilization, percent."""

    pid: int
    timestamp_us: int
    sm_pct: float


@dataclass(frozen=True)
class _MigChild:
    """A MIG instance of a GPU: its device handle, GPU instance id, name and size in slices."""

    handle: Handle
    gi_id: int
    name: str | None
    slices: int  # 0: the driver does not say
    max_slices: int  # the GPU's MIG device slots


@dataclass
class _GpmResult:
    """One GPM interval: metric name -> fraction 0-1, or None where that metric's nvmlReturn failed."""

    values: dict[str, float | None]


class Nvml:
    """Lazy NVML session. `module` is pynvml or a pynvml-shaped fake."""

    def __init__(self, module: ModuleType | Any | None = None) -> None:
        self._module = module
        self.initialized = False
        self.ever_initialized = False  # after a first success, a failing re-init is transient

    # --- module and init ---------------------------------------------------------------------------
    @property
    def m(self) -> Any:
        if self._module is None:
            try:
                import pynvml
            except ImportError as e:
                raise NvmlUnavailable(f"the pynvml module is not installed; {_HINT_MODULE}") from e
            self._module = pynvml
        return self._module

    def init(self) -> None:
        """nvmlInit once; a missing library / driver becomes one clear fatal message with a hint."""
        if self.initialized:
            return
        m = self.m
        try:
            m.nvmlInit()
        except m.NVMLError as e:
            name = _error_name(e)
            if self.ever_initialized and name in (*_DRIVER_GONE, "NVMLError_Unknown"):
                raise DriverGone(f"nvmlInit: {name}") from None  # driver reload in progress: retry
            if name == "NVMLError_LibraryNotFound":
                raise NvmlUnavailable(f"NVML library not found ({e}); {_HINT_LIBRARY}") from None
            if name == "NVMLError_DriverNotLoaded":
                raise NvmlUnavailable(
                    f"the NVIDIA driver is not loaded ({e}); load it (modprobe nvidia) or check "
                    "`nvidia-smi`; without a GPU use --simulate") from None
            if name == "NVMLError_LibRmVersionMismatch":
                raise NvmlUnavailable(
                    f"NVML and the kernel driver have different versions ({e}); reboot the node or "
                    "reload the nvidia kernel modules after a driver upgrade") from None
            if name == "NVMLError_NoPermission":
                raise NvmlUnavailable(f"no permission to use NVML ({e}); run the agent as a user "
                                      "that can open /dev/nvidia*") from None
            raise NvmlUnavailable(f"NVML failed to initialise: {e}") from None
        self.initialized = True
        self.ever_initialized = True

    def shutdown(self) -> None:
        if not self.initialized:
            return
        self.initialized = False
        try:
            self.m.nvmlShutdown()
        except self.m.NVMLError as e:  # already gone: nothing to release
            log.debug("event=nvml_shutdown_error error=%s", _error_name(e))

    # --- the one call helper ------------------------------------------------------------------------
    def _call(self, fn: str, *args: Any, **kwargs: Any) -> Any:
        """Call pynvml.<fn>; NVML errors are translated (see the module docstring), none is swallowed."""
        self.init()
        m = self.m
        try:
            return getattr(m, fn)(*args, **kwargs)
        except m.NVMLError as e:
            name = _error_name(e)
            if name in _DRIVER_GONE:
                self.initialized = False
                raise DriverGone(f"{fn}: {name}") from None
            raise DeviceFault(name, f"{fn}: {e}") from None
        except AttributeError as e:  # old bindings without this function: same as FunctionNotFound
            raise DeviceFault("NVMLError_FunctionNotFound", f"{fn}: {e}") from None

    def _query(self, fn: str, *args: Any, **kwargs: Any) -> Any:
        """Like `_call`, but a field this device cannot give (NotSupported, FunctionNotFound,
        NoPermission) is `None` instead of an error."""
        try:
            return self._call(fn, *args, **kwargs)
        except DeviceFault as e:
            if unavailable(e):
                return None
            raise

    def _const(self, name: str, default: Any = None) -> Any:
        return getattr(self.m, name, default)

    # --- system and devices ---------------------------------------------------------------------------
    def driver_version(self) -> str | None:
        return self._query("nvmlSystemGetDriverVersion")

    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def handle(self, index: int) -> Handle:
        return self._call("nvmlDeviceGetHandleByIndex", index)

    def uuid(self, handle: Handle) -> str:
        return str(self._call("nvmlDeviceGetUUID", handle))

    def mig_uuid(self, handle: Handle) -> str | None:
        """A MIG instance's own UUID (MIG-...); None where the driver gives none (older than R470)."""
        got = self._query("nvmlDeviceGetUUID", handle)
        return str(got) if got else None

    def name(self, handle: Handle) -> str | None:
        return self._query("nvmlDeviceGetName", handle)

    def mig_enabled(self, handle: Handle) -> bool:
        """MIG mode is on now (its current mode; a board without MIG: False)."""
        mode = self._query("nvmlDeviceGetMigMode", handle)
        return bool(mode and mode[0])

    def mig_children(self, handle: Handle) -> list[_MigChild]:
        """The MIG instances of a GPU in MIG mode, by slot; an empty slot is skipped, any other fault raises."""
        slots = self._query("nvmlDeviceGetMaxMigDeviceCount", handle) or 7
        out = []
        for i in range(slots):
            try:
                mh = self._call("nvmlDeviceGetMigDeviceHandleByIndex", handle, i)
            except DeviceFault as e:
                if e.code == "NVMLError_NotFound":  # this slot holds no instance
                    continue
                raise
            gi = self._call("nvmlDeviceGetGpuInstanceId", mh)
            name = self._query("nvmlDeviceGetName", mh)
            attrs = self._query("nvmlDeviceGetAttributes", mh)
            slices = getattr(attrs, "gpuInstanceSliceCount", 0) if attrs is not None else 0
            out.append(_MigChild(mh, int(gi), name, int(slices or 0), int(slots)))
        return out

    # --- fields ---------------------------------------------------------------------------------------
    def utilization_samples(self, handle: Handle, kind: str, last_seen_us: int) -> list[Sample] | None:
        """The driver's buffered `kind` ("gpu": duty cycle, "memory": memory-controller) samples newer than
        `last_seen_us` as NVML returns them; [] when there is none since, None when this device gives none."""
        try:
            vtype, raw = self._call("nvmlDeviceGetSamples", handle, self._const(_SAMPLE_KINDS[kind]), last_seen_us)
        except DeviceFault as e:
            if e.code == "NVMLError_NotFound":  # no sample since `last_seen_us`
                return []
            if unavailable(e):
                return None
            raise
        attr = _VALUE_FIELDS.get(vtype, "uiVal")
        return [Sample(int(s.timeStamp), float(getattr(s.sampleValue, attr))) for s in raw]

    def utilization_rates(self, handle: Handle) -> Utilization | None:
        rates = self._query("nvmlDeviceGetUtilizationRates", handle)
        return None if rates is None else Utilization(float(rates.gpu), float(rates.memory))

    def memory(self, handle: Handle) -> Memory | None:
        """Used and total memory (the v2 struct where the driver has it: it leaves out the reserved memory)."""
        mem = self._query("nvmlDeviceGetMemoryInfo", handle, version=self._const("nvmlMemory_v2"))
        if mem is None:
            mem = self._query("nvmlDeviceGetMemoryInfo", handle)
        return None if mem is None else Memory(int(mem.used), int(mem.total))

    def energy_mj(self, handle: Handle) -> int | None:
        """The energy counter since the driver loaded, millijoules."""
        got = self._query("nvmlDeviceGetTotalEnergyConsumption", handle)
        return None if got is None else int(got)

    def power_mw(self, handle: Handle) -> int | None:
        got = self._query("nvmlDeviceGetPowerUsage", handle)
        return None if got is None else int(got)

    def temperature_c(self, handle: Handle) -> int | None:
        got = self._query("nvmlDeviceGetTemperature", handle, self._const("NVML_TEMPERATURE_GPU", 0))
        return None if got is None else int(got)

    def compute_processes(self, handle: Handle) -> list[_ComputeProcess] | None:
        listed = self._query("nvmlDeviceGetComputeRunningProcesses", handle)
        if listed is None:
            return None
        out = []
        for p in listed:
            used = getattr(p, "usedGpuMemory", None)
            out.append(_ComputeProcess(int(p.pid), int(used) if used is not None else None))
        return out

    def process_utilization(self, handle: Handle, last_seen_us: int) -> list[_ProcessSample]:
        """Per-process SM utilization samples newer than `last_seen_us`. NVML refuses this in many ways
        (NotFound when idle, NotSupported on MIG, ...): each is a DeviceFault, for the caller to judge."""
        raw = self._call("nvmlDeviceGetProcessUtilization", handle, last_seen_us)
        return [_ProcessSample(int(s.pid), int(s.timeStamp), float(s.smUtil)) for s in raw]

    # --- GPM ------------------------------------------------------------------------------------------
    def gpm_supported(self, handle: Handle) -> bool:
        support = self._query("nvmlGpmQueryDeviceSupport", handle)
        return bool(support is not None and getattr(support, "isSupportedDevice", 0))

    def gpm_buffers(self, handle: Handle, gi_id: int | None = None) -> GpmBuffers:
        """The GPM sample pair of a whole GPU, or of its MIG instance `gi_id` (`handle`: the GPU's)."""
        return GpmBuffers(self, handle, gi_id)

    def _gpm_alloc(self) -> Any:
        return self._call("nvmlGpmSampleAlloc")

    def _gpm_free(self, buf: Any) -> None:
        self._call("nvmlGpmSampleFree", buf)

    def _gpm_take(self, handle: Handle, gi_id: int | None, buf: Any) -> None:
        if gi_id is None:
            self._call("nvmlGpmSampleGet", handle, buf)
        else:
            self._call("nvmlGpmMigSampleGet", handle, gi_id, buf)

    def _gpm_metrics(self, sample1: Any, sample2: Any) -> _GpmResult:
        """The four GPM metrics between two samples, as fractions; each metric's own nvmlReturn is checked
        (a metric this GPU does not support is None, the others still count)."""
        m = self.m
        req = m.c_nvmlGpmMetricsGet_t()
        req.version = m.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(GPM_METRICS)
        req.sample1 = sample1
        req.sample2 = sample2
        names = list(GPM_METRICS)
        for i, name in enumerate(names):
            req.metrics[i].metricId = getattr(m, GPM_METRICS[name])
        self._call("nvmlGpmMetricsGet", req)
        success = getattr(m, "NVML_SUCCESS", 0)
        values: dict[str, float | None] = {}
        for i, name in enumerate(names):
            metric = req.metrics[i]
            if metric.nvmlReturn != success:
                values[name] = None
                continue
            values[name] = min(max(float(metric.value) / 100.0, 0.0), 1.0)
        return _GpmResult(values)


class GpmBuffers:
    """Two GPM sample buffers per device, reused forever: the end sample of one interval is the start of
    the next, so each interval costs one nvmlGpmSampleGet and no allocation."""

    def __init__(self, nvml: Nvml, handle: Handle, gi_id: int | None = None) -> None:
        self._nvml = nvml
        self._handle, self._gi_id = handle, gi_id  # a MIG instance is sampled through its parent GPU
        self._bufs = [nvml._gpm_alloc(), nvml._gpm_alloc()]
        self._current = 0
        self.primed = False

    def prime(self) -> None:
        self._nvml._gpm_take(self._handle, self._gi_id, self._bufs[self._current])
        self.primed = True

    def advance(self) -> _GpmResult:
        """Take the end sample of this interval and return the metrics since the previous one."""
        nxt = 1 - self._current
        self._nvml._gpm_take(self._handle, self._gi_id, self._bufs[nxt])
        prev = self._bufs[self._current]
        self._current = nxt
        return self._nvml._gpm_metrics(prev, self._bufs[nxt])

    def free(self) -> None:
        for buf in self._bufs:
            with contextlib.suppress(DeviceFault, DriverGone):  # driver gone: the memory went with it
                self._nvml._gpm_free(buf)
        self._bufs = []
