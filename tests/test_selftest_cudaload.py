"""The calibrated load's CUDA side, checked without a GPU: the PTX kernel (assembled by ptxas where the CUDA
toolkit is installed), the kernel-argument packing, the driver-call sequence and its one-block-per-SM checks
against a stand-in libcuda, the error mapping, and the load process's answer when libcuda is missing."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuaudit import selftest as cl
from gpuaudit.errors import GpuauditError

PTXAS = shutil.which("ptxas") or next(
    (str(p) for p in sorted(Path("/usr/local").glob("cuda*/bin/ptxas"), reverse=True)), None)


def test_ptx_target_follows_the_compute_capability() -> None:
    assert cl.ptx_target(9, 0) == ("sm_90", "7.8")
    assert cl.ptx_target(8, 0) == ("sm_80", "7.0")
    assert cl.ptx_target(8, 7) == ("sm_86", "7.1")  # Orin: the newest target below it, JIT-compiled forward
    assert cl.ptx_target(10, 3) == ("sm_100", "8.6")
    assert cl.ptx_target(13, 0) == ("sm_120", "8.7")  # a GPU newer than the table
    with pytest.raises(cl.CudaError, match="older than the spin kernel supports"):
        cl.ptx_target(3, 5)


def test_spin_ptx_spins_on_the_global_timer_with_dynamic_shared_memory() -> None:
    ptx = cl.spin_ptx("sm_90", "7.8")
    assert ptx.startswith(".version 7.8\n.target sm_90\n.address_size 64\n")
    assert f".visible .entry {cl.KERNEL_NAME}(" in ptx and ".param .u64" in ptx
    assert ptx.count("%globaltimer") == 2  # the start, and each turn of the loop
    assert ".extern .shared" in ptx and "st.shared" in ptx and "@%p1 bra" in ptx


@pytest.mark.skipif(PTXAS is None, reason="ptxas (CUDA toolkit) not installed: the PTX is not assembled here")
@pytest.mark.parametrize(("cc", "target", "version"), cl.PTX_TARGETS, ids=[t for _, t, _ in cl.PTX_TARGETS])
def test_the_kernel_assembles_for_every_target(cc: tuple[int, int], target: str, version: str,
                                               tmp_path: Path) -> None:
    """What the driver's JIT will get, assembled by ptxas: for its own architecture where this ptxas still
    knows it, and for Hopper (sm_90) where the target is older (the JIT compiles PTX forward)."""
    src = tmp_path / "spin.ptx"
    src.write_text(cl.spin_ptx(target, version))
    arch = target if cc >= (7, 5) else "sm_90"
    if cc > (9, 0):  # PTX for a newer target cannot be assembled for an older GPU
        arch = target
    r = subprocess.run([str(PTXAS), f"-arch={arch}", str(src), "-o", str(tmp_path / "spin.cubin")],
                       capture_output=True, text=True)
    if "is not defined for option" in r.stderr:
        pytest.skip(f"this ptxas does not know {arch}")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "spin.cubin").stat().st_size > 0


def test_kernel_params_point_at_the_duration() -> None:
    params, keep = cl.kernel_params(25_000_000)
    assert len(params) == 1
    assert ctypes.cast(params[0], ctypes.POINTER(ctypes.c_uint64)).contents.value == 25_000_000
    assert keep.value == 25_000_000
    with pytest.raises(ValueError):
        cl.kernel_params(-1)


def test_uuid_text_is_nvml_s_form() -> None:
    raw = bytes(range(16))
    assert cl.uuid_text(raw) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"


def test_a_missing_libcuda_is_one_line_with_the_hint() -> None:
    with pytest.raises(cl.CudaUnavailable) as e:
        cl.load_library(("libcuda-gpuaudit-test-missing.so.1", "libcuda-gpuaudit-test-missing.so"))
    msg = str(e.value)
    assert "\n" not in msg and "libcuda-gpuaudit-test-missing.so.1" in msg and "NVIDIA container toolkit" in msg
    assert cl.load_library(("x", "y"), loader=lambda name: name if name == "y" else ctypes.CDLL(name)) == "y"


# --------------------------------------------------------------------------- a stand-in libcuda

class StandIn:
    """Python functions in libcuda's shape: out-parameters written through ctypes.byref, return codes as the
    driver's. `fail` makes one function return a CUresult; `per_sm` is what the occupancy query answers."""

    def __init__(self, *, sm_count: int = 132, optin: int = 232448, per_sm_smem: int = 233472, reserved: int = 1024,
                 per_sm: int = 1, fail: dict[str, int] | None = None) -> None:
        self.attrs = {cl.ATTR_MULTIPROCESSOR_COUNT: sm_count, cl.ATTR_MAX_THREADS_PER_MULTIPROCESSOR: 2048,
                      cl.ATTR_COMPUTE_CAPABILITY_MAJOR: 9,
                      cl.ATTR_COMPUTE_CAPABILITY_MINOR: 0, cl.ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: optin,
                      cl.ATTR_MAX_SHARED_MEMORY_PER_BLOCK: 49152, cl.ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
                      per_sm_smem, cl.ATTR_RESERVED_SHARED_MEMORY_PER_BLOCK: reserved}
        self.per_sm, self.fail = per_sm, fail or {}
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.func_smem = 0

    def __getattr__(self, fn: str) -> Any:
        if not fn.startswith("cu"):
            raise AttributeError(fn)

        def call(*args: Any) -> int:
            self.calls.append((fn, args))
            if fn in self.fail:
                return self.fail[fn]
            handler = getattr(self, "_" + fn, None)
            return handler(*args) if handler else 0

        return call

    @staticmethod
    def _out(ref: Any, value: Any) -> None:
        ref._obj.value = value

    def _cuDeviceGet(self, ref: Any, ordinal: int) -> int:
        self._out(ref, ordinal)
        return 0

    def _cuDeviceGetAttribute(self, ref: Any, attr: int, dev: int) -> int:
        if attr not in self.attrs:
            return 1
        self._out(ref, self.attrs[attr])
        return 0

    def _cuDeviceGetName(self, buf: Any, n: int, dev: int) -> int:
        buf.value = b"NVIDIA H100 80GB HBM3"
        return 0

    def _cuDeviceGetUuid_v2(self, ref: Any, dev: int) -> int:
        for i in range(16):
            ref._obj.bytes[i] = i
        return 0

    def _cuCtxCreate_v2(self, ref: Any, flags: int, dev: int) -> int:
        self._out(ref, 0x1000)
        return 0

    def _cuModuleLoadDataEx(self, ref: Any, image: bytes, n: int, options: Any, values: Any) -> int:
        assert image.endswith(b"\0") and b".target sm_90" in image and n == 2
        self._out(ref, 0x2000)
        return 0

    def _cuModuleGetFunction(self, ref: Any, module: Any, name: bytes) -> int:
        assert name == cl.KERNEL_NAME.encode()
        self._out(ref, 0x3000)
        return 0

    def _cuFuncSetAttribute(self, func: Any, attr: int, value: int) -> int:
        assert attr == cl.FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self.func_smem = value
        return 0

    def _cuOccupancyMaxActiveBlocksPerMultiprocessor(self, ref: Any, func: Any, threads: int, smem: int) -> int:
        assert smem == self.func_smem  # asked with the shared memory the launch will use
        self._out(ref, self.per_sm)
        return 0

    def _cuLaunchKernel(self, func: Any, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, smem: int,
                        stream: Any, params: Any, extra: Any) -> int:
        assert smem <= self.func_smem and gx <= self.attrs[cl.ATTR_MULTIPROCESSOR_COUNT]
        self.launched = (gx, gy, gz, bx, by, bz, smem,
                         ctypes.cast(params[0], ctypes.POINTER(ctypes.c_uint64)).contents.value)
        return 0

    def _cuGetErrorName(self, code: int, ref: Any) -> int:
        self._out(ref, {100: b"CUDA_ERROR_NO_DEVICE", 218: b"CUDA_ERROR_INVALID_PTX"}.get(code, b""))
        return 0 if code in (100, 218) else 1


def test_the_kernel_is_loaded_and_launched_one_block_per_sm() -> None:
    lib = StandIn()
    k = cl.SpinKernel(cl.Driver(lib))
    assert (k.sm_count, k.blocks_per_sm, k.smem_bytes) == (132, 1, 232448)
    assert k.uuid == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f" and k.name == "NVIDIA H100 80GB HBM3"
    order = [fn for fn, _ in lib.calls if fn not in ("cuDeviceGetAttribute", "cuGetErrorName")]
    assert order[:3] == ["cuInit", "cuDeviceGet", "cuDeviceGetName"]
    assert order.index("cuCtxCreate_v2") < order.index("cuModuleLoadDataEx") < order.index("cuFuncSetAttribute") \
        < order.index("cuOccupancyMaxActiveBlocksPerMultiprocessor")
    k.launch(66, 50_000_000)
    assert lib.launched == (66, 1, 1, cl.THREADS_PER_BLOCK, 1, 1, 232448, 50_000_000)
    with pytest.raises(ValueError):
        k.launch(133, 1)
    k.close()
    assert [fn for fn, _ in lib.calls[-2:]] == ["cuModuleUnload", "cuCtxDestroy_v2"]


def test_a_gpu_where_two_blocks_would_share_an_sm_is_refused() -> None:
    with pytest.raises(cl.CudaError, match="2 blocks of the spin kernel fit on one SM"):
        cl.SpinKernel(cl.Driver(StandIn(per_sm=2)))
    with pytest.raises(cl.CudaError, match="one block per SM cannot be enforced"):
        cl.SpinKernel(cl.Driver(StandIn(optin=49152, per_sm_smem=233472)))


def test_driver_errors_name_the_call_the_code_and_what_to_do() -> None:
    with pytest.raises(cl.CudaError) as e:
        cl.SpinKernel(cl.Driver(StandIn(fail={"cuInit": 100})))
    assert str(e.value).startswith("cuInit failed with CUDA_ERROR_NO_DEVICE; no CUDA device is visible")
    lib = StandIn(fail={"cuCtxCreate_v2": 46})  # cuGetErrorName does not know it: the table does
    with pytest.raises(cl.CudaError, match="cuCtxCreate_v2 failed with CUDA_ERROR_DEVICE_UNAVAILABLE; the GPU is in "
                                           "exclusive-process compute mode"):
        cl.SpinKernel(cl.Driver(lib))
    with pytest.raises(cl.CudaError, match=r"cuModuleLoadDataEx failed with CUDA_ERROR_INVALID_PTX"):
        cl.SpinKernel(cl.Driver(StandIn(fail={"cuModuleLoadDataEx": 218})))
    with pytest.raises(cl.CudaError, match="CUresult 12345"):
        cl.Driver(StandIn(fail={"cuInit": 12345})).call("cuInit", 0)
    assert isinstance(cl.CudaError("f", 1), GpuauditError)


def test_run_pattern_busies_d_of_each_period_on_an_absolute_grid() -> None:
    t = [0.0]
    launches: list[tuple[int, int]] = []

    class Kernel:
        def launch(self, blocks: int, ns: int) -> None:
            launches.append((blocks, ns))

        def synchronize(self) -> None:
            t[0] += launches[-1][1] / 1e9  # the kernel ran its duration

    waits: list[float] = []

    def poll(timeout: float) -> bool:
        waits.append(round(timeout, 9))
        t[0] += timeout
        return len(waits) == 5

    cl.run_pattern(Kernel(), 66, 0.25, 0.1, poll, clock=lambda: t[0])
    assert launches == [(66, 25_000_000)] * 5 and waits == [0.075] * 5 and t[0] == pytest.approx(0.5)


def test_the_load_process_says_in_one_line_that_libcuda_is_missing() -> None:
    """The real `driver` backend on this machine (no NVIDIA driver): the load process answers with the loader's
    error, and the parent raises it as one line."""
    try:
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("this machine has libcuda")
    except OSError:
        pass
    with pytest.raises(GpuauditError) as e:
        cl.LoadProcess("driver", cuda_device=None, ready_timeout_s=60)
    assert "the CUDA driver library cannot be loaded" in str(e.value) and "\n" not in str(e.value)


def test_auto_without_libcuda_or_pytorch_says_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--backend auto` tries PyTorch when libcuda does not load; with neither, one line names both."""
    monkeypatch.setenv("GPUAUDIT_LIBCUDA", str(tmp_path / "libcuda.so.1"))  # not there
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "torch.py").write_text("raise ImportError('no torch here')\n")  # whether or not torch is installed
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")]))
    with pytest.raises(GpuauditError) as e:
        cl.LoadProcess("auto", cuda_device=None)
    msg = str(e.value)
    assert msg.startswith(f"the CUDA driver library cannot be loaded ({tmp_path / 'libcuda.so.1'}: ")
    assert msg.endswith("which mounts it (nor through PyTorch: PyTorch is not installed)") and "\n" not in msg
