"""The selftest's spin kernel: PTX JIT-compiled by the driver, launched so that its SM activity is known by
construction.

The kernel is launched with k blocks, each asking for the largest dynamic shared memory a block may opt in to,
so two blocks cannot be resident on one SM (checked with cuOccupancyMaxActiveBlocksPerMultiprocessor == 1)
and the k blocks sit on k different SMs. Each block spins on %globaltimer for d x period nanoseconds, then
the GPU idles for the rest of the period. So the GPU's SM activity (the share of SMs with a resident warp,
averaged over time) is (k / SMs) x d, and its duty cycle (the share of time any kernel ran) is d whatever k
is.

Backends: `driver` (libcuda.so.1 through ctypes), `torch` (PyTorch finds and initialises the driver, the same
kernel then runs in its context: PyTorch's own kernels cannot be pinned one block per SM).
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from collections.abc import Callable
from typing import Any

from gpuaudit.selftest.driver import (
    ATTR_COMPUTE_CAPABILITY_MAJOR,
    ATTR_COMPUTE_CAPABILITY_MINOR,
    ATTR_MAX_SHARED_MEMORY_PER_BLOCK,
    ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
    ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
    ATTR_MAX_THREADS_PER_MULTIPROCESSOR,
    ATTR_MULTIPROCESSOR_COUNT,
    ATTR_RESERVED_SHARED_MEMORY_PER_BLOCK,
    CudaError,
    CudaUnavailable,
    CUuuid,
    Driver,
    load_library,
    torch_driver,
    uuid_text,
)

KERNEL_NAME = "gpuaudit_spin"
THREADS_PER_BLOCK = 32  # one warp: an SM counts as active while one warp is resident

# cuda.h: CUfunction_attribute, CUjit_option.
FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_JIT_ERROR_LOG_BUFFER = 5
_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6

# knows gets the newest entry below it: the driver JIT-compiles PTX forward to any later architecture.
PTX_TARGETS: tuple[tuple[tuple[int, int], str, str], ...] = (
    ((5, 0), "sm_50", "6.0"),
    ((7, 0), "sm_70", "6.0"),
    ((7, 5), "sm_75", "6.3"),
    ((8, 0), "sm_80", "7.0"),
    ((8, 6), "sm_86", "7.1"),
    ((8, 9), "sm_89", "7.8"),
    ((9, 0), "sm_90", "7.8"),
    ((10, 0), "sm_100", "8.6"),
    ((12, 0), "sm_120", "8.7"),
)


def ptx_target(major: int, minor: int) -> tuple[str, str]:
    """(.target, .version) for a GPU of compute capability major.minor."""
    chosen = None
    for cc, target, version in PTX_TARGETS:
        if cc <= (major, minor):
            chosen = (target, version)
    if chosen is None:
        raise CudaError("cuDeviceGetAttribute", 209, "CUDA_ERROR_NO_BINARY_FOR_GPU",
                        f"compute capability {major}.{minor} is older than the spin kernel supports (5.0)")
    return chosen


def spin_ptx(target: str = "sm_90", version: str = "7.8") -> str:
    """The spin kernel: every thread reads %globaltimer (ns) until `duration_ns` passed since its block
    started. It touches its dynamic shared memory once: that memory's size is what keeps one block per SM."""
    return f"""\
.version {version}
.target {target}
.address_size 64

.extern .shared .align 16 .b8 gpuaudit_pad[];

.visible .entry {KERNEL_NAME}(
\t.param .u64 {KERNEL_NAME}_duration_ns
)
{{
\t.reg .pred \t%p<2>;
\t.reg .b32 \t%r<2>;
\t.reg .b64 \t%rd<5>;

\tld.param.u64 \t%rd1, [{KERNEL_NAME}_duration_ns];
\tmov.u64 \t%rd2, %globaltimer;
\tmov.u32 \t%r1, %tid.x;
\tst.shared.u32 \t[gpuaudit_pad], %r1;
SPIN:
\tmov.u64 \t%rd3, %globaltimer;
\tsub.u64 \t%rd4, %rd3, %rd2;
\tsetp.lt.u64 \t%p1, %rd4, %rd1;
\t@%p1 bra \tSPIN;
\tret;
}}
"""


def kernel_params(duration_ns: int) -> tuple[Any, Any]:
    """cuLaunchKernel's kernelParams for spin(u64 duration_ns): an array of one pointer to the value. The
    second item keeps the value alive for as long as the array is used."""
    if not 0 <= duration_ns < 2**64:
        raise ValueError(f"duration_ns out of range: {duration_ns}")
    value = ctypes.c_uint64(duration_ns)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(value), ctypes.c_void_p))
    return params, value


class SpinKernel:
    """The kernel loaded on CUDA device `ordinal`, with one block per SM checked by the driver."""

    def __init__(self, driver: Driver, ordinal: int = 0, *, primary: bool = False) -> None:
        self.driver = d = driver
        self._ctx = ctypes.c_void_p()
        self._module = ctypes.c_void_p()
        self._func = ctypes.c_void_p()
        self._primary = primary or not d.has("cuCtxCreate_v2")
        d.call("cuInit", 0)
        dev = ctypes.c_int()
        d.call("cuDeviceGet", ctypes.byref(dev), ordinal)
        self.device = dev.value
        name = ctypes.create_string_buffer(256)
        d.call("cuDeviceGetName", name, len(name), self.device)
        self.name = name.value.decode("utf-8", "replace")
        uuid = CUuuid()
        d.call("cuDeviceGetUuid_v2" if d.has("cuDeviceGetUuid_v2") else "cuDeviceGetUuid", ctypes.byref(uuid),
               self.device)
        self.uuid = uuid_text(bytes(uuid.bytes))
        self.sm_count = d.attribute(ATTR_MULTIPROCESSOR_COUNT, self.device)
        self.max_threads_per_sm = d.attribute(ATTR_MAX_THREADS_PER_MULTIPROCESSOR, self.device)
        major = d.attribute(ATTR_COMPUTE_CAPABILITY_MAJOR, self.device)
        minor = d.attribute(ATTR_COMPUTE_CAPABILITY_MINOR, self.device)
        self.compute_capability = f"{major}.{minor}"
        optin = d.attribute(ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, self.device)
        self.smem_bytes = optin or d.attribute(ATTR_MAX_SHARED_MEMORY_PER_BLOCK, self.device)
        self.smem_per_sm = d.attribute(ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, self.device)
        try:
            reserved = d.attribute(ATTR_RESERVED_SHARED_MEMORY_PER_BLOCK, self.device)
        except CudaError:  # drivers before CUDA 11 do not know the attribute (and reserve nothing)
            reserved = 0
        if 2 * (self.smem_bytes + reserved) <= self.smem_per_sm:
            raise CudaError("cuDeviceGetAttribute", 801, "CUDA_ERROR_NOT_SUPPORTED",
                            f"a block can take only {self.smem_bytes} of the SM's {self.smem_per_sm} bytes of "
                            "shared memory, so one block per SM cannot be enforced on this GPU")
        if self._primary:  # PyTorch's context (the torch backend), or a driver without cuCtxCreate_v2
            d.call("cuDevicePrimaryCtxRetain", ctypes.byref(self._ctx), self.device)
            d.call("cuCtxSetCurrent", self._ctx)
        else:
            d.call("cuCtxCreate_v2", ctypes.byref(self._ctx), 0, self.device)
        target, version = ptx_target(major, minor)
        self._load_module(spin_ptx(target, version))
        d.call("cuModuleGetFunction", ctypes.byref(self._func), self._module, KERNEL_NAME.encode())
        d.call("cuFuncSetAttribute", self._func, FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.smem_bytes)
        per_sm = ctypes.c_int()
        d.call("cuOccupancyMaxActiveBlocksPerMultiprocessor", ctypes.byref(per_sm), self._func, THREADS_PER_BLOCK,
               self.smem_bytes)
        self.blocks_per_sm = per_sm.value
        if self.blocks_per_sm != 1:
            raise CudaError("cuOccupancyMaxActiveBlocksPerMultiprocessor", 801, "CUDA_ERROR_NOT_SUPPORTED",
                            f"{self.blocks_per_sm} blocks of the spin kernel fit on one SM, not 1: the load's SM "
                            "activity would not be known")

    def _load_module(self, ptx: str) -> None:
        log = ctypes.create_string_buffer(8192)
        options = (ctypes.c_int * 2)(_JIT_ERROR_LOG_BUFFER, _JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        values = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p), ctypes.c_void_p(len(log)))
        try:
            self.driver.call("cuModuleLoadDataEx", ctypes.byref(self._module), ptx.encode() + b"\0", 2, options,
                             values)
        except CudaError as e:
            jit = log.value.decode("utf-8", "replace").strip().replace("\n", " | ")
            raise CudaError(e.fn, e.code, e.name, jit or None) from None

    def launch(self, blocks: int, duration_ns: int) -> None:
        """Queue the kernel: `blocks` blocks of one warp, each on an SM of its own, for duration_ns."""
        if not 1 <= blocks <= self.sm_count:
            raise ValueError(f"blocks must be 1..{self.sm_count}, got {blocks}")
        params, keep = kernel_params(duration_ns)
        self.driver.call("cuLaunchKernel", self._func, blocks, 1, 1, THREADS_PER_BLOCK, 1, 1, self.smem_bytes, None,
                         params, None)
        del keep  # cuLaunchKernel copied the argument values

    def synchronize(self) -> None:
        self.driver.call("cuCtxSynchronize")

    def close(self) -> None:
        with contextlib.suppress(CudaError):
            if self._module.value:
                self.driver.call("cuModuleUnload", self._module)
            if self._ctx.value:
                if self._primary:
                    self.driver.call("cuDevicePrimaryCtxRelease_v2", self.device)
                else:
                    self.driver.call("cuCtxDestroy_v2", self._ctx)
        self._module, self._ctx = ctypes.c_void_p(), ctypes.c_void_p()

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "cuda_uuid": self.uuid, "sm_count": self.sm_count,
                "compute_capability": self.compute_capability, "shared_memory_per_block_bytes": self.smem_bytes,
                "shared_memory_per_sm_bytes": self.smem_per_sm, "blocks_per_sm": self.blocks_per_sm,
                "threads_per_block": THREADS_PER_BLOCK, "max_threads_per_sm": self.max_threads_per_sm}


def run_pattern(kernel: Any, blocks: int, duty: float, period_s: float, poll: Callable[[float], bool], *,
                clock: Callable[[], float] = time.monotonic) -> None:
    """Busy `duty` of every `period_s` with `blocks` blocks until `poll(timeout)` reports a new command.
    Periods are on an absolute grid; a late one re-anchors the grid instead of bunching launches."""
    busy_ns = round(duty * period_s * 1e9)
    start, n = clock(), 0
    while True:
        kernel.launch(blocks, busy_ns)
        kernel.synchronize()
        n += 1
        wait = start + n * period_s - clock()
        if wait < 0:
            start, n, wait = clock(), 0, 0.0
        if poll(wait):
            return


def build_kernel(backend: str) -> tuple[SpinKernel, str]:
    """The spin kernel on CUDA device 0 (the parent sets CUDA_VISIBLE_DEVICES to the GPU's UUID)."""
    if backend == "torch":
        return SpinKernel(torch_driver(), primary=True), "torch"
    try:
        driver = Driver(load_library())
    except CudaUnavailable as e:
        if backend == "driver":
            raise
        try:
            through_torch = torch_driver()
        except CudaUnavailable as t:
            raise CudaUnavailable(f"{e} (nor through PyTorch: {t})") from None
        return SpinKernel(through_torch, primary=True), "torch"
    return SpinKernel(driver), "driver"
