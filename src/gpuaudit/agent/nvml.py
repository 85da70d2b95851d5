"""THE NVML seam: every call into NVML goes through `Nvml`.

The `pynvml` module (nvidia-ml-py) is a dependency handed in, so tests and `agent run --simulate` pass the
fake from `gpuaudit.sim.fakenvml`; production passes nothing and the real module is imported on first use.
NVML errors are translated here, once, into what the agent can act on:

- NotSupported / FunctionNotFound / NoPermission on a field  -> `None` (the field is unmeasured)
- GpuIsLost, Unknown, anything else on one device           -> `DeviceFault` (that device only)
- Uninitialized / DriverNotLoaded / RM mismatch mid-run      -> `DriverGone` (re-init with backoff)
- library or driver missing at start                         -> `NvmlUnavailable`, a one-line fatal error
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
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

HINT_LIBRARY = ("install the NVIDIA driver on this node (it provides libnvidia-ml.so.1), "
                "or try the agent without a GPU: gpuaudit agent run --simulate phantom")
HINT_MODULE = "install the NVML bindings: pip install nvidia-ml-py"


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


@dataclass
class GpmResult:
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
                raise NvmlUnavailable(f"the pynvml module is not installed; {HINT_MODULE}") from e
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
                raise NvmlUnavailable(f"NVML library not found ({e}); {HINT_LIBRARY}") from None
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

    # --- the one query helper -------------------------------------------------------------------------
    def call(self, fn: str, *args: Any, **kwargs: Any) -> Any:
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

    def query(self, fn: str, *args: Any, **kwargs: Any) -> Any:
        """Like `call`, but a field this device cannot give (NotSupported, FunctionNotFound,
        NoPermission) is `None` instead of an error."""
        try:
            return self.call(fn, *args, **kwargs)
        except DeviceFault as e:
            if e.code in _FIELD_UNAVAILABLE:
                return None
            raise

    def const(self, name: str, default: Any = None) -> Any:
        return getattr(self.m, name, default)

    # --- GPM ------------------------------------------------------------------------------------------
    def gpm_supported(self, handle: Any) -> bool:
        support = self.query("nvmlGpmQueryDeviceSupport", handle)
        return bool(support is not None and getattr(support, "isSupportedDevice", 0))

    def gpm_metrics(self, sample1: Any, sample2: Any) -> GpmResult:
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
        self.call("nvmlGpmMetricsGet", req)
        success = getattr(m, "NVML_SUCCESS", 0)
        values: dict[str, float | None] = {}
        for i, name in enumerate(names):
            metric = req.metrics[i]
            if metric.nvmlReturn != success:
                values[name] = None
                continue
            values[name] = min(max(float(metric.value) / 100.0, 0.0), 1.0)
        return GpmResult(values)


class GpmBuffers:
    """Two GPM sample buffers per device, reused forever: the end sample of one interval is the start of
    the next, so each interval costs one nvmlGpmSampleGet and no allocation."""

    def __init__(self, nvml: Nvml, take: Callable[[Any], Any]) -> None:
        self._nvml = nvml
        self._take = take  # fills a buffer: nvmlGpmSampleGet(handle, buf) or nvmlGpmMigSampleGet(...)
        self._bufs = [nvml.call("nvmlGpmSampleAlloc"), nvml.call("nvmlGpmSampleAlloc")]
        self._current = 0
        self.primed = False

    def prime(self) -> None:
        self._take(self._bufs[self._current])
        self.primed = True

    def advance(self) -> GpmResult:
        """Take the end sample of this interval and return the metrics since the previous one."""
        nxt = 1 - self._current
        self._take(self._bufs[nxt])
        prev = self._bufs[self._current]
        self._current = nxt
        return self._nvml.gpm_metrics(prev, self._bufs[nxt])

    def free(self) -> None:
        for buf in self._bufs:
            with contextlib.suppress(DeviceFault, DriverGone):  # driver gone: the memory went with it
                self._nvml.call("nvmlGpmSampleFree", buf)
        self._bufs = []
