"""The calibrated load's real ctypes path, across a C ABI: the driver API calls, out-parameters, JIT options and
kernel arguments go to a stand-in libcuda built from tests/data/libcuda_stub.c (cuda.h's signatures; it runs no
kernel). The load process (`--backend driver`) and a whole selftest run through it; no GPU needed."""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

import pytest
from tests.helpers import REPO, require_binary

from gpuaudit import selftest as cl
from gpuaudit import selftest as st
from gpuaudit.errors import GpuauditError
from gpuaudit.selftest.simulated import simulated_environment

STUB_SRC = REPO / "tests" / "data" / "libcuda_stub.c"


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = require_binary("gcc", "apt-get install gcc libc6-dev (it builds the stand-in libcuda)")
    out = tmp_path_factory.mktemp("libcuda") / "libcuda.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(out), str(STUB_SRC)], check=True)
    return out


@pytest.fixture
def stub_env(stub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "launches.log"
    monkeypatch.setenv("GPUAUDIT_LIBCUDA", str(stub))
    monkeypatch.setenv("STUB_LIBCUDA_LOG", str(log))
    monkeypatch.delenv("STUB_LIBCUDA_FAIL", raising=False)
    return log


def _launches(log: Path) -> list[tuple[int, int, int, int]]:
    return [tuple(map(int, line.split())) for line in log.read_text().splitlines()]  # type: ignore[misc]


def test_the_kernel_loads_and_launches_through_ctypes(stub_env: Path) -> None:
    k = cl.SpinKernel(cl.Driver(cl.load_library()))  # $GPUAUDIT_LIBCUDA names the stand-in
    assert (k.sm_count, k.blocks_per_sm, k.smem_bytes, k.compute_capability) == (132, 1, 232448, "9.0")
    assert k.uuid == "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf" and k.name == "Stub H100"
    k.launch(66, 25_000_000)
    k.synchronize()
    k.close()
    assert _launches(stub_env) == [(66, cl.THREADS_PER_BLOCK, 232448, 25_000_000)]


def test_a_rejected_ptx_brings_the_jit_log_and_the_error_name(stub_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUB_LIBCUDA_FAIL", "cuModuleLoadDataEx:218")
    with pytest.raises(cl.CudaError) as e:
        cl.SpinKernel(cl.Driver(cl.load_library()))
    assert str(e.value) == ("cuModuleLoadDataEx failed with CUDA_ERROR_INVALID_PTX: ptxas stub: line 1; error: no "
                            "spin kernel; the driver's JIT rejected the kernel")


def test_the_load_process_reports_a_driver_error_in_one_line(stub_env: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUB_LIBCUDA_FAIL", "cuInit:100")
    with pytest.raises(GpuauditError) as e:
        cl.LoadProcess("driver", cuda_device=None)
    assert str(e.value).startswith("cuInit failed with CUDA_ERROR_NO_DEVICE; no CUDA device is visible")


def test_the_load_process_runs_the_pattern_it_is_told(stub_env: Path) -> None:
    load = cl.LoadProcess("driver", cuda_device=None, period_s=0.05)
    try:
        assert load.info["backend"] == "driver" and load.info["sm_count"] == 132 and load.info["pid"] == load.pid
        assert load.info["user"] and "cgroup" in load.info
        load.run(66, 0.5)
        load.run(1, 1.0)  # a new command ends the current pattern within a period
        load.idle()
    finally:
        load.close()
    assert load.proc.returncode == 0  # asked to exit: context released, clean exit
    got = _launches(stub_env)
    assert got[0] == (66, cl.THREADS_PER_BLOCK, 232448, 25_000_000)
    assert got[-1] == (1, cl.THREADS_PER_BLOCK, 232448, 50_000_000)


def test_a_whole_selftest_through_the_ctypes_load(stub_env: Path) -> None:
    """The selftest with the real `driver` load process (on the stand-in) and the fake NVML: every step's launch
    is the step's k blocks for d of the period."""
    config = st.SelftestConfig(period_s=0.05)
    env = simulated_environment(config, load_backend="driver")
    report = st.run(config, env)
    assert report["passed"], report
    assert report["load"]["backend"] == "driver" and report["load"]["shared_memory_per_block_bytes"] == 232448
    launched = {(g, ns) for g, _, _, ns in _launches(stub_env)}
    for s in report["steps"]:
        assert (s["k"], round(s["d"] * 0.05 * 1e9)) in launched
    assert not os.path.exists(f"/proc/{report['load']['pid']}")


def test_ctypes_sees_the_stub_as_libcuda(stub: Path) -> None:
    lib = ctypes.CDLL(str(stub))
    assert cl.Driver(lib).has("cuLaunchKernel") and not cl.Driver(lib).has("cuNoSuchCall")


def test_the_torch_backend_runs_the_kernel_in_the_context_torch_opened(stub_env: Path, stub: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`--backend torch`: PyTorch initialises CUDA (here a stand-in `torch` that opens the stand-in libcuda, as
    torch.cuda.init() opens the driver's), the load finds that libcuda among the process's mapped libraries and
    runs the same kernel in the primary context."""
    fake = tmp_path / "faketorch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "import ctypes, os\n\n\nclass cuda:\n    @staticmethod\n    def init():\n"
        "        ctypes.CDLL(os.environ['STUB_TORCH_LIBCUDA'])\n")
    monkeypatch.delenv("GPUAUDIT_LIBCUDA")  # only torch knows where the driver is
    monkeypatch.setenv("STUB_TORCH_LIBCUDA", str(stub))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")]))
    load = cl.LoadProcess("torch", cuda_device=None, period_s=0.05)
    try:
        assert load.info["backend"] == "torch" and load.info["sm_count"] == 132
        load.run(132, 0.25)
        load.idle()
    finally:
        load.close()
    assert load.proc.returncode == 0  # the primary context was released cleanly
    assert _launches(stub_env)[0] == (132, cl.THREADS_PER_BLOCK, 232448, 12_500_000)
