"""The NVML seam: lazy init, error translation, GPM metrics, and the fake's fidelity to pynvml."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys

import pynvml
import pytest
from tests.agent_helpers import ManualClock, step_load
from tests.helpers import run_cli

from gpuaudit.agent.nvml import DeviceFault, DriverGone, GpmBuffers, Nvml, NvmlUnavailable
from gpuaudit.sim import fakenvml


def _nvml(profile: str, n_gpus: int = 2, **kw) -> tuple[Nvml, fakenvml.FakeNvml, ManualClock]:
    clock = ManualClock()
    fake = fakenvml.make(profile, n_gpus, clock=clock, **kw)
    return Nvml(fake), fake, clock


def test_import_does_not_load_pynvml() -> None:
    code = ("import sys, gpuaudit.agent.nvml, gpuaudit.agent.runner, gpuaudit.cli.agent; "
            "bad = [m for m in ('pynvml', 'polars', 'pyarrow') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_init_is_lazy_and_once() -> None:
    nv, fake, _ = _nvml("h100")
    assert fake.init_calls == 0
    assert nv.device_count() == 2
    nv.device_count()
    assert fake.init_calls == 1


@pytest.mark.parametrize(("profile", "words"), [
    ("library-missing", "install the NVIDIA driver"),
    ("driver-mismatch", "reboot the node"),
])
def test_fatal_init_errors_have_a_hint(profile: str, words: str) -> None:
    nv, _, _ = _nvml(profile)
    with pytest.raises(NvmlUnavailable, match=words):
        nv.init()


def test_real_pynvml_without_driver_is_one_clear_error() -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has libnvidia-ml: the missing-library path cannot be exercised here")
    with pytest.raises(NvmlUnavailable, match=r"NVML library not found.*--simulate"):
        Nvml().init()  # the real pynvml module, the real dlopen failure


def test_cli_without_driver_fails_in_one_line(tmp_path) -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has libnvidia-ml")
    r = run_cli("agent", "run", "--once", "--interval", "0.1", "--data", str(tmp_path / "d"), timeout=60)
    assert r.returncode == 2
    errors = [line for line in r.stderr.splitlines() if line.startswith("gpuaudit: error:")]
    assert len(errors) == 1 and "NVML library not found" in errors[0]
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "d" / "gpu_samples").exists()


def test_query_translates_errors() -> None:
    nv, fake, _clock = _nvml("h100")
    h = nv.handle(0)
    fake.profile.unsupported = ("nvmlDeviceGetTemperature",)
    assert nv.temperature_c(h) is None
    fake.profile.faults.append(fakenvml.Fault("GpuIsLost", gpu=0, fn="nvmlDeviceGetUUID"))
    with pytest.raises(DeviceFault) as e:
        nv.mig_uuid(h)  # unsupported is None; a lost GPU is not
    assert e.value.code == "NVMLError_GpuIsLost"
    fake.profile.faults.append(fakenvml.Fault("Uninitialized", fn="nvmlDeviceGetCount"))
    with pytest.raises(DriverGone):
        nv.device_count()
    assert not nv.initialized  # the next call re-inits


def test_fake_raises_the_real_exception_classes() -> None:
    nv, fake, _ = _nvml("h100")
    nv.init()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetHandleByIndex(5)
    with pytest.raises(pynvml.NVMLError):
        fake.nvmlDeviceGetSamples(fake.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)


def test_gpm_metrics_checks_each_metric_return() -> None:
    clock = ManualClock()
    prof = fakenvml.profile("h100", 1)
    prof.gpus[0].unsupported_metrics = ("NVML_GPM_METRIC_ANY_TENSOR_UTIL",)
    load = step_load(clock.t, [(0, fakenvml.Load(sm_active=0.25, sm_occupancy=0.5, dram_active=0.75))], 1)
    fake = fakenvml.FakeNvml(prof, load, clock=clock)
    nv = Nvml(fake)
    h = nv.handle(0)
    assert nv.gpm_supported(h)
    bufs = GpmBuffers(nv, h)
    bufs.prime()
    clock.advance(5)
    res = bufs.advance().values
    assert res == {"sm_active": 0.25, "sm_occupancy": 0.5, "tensor_active": None, "dram_active": 0.75}
    bufs.free()
    assert fake.freed == 2 and not fake.gpm_buffers


def test_gpm_buffers_are_reused() -> None:
    nv, fake, clock = _nvml("h100", 1)
    bufs = nv.gpm_buffers(nv.handle(0))
    bufs.prime()
    for _ in range(20):
        clock.advance(1)
        bufs.advance()
    assert fake.calls["nvmlGpmSampleAlloc"] == 2
    assert fake.calls["nvmlGpmSampleGet"] == 21


def test_pre_hopper_reports_no_gpm() -> None:
    nv, _, _ = _nvml("pre-hopper")
    assert not nv.gpm_supported(nv.handle(0))


def _called_names() -> set[str]:
    """Every pynvml function name the agent passes to the seam (string literals "nvml...")."""
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src" / "gpuaudit"
    text = "".join(p.read_text() for p in sorted((src / "agent").glob("*.py")))
    return set(re.findall(r'"(nvml[A-Z][A-Za-z0-9_]+)"', text))


def test_every_function_the_agent_calls_exists_in_real_pynvml_and_the_fake() -> None:
    import inspect

    names = _called_names()
    assert {"nvmlGpmMetricsGet", "nvmlGpmMigSampleGet", "nvmlDeviceGetSamples"} <= names
    for name in sorted(names):
        real = getattr(pynvml, name, None)
        assert real is not None, f"pynvml has no {name}"
        if not callable(real):  # a constant such as nvmlMemory_v2
            continue
        fake = getattr(fakenvml.FakeNvml, name, None)
        assert fake is not None and fake is not real, f"the fake does not implement {name}"
        real_params = [p for p in inspect.signature(real).parameters.values()
                       if p.default is inspect.Parameter.empty]
        fake_params = [p for p in list(inspect.signature(fake).parameters.values())[1:]
                       if p.default is inspect.Parameter.empty]
        assert len(real_params) == len(fake_params), f"{name}: {real_params} vs {fake_params}"


def test_every_constant_the_agent_uses_exists_in_real_pynvml() -> None:
    import re
    from pathlib import Path

    from gpuaudit.agent.nvml import GPM_METRICS

    src = Path(__file__).resolve().parents[1] / "src" / "gpuaudit"
    text = "".join(p.read_text() for p in sorted((src / "agent").glob("*.py")))
    names = set(re.findall(r'"(NVML_[A-Z0-9_]+)"', text)) | set(GPM_METRICS.values())
    assert "NVML_GPU_UTILIZATION_SAMPLES" in names
    assert [n for n in sorted(names) if not hasattr(pynvml, n)] == []


def test_only_the_seam_names_nvml_functions() -> None:
    """The typed seam: outside agent/nvml.py no module passes an NVML function name or constant as a string
    (the sampler and the selftest call typed methods)."""
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src" / "gpuaudit"
    bad = [f"{p.relative_to(src)}: {m}" for p in sorted(src.rglob("*.py")) if p.parts[-2:] != ("agent", "nvml.py")
           and p.parts[-2] != "sim" for m in re.findall(r'"(nvml[A-Z]\w+|NVML_[A-Z0-9_]+)"', p.read_text())]
    assert bad == []
