"""The CUDA driver API through ctypes, for the selftest's load: libcuda found and loaded, the prototypes of the
functions the load calls, and every failure as one line (the CUresult's name and what to do about it). No
compiler, no CUDA toolkit, no PyTorch needed; with the torch backend, the libcuda PyTorch mapped."""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpuaudit.errors import GpuauditError

_LIBCUDA_NAMES = ("libcuda.so.1", "libcuda.so")

# cuda.h: CUdevice_attribute.
ATTR_MAX_SHARED_MEMORY_PER_BLOCK = 8
ATTR_MULTIPROCESSOR_COUNT = 16
ATTR_MAX_THREADS_PER_MULTIPROCESSOR = 39
ATTR_COMPUTE_CAPABILITY_MAJOR = 75
ATTR_COMPUTE_CAPABILITY_MINOR = 76
ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81
ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
ATTR_RESERVED_SHARED_MEMORY_PER_BLOCK = 111

# cuda.h CUresult codes the load can meet, with what to do about them (cuGetErrorName names the rest).
_CUDA_ERRORS: dict[int, tuple[str, str]] = {
    1: ("CUDA_ERROR_INVALID_VALUE", ""),
    2: ("CUDA_ERROR_OUT_OF_MEMORY", "the GPU has no memory left for a context: free it or pick another GPU"),
    3: ("CUDA_ERROR_NOT_INITIALIZED", ""),
    4: ("CUDA_ERROR_DEINITIALIZED", "the driver is shutting down"),
    34: ("CUDA_ERROR_STUB_LIBRARY", "this libcuda is the CUDA toolkit's stub, not the driver's: put the "
         "driver's libcuda.so.1 first on the library path"),
    35: ("CUDA_ERROR_INSUFFICIENT_DRIVER", "the installed NVIDIA driver is too old for this libcuda"),
    46: ("CUDA_ERROR_DEVICE_UNAVAILABLE", "the GPU is in exclusive-process compute mode and another process "
         "holds it (nvidia-smi -q -d COMPUTE)"),
    100: ("CUDA_ERROR_NO_DEVICE", "no CUDA device is visible (check CUDA_VISIBLE_DEVICES, the container's GPU "
          "access and `nvidia-smi`)"),
    101: ("CUDA_ERROR_INVALID_DEVICE", "the GPU is not visible to CUDA in this process"),
    209: ("CUDA_ERROR_NO_BINARY_FOR_GPU", ""),
    218: ("CUDA_ERROR_INVALID_PTX", "the driver's JIT rejected the kernel"),
    221: ("CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "the driver's PTX JIT compiler (libnvidia-ptxjitcompiler) is missing"),
    222: ("CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the driver is older than the PTX version the kernel needs"),
    223: ("CUDA_ERROR_JIT_COMPILATION_DISABLED", "PTX JIT is disabled (CUDA_DISABLE_PTX_JIT?)"),
    304: ("CUDA_ERROR_OPERATING_SYSTEM", ""),
    701: ("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", ""),
    702: ("CUDA_ERROR_LAUNCH_TIMEOUT", "a display watchdog killed the kernel: use a GPU that drives no display"),
    800: ("CUDA_ERROR_NOT_PERMITTED", ""),
    801: ("CUDA_ERROR_NOT_SUPPORTED", ""),
    803: ("CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "libcuda and the kernel driver have different versions: reboot "
          "or reload the nvidia modules after a driver upgrade"),
    804: ("CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "the CUDA forward-compatibility libcuda does not support "
          "this GPU: use the driver's own libcuda"),
    999: ("CUDA_ERROR_UNKNOWN", ""),
}

_HINT_LIBCUDA = ("libcuda.so.1 comes with the NVIDIA driver: install the driver, or in a container run with the "
                "NVIDIA container toolkit (--gpus / the nvidia runtime class), which mounts it")


class CudaUnavailable(GpuauditError):
    """The CUDA driver library cannot be loaded (no driver, not mounted into the container)."""


class CudaError(GpuauditError):
    """A driver API call failed: the call, the CUresult's name and what to do about it, in one line."""

    def __init__(self, fn: str, code: int, name: str | None = None, text: str | None = None) -> None:
        known, hint = _CUDA_ERRORS.get(code, (None, ""))
        self.fn, self.code, self.name = fn, code, name or known or f"CUresult {code}"
        detail = f": {text}" if text and text != self.name else ""
        super().__init__(f"{fn} failed with {self.name}{detail}" + (f"; {hint}" if hint else ""))


def load_library(names: Sequence[str] | None = None, loader: Callable[[str], Any] = ctypes.CDLL) -> Any:
    """The first of `names` that loads (default: $GPUAUDIT_LIBCUDA, else libcuda.so.1 on the library path);
    none: CudaUnavailable with the hint."""
    if names is None:
        names = (os.environ["GPUAUDIT_LIBCUDA"],) if os.environ.get("GPUAUDIT_LIBCUDA") else _LIBCUDA_NAMES
    errors = []
    for name in names:
        try:
            return loader(name)
        except OSError as e:
            errors.append(str(e).splitlines()[0] if str(e) else name)
    raise CudaUnavailable(f"the CUDA driver library cannot be loaded ({'; '.join(errors)}); {_HINT_LIBCUDA}")


class CUuuid(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * 16)]


_P = ctypes.POINTER
_VOIDP, _INT, _UINT = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
# The prototypes of the driver functions the load calls (cuda.h); argtypes keep 64-bit handles intact.
_PROTOTYPES: dict[str, list[Any]] = {
    "cuInit": [_UINT],
    "cuDriverGetVersion": [_P(_INT)],
    "cuDeviceGetCount": [_P(_INT)],
    "cuDeviceGet": [_P(_INT), _INT],
    "cuDeviceGetAttribute": [_P(_INT), _INT, _INT],
    "cuDeviceGetName": [ctypes.c_char_p, _INT, _INT],
    "cuDeviceGetUuid": [_P(CUuuid), _INT],
    "cuDeviceGetUuid_v2": [_P(CUuuid), _INT],
    "cuCtxCreate_v2": [_P(_VOIDP), _UINT, _INT],
    "cuCtxDestroy_v2": [_VOIDP],
    "cuDevicePrimaryCtxRetain": [_P(_VOIDP), _INT],
    "cuDevicePrimaryCtxRelease_v2": [_INT],
    "cuCtxSetCurrent": [_VOIDP],
    "cuModuleLoadDataEx": [_P(_VOIDP), ctypes.c_char_p, _UINT, _P(_INT), _P(_VOIDP)],
    "cuModuleGetFunction": [_P(_VOIDP), _VOIDP, ctypes.c_char_p],
    "cuModuleUnload": [_VOIDP],
    "cuFuncSetAttribute": [_VOIDP, _INT, _INT],
    "cuOccupancyMaxActiveBlocksPerMultiprocessor": [_P(_INT), _VOIDP, _INT, ctypes.c_size_t],
    "cuLaunchKernel": [_VOIDP, _UINT, _UINT, _UINT, _UINT, _UINT, _UINT, _UINT, _VOIDP, _P(_VOIDP), _P(_VOIDP)],
    "cuCtxSynchronize": [],
    "cuGetErrorName": [_INT, _P(ctypes.c_char_p)],
    "cuGetErrorString": [_INT, _P(ctypes.c_char_p)],
}


class Driver:
    """libcuda with prototypes; `call` raises CudaError for any CUresult but CUDA_SUCCESS."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self._fns: dict[str, Any] = {}

    def has(self, fn: str) -> bool:
        return hasattr(self.lib, fn)

    def _fn(self, fn: str) -> Any:
        f = self._fns.get(fn)
        if f is None:
            try:
                f = getattr(self.lib, fn)
            except AttributeError:
                raise CudaError(fn, 999, "symbol not found", "this libcuda is too old for the selftest") from None
            with contextlib.suppress(AttributeError, TypeError):  # a Python stand-in takes no prototype
                f.argtypes = _PROTOTYPES[fn]
                f.restype = ctypes.c_int
            self._fns[fn] = f
        return f

    def call(self, fn: str, *args: Any) -> None:
        rc = int(self._fn(fn)(*args))
        if rc != 0:
            raise CudaError(fn, rc, self._error_text("cuGetErrorName", rc), self._error_text("cuGetErrorString", rc))

    def _error_text(self, fn: str, rc: int) -> str | None:
        try:
            out = ctypes.c_char_p()
            if int(self._fn(fn)(rc, ctypes.byref(out))) != 0 or not out.value:
                return None
            return out.value.decode("utf-8", "replace")
        except (CudaError, ctypes.ArgumentError, TypeError):
            return None

    def attribute(self, attr: int, dev: int) -> int:
        v = ctypes.c_int()
        self.call("cuDeviceGetAttribute", ctypes.byref(v), attr, dev)
        return v.value


def uuid_text(raw: bytes) -> str:
    """16 UUID bytes as NVML writes a GPU's UUID: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx."""
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def torch_driver() -> Driver:
    """libcuda as PyTorch found it: initialise torch's CUDA, then open the libcuda it mapped."""
    try:
        import torch  # type: ignore[import-not-found]
    except ImportError:
        raise CudaUnavailable("PyTorch is not installed") from None
    try:
        torch.cuda.init()
    except Exception as e:  # torch raises RuntimeError / AssertionError without a GPU
        raise CudaUnavailable(f"PyTorch cannot use CUDA: {str(e).splitlines()[0] if str(e) else e}") from None
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1] if line.split() else ""
        if "/libcuda.so" in path:
            return Driver(ctypes.CDLL(path))
    raise CudaUnavailable("PyTorch initialised CUDA but no libcuda is mapped into the process")
