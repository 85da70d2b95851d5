"""The selftest's calibrated load: a spin kernel through the CUDA driver API (ctypes on libcuda, a PTX kernel
JIT-compiled by the driver: no compiler, no CUDA toolkit, no PyTorch needed).

Why its SM activity is known by construction: the kernel is launched with k blocks, each asking for the
largest dynamic shared memory a block may opt in to, so two blocks cannot be resident on one SM (checked with
cuOccupancyMaxActiveBlocksPerMultiprocessor == 1) and the k blocks sit on k different SMs. Each block spins
on %globaltimer for d x period nanoseconds, then the GPU idles for the rest of the period. So the GPU's SM
activity (the share of SMs with a resident warp, averaged over time) is (k / SMs) x d, and its duty cycle
(the share of time any kernel ran) is d whatever k is.

The load runs in a process of its own (`python -m gpuaudit.agent.cudaload`), spoken to in JSON lines: the
agent has to find and attribute a pid that is not the selftest's own, and a Ctrl-C, a SIGTERM or a dead parent
ends the load at once (the driver tears the context down with the process, a running kernel included).

Backends: `driver` (libcuda.so.1 through ctypes), `torch` (PyTorch finds and initialises the driver, the same
kernel then runs in its context: PyTorch's own kernels cannot be pinned one block per SM), `simulated` (no GPU:
the process only follows the protocol; the fake NVML produces the figures, see fakenvml.CalibratedPattern).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import pwd
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpuaudit.errors import GpuauditError

KERNEL_NAME = "gpuaudit_spin"
THREADS_PER_BLOCK = 32  # one warp: an SM counts as active while one warp is resident
LIBCUDA_NAMES = ("libcuda.so.1", "libcuda.so")

# cuda.h: CUdevice_attribute, CUfunction_attribute, CUjit_option.
ATTR_MAX_SHARED_MEMORY_PER_BLOCK = 8
ATTR_MULTIPROCESSOR_COUNT = 16
ATTR_MAX_THREADS_PER_MULTIPROCESSOR = 39
ATTR_COMPUTE_CAPABILITY_MAJOR = 75
ATTR_COMPUTE_CAPABILITY_MINOR = 76
ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81
ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
ATTR_RESERVED_SHARED_MEMORY_PER_BLOCK = 111
FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
JIT_ERROR_LOG_BUFFER = 5
JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6

# cuda.h CUresult codes the load can meet, with what to do about them (cuGetErrorName names the rest).
CUDA_ERRORS: dict[int, tuple[str, str]] = {
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

# Compute capability -> (PTX .target, the lowest PTX ISA version that knows it). A newer GPU than the table
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

HINT_LIBCUDA = ("libcuda.so.1 comes with the NVIDIA driver: install the driver, or in a container run with the "
                "NVIDIA container toolkit (--gpus / the nvidia runtime class), which mounts it")


class CudaUnavailable(GpuauditError):
    """The CUDA driver library cannot be loaded (no driver, not mounted into the container)."""


class CudaError(GpuauditError):
    """A driver API call failed: the call, the CUresult's name and what to do about it, in one line."""

    def __init__(self, fn: str, code: int, name: str | None = None, text: str | None = None) -> None:
        known, hint = CUDA_ERRORS.get(code, (None, ""))
        self.fn, self.code, self.name = fn, code, name or known or f"CUresult {code}"
        detail = f": {text}" if text and text != self.name else ""
        super().__init__(f"{fn} failed with {self.name}{detail}" + (f"; {hint}" if hint else ""))


def load_library(names: Sequence[str] | None = None, loader: Callable[[str], Any] = ctypes.CDLL) -> Any:
    """The first of `names` that loads (default: $GPUAUDIT_LIBCUDA, else libcuda.so.1 on the library path);
    none: CudaUnavailable with the hint."""
    if names is None:
        names = (os.environ["GPUAUDIT_LIBCUDA"],) if os.environ.get("GPUAUDIT_LIBCUDA") else LIBCUDA_NAMES
    errors = []
    for name in names:
        try:
            return loader(name)
        except OSError as e:
            errors.append(str(e).splitlines()[0] if str(e) else name)
    raise CudaUnavailable(f"the CUDA driver library cannot be loaded ({'; '.join(errors)}); {HINT_LIBCUDA}")


class CUuuid(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * 16)]


_P = ctypes.POINTER
_VOIDP, _INT, _UINT = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
# The prototypes of the driver functions the load calls (cuda.h); argtypes keep 64-bit handles intact.
PROTOTYPES: dict[str, list[Any]] = {
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
                f.argtypes = PROTOTYPES[fn]
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


def uuid_text(raw: bytes) -> str:
    """16 UUID bytes as NVML writes a GPU's UUID: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx."""
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


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
        options = (ctypes.c_int * 2)(JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
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


# --------------------------------------------------------------------------- the load process (child side)

def identity() -> dict[str, Any]:
    """Who this process is, as the agent should attribute it: pid, user, cgroup."""
    uid = os.getuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    try:
        cgroup = Path("/proc/self/cgroup").read_text()
    except OSError:
        cgroup = ""
    return {"pid": os.getpid(), "uid": uid, "user": user, "cgroup": cgroup}


def _torch_driver() -> Driver:
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


def build_kernel(backend: str) -> tuple[SpinKernel, str]:
    """The spin kernel on CUDA device 0 (the parent sets CUDA_VISIBLE_DEVICES to the GPU's UUID)."""
    if backend == "torch":
        return SpinKernel(_torch_driver(), primary=True), "torch"
    try:
        driver = Driver(load_library())
    except CudaUnavailable as e:
        if backend == "driver":
            raise
        try:
            torch_driver = _torch_driver()
        except CudaUnavailable as t:
            raise CudaUnavailable(f"{e} (nor through PyTorch: {t})") from None
        return SpinKernel(torch_driver, primary=True), "torch"
    return SpinKernel(driver), "driver"


class _Commands:
    """Newline-delimited JSON commands on stdin, read with a timeout (os.read: no hidden buffering)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf, self.eof = fd, b"", False

    def ready(self, timeout: float | None) -> bool:
        if b"\n" in self.buf or self.eof:
            return True
        r, _, _ = select.select([self.fd], [], [], timeout)
        if r:
            chunk = os.read(self.fd, 4096)
            self.buf += chunk
            self.eof = not chunk
        return b"\n" in self.buf or self.eof

    def next(self) -> dict[str, Any] | None:
        while not self.ready(None):
            pass
        if b"\n" not in self.buf:
            return None  # EOF: the parent is gone
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line) if line.strip() else {}


def _emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the parent dies (a kill -9 of the selftest ends the load too)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def child_main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpuaudit.agent.cudaload")
    ap.add_argument("--backend", choices=("auto", "driver", "torch", "simulated"), default="auto")
    ap.add_argument("--period-s", type=float, default=0.1)
    ap.add_argument("--sm-count", type=int, default=132, help="simulated backend: the SMs it reports")
    ap.add_argument("--expect-uuid", default=None, help="refuse when CUDA device 0 is another GPU")
    ap.add_argument("--fail", choices=("no-libcuda",), default=None, help="simulated backend: fail like this")
    args = ap.parse_args(argv)
    # Ctrl-C reaches the whole process group: end now; the driver frees the context and stops the kernel.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: os._exit(128 + signum))
    _die_with_parent()
    kernel: SpinKernel | None = None
    try:
        if args.backend == "simulated":
            if args.fail == "no-libcuda":  # the real loader, asked for a library that is not there
                load_library(("libcuda-gpuaudit-simulated-missing.so.1",))
            info: dict[str, Any] = {"name": "simulated", "sm_count": args.sm_count, "blocks_per_sm": 1,
                                    "threads_per_block": THREADS_PER_BLOCK, "max_threads_per_sm": 2048,
                                    "cuda_uuid": args.expect_uuid}
            backend = "simulated"
        else:
            kernel, backend = build_kernel(args.backend)
            info = kernel.describe()
            if args.expect_uuid and args.expect_uuid.startswith("GPU-") and kernel.uuid != args.expect_uuid:
                raise GpuauditError(f"CUDA device 0 is {kernel.uuid}, not the GPU asked for ({args.expect_uuid})")
    except GpuauditError as e:
        _emit("error", message=str(e))
        return 2
    _emit("ready", backend=backend, period_s=args.period_s, **info, **identity())
    commands = _Commands(sys.stdin.fileno())
    try:
        while (cmd := commands.next()) is not None:
            op = cmd.get("cmd")
            if op == "run":
                k, d = int(cmd["k"]), float(cmd["d"])
                _emit("running", k=k, d=d)
                if kernel is not None:
                    run_pattern(kernel, k, d, args.period_s, commands.ready)
            elif op == "idle":
                _emit("idle")
            elif op == "exit":
                break
    except (GpuauditError, ValueError, KeyError) as e:
        _emit("error", message=str(e))
        return 2
    finally:
        if kernel is not None:
            kernel.close()
    return 0


# --------------------------------------------------------------------------- the load process (parent side)

class LoadProcess:
    """The parent's handle on the load process: start it, wait for it to be ready, tell it what to run."""

    def __init__(self, backend: str, *, cuda_device: str | None, period_s: float = 0.1,
                 extra_args: Sequence[str] = (), ready_timeout_s: float = 120.0) -> None:
        env = dict(os.environ)
        if cuda_device:  # the GPU by UUID (GPU-... or MIG-...): CUDA's ordinal 0 is then that GPU
            env["CUDA_VISIBLE_DEVICES"] = cuda_device
        argv = [sys.executable, "-m", "gpuaudit.agent.cudaload", "--backend", backend, "--period-s", str(period_s),
                *(["--expect-uuid", cuda_device] if cuda_device else []), *extra_args]
        # stderr to a file, not a pipe nobody reads while the load runs (a full pipe would block it)
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in kill(), it outlives this call)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     env=env)
        self._buf = b""
        self.info: dict[str, Any] = {}
        try:
            self.info = self._expect("ready", ready_timeout_s)
        except BaseException:
            self.kill()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _line(self, timeout_s: float) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise GpuauditError(f"the load process (pid {self.pid}) did not answer within {timeout_s:g} s")
            r, _, _ = select.select([fd], [], [], left)
            if r:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def _expect(self, event: str, timeout_s: float = 30.0) -> dict[str, Any]:
        msg = self._line(timeout_s)
        if msg is None:
            self.proc.wait(timeout=5)
            self._stderr.seek(0)
            err = self._stderr.read().decode("utf-8", "replace").strip()
            last = err.splitlines()[-1] if err else "no message"
            raise GpuauditError(f"the load process exited with status {self.proc.returncode}: {last}")
        if msg.get("event") == "error":
            raise GpuauditError(str(msg.get("message")))
        if msg.get("event") != event:
            raise GpuauditError(f"the load process answered {msg.get('event')!r}, expected {event!r}")
        return msg

    def _send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise GpuauditError(f"the load process (pid {self.pid}) is gone") from None

    def run(self, k: int, d: float) -> None:
        self._send(cmd="run", k=k, d=d)
        self._expect("running")

    def idle(self) -> None:
        self._send(cmd="idle")
        self._expect("idle")

    def kill(self) -> None:
        """Stop the load now (SIGKILL: the driver ends its kernel with the process)."""
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for f in (self.proc.stdin, self.proc.stdout, self._stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()

    def close(self) -> None:
        """Ask the load to exit (its context is released cleanly), kill it if it does not."""
        if self.proc.poll() is None:
            with contextlib.suppress(GpuauditError, OSError):
                self._send(cmd="exit")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        self.kill()


if __name__ == "__main__":
    sys.exit(child_main())
