"""`gpuaudit selftest`: prove on a GPU that what the agent records is right, with a load whose SM activity and
duty cycle are known by construction. Modules: steps.py (the schedule, the run, the verdicts and the report),
driver.py (libcuda through ctypes), kernel.py (the spin kernel, one block per SM), load.py (the load's own
process and the JSON-lines protocol it speaks; `python -m gpuaudit.selftest` is that process), simulated.py
(`selftest --simulate`: the fake NVML and a simulated load). The agent imports nothing from here: the selftest
drives the agent's sampler, never the other way round."""

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
    Driver,
    load_library,
    uuid_text,
)
from gpuaudit.selftest.kernel import (
    FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES,
    KERNEL_NAME,
    PTX_TARGETS,
    THREADS_PER_BLOCK,
    SpinKernel,
    kernel_params,
    ptx_target,
    run_pattern,
    spin_ptx,
)
from gpuaudit.selftest.load import LoadProcess
from gpuaudit.selftest.steps import (
    Environment,
    Interrupted,
    Load,
    SelftestConfig,
    Step,
    StepResult,
    Target,
    check_attribution,
    compare,
    expected_attribution,
    expected_sm_active,
    hold,
    real_environment,
    render,
    run,
    schedule,
)

__all__ = [
    "ATTR_COMPUTE_CAPABILITY_MAJOR", "ATTR_COMPUTE_CAPABILITY_MINOR", "ATTR_MAX_SHARED_MEMORY_PER_BLOCK",
    "ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", "ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "ATTR_MAX_THREADS_PER_MULTIPROCESSOR", "ATTR_MULTIPROCESSOR_COUNT", "ATTR_RESERVED_SHARED_MEMORY_PER_BLOCK",
    "FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES", "KERNEL_NAME", "PTX_TARGETS", "THREADS_PER_BLOCK", "CudaError",
    "CudaUnavailable", "Driver", "Environment", "Interrupted", "Load", "LoadProcess", "SelftestConfig", "SpinKernel",
    "Step", "StepResult", "Target", "check_attribution", "compare", "expected_attribution", "expected_sm_active",
    "hold", "kernel_params", "load_library", "ptx_target", "real_environment", "render", "run", "run_pattern",
    "schedule", "spin_ptx", "uuid_text",
]
