"""`gpuaudit selftest`: argument parsing only; the work is in gpuaudit.selftest."""

from __future__ import annotations

import socket
import sys

import typer

from gpuaudit.cli import app
from gpuaudit.cli._common import fail, handle_errors


@app.command()
@handle_errors
def selftest(
    gpu: int = typer.Option(0, "--gpu", help="NVML index of the GPU to test (it is busy for about a minute)."),
    mig_instance: int | None = typer.Option(
        None, "--mig-instance", metavar="GI",
        help="On a MIG GPU: the GPU instance id to run the load inside (a MIG GPU is refused without it)."),
    force: bool = typer.Option(
        False, "--force", help="Run even though the GPU is busy with other work (its load spoils the comparison)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    backend: str = typer.Option(
        "auto", "--backend", help="How the load reaches the GPU: driver (libcuda through ctypes), torch (PyTorch "
        "initialises CUDA, the same kernel runs), or auto (driver, else torch)."),
    step_seconds: float = typer.Option(
        4.0, "--step-seconds", help="Seconds measured per step (after 2 s settling), 1 to 60."),
    hold: float | None = typer.Option(
        None, "--hold", metavar="SECONDS",
        help="Only run the load (all SMs, busy half of each period) for SECONDS, for a separate `agent run` to "
        "measure; prints one JSON line when it runs and one when it ends."),
    simulate: bool = typer.Option(
        False, "--simulate", help="Run the same steps against the fake NVML and a simulated load: no GPU needed."),
    simulate_hardware: str = typer.Option(
        "h100", "--simulate-hardware", metavar="PROFILE",
        help="Simulated hardware: h100, h200, pre-hopper (no GPM), mig, zero-devices, library-missing, ..."),
    simulate_gpus: int = typer.Option(1, "--simulate-gpus", help="Simulated GPUs, 1 to 64."),
    simulate_fault: str | None = typer.Option(
        None, "--simulate-fault", metavar="FAULT",
        help="A fault the selftest must catch: busy, no-libcuda, miscalibrated, foreign-pid."),
) -> None:
    """Check on this GPU that what the agent records is right: a calibrated load (k blocks, one per SM, busy d of
    each period) makes SM activity (k/SMs) x d and duty cycle d by construction; the agent's sampler measures it
    at 1 s. Exit status: 0 every step within tolerance; 1 a step failed; 2 cannot run; 130 interrupted."""
    from gpuaudit import selftest as st
    from gpuaudit.util.jsonio import dumps

    if backend not in ("auto", "driver", "torch"):
        fail(f"--backend must be auto, driver or torch, got {backend!r}")
    if not 1 <= step_seconds <= 60:
        fail(f"--step-seconds must be between 1 and 60, got {step_seconds!r}")
    if hold is not None and not 0 < hold <= 3600:
        fail(f"--hold must be between 0 and 3600 seconds, got {hold!r}")
    config = st.SelftestConfig(gpu=gpu, mig_instance=mig_instance, force=force, backend=backend,
                               measure_s=step_seconds)
    if simulate:
        from gpuaudit.selftest.simulated import simulated_environment

        env = simulated_environment(config, hardware=simulate_hardware, n_gpus=simulate_gpus,
                                       fault=simulate_fault)
    elif simulate_fault or simulate_hardware != "h100" or simulate_gpus != 1:
        fail("--simulate-hardware, --simulate-gpus and --simulate-fault need --simulate")
    else:
        env = st.real_environment(socket.gethostname())

    def echo_line(info: dict) -> None:
        typer.echo(dumps(info))
        sys.stdout.flush()

    if hold is not None:
        echo_line(st.hold(config, env, hold, on_running=echo_line))
        return
    # Progress for a person watching; a script or a pipe gets only the report (and errors stay one line).
    progress = (lambda msg: typer.echo(f"gpuaudit: {msg}", err=True)) if sys.stderr.isatty() and not as_json else None
    report = st.run(config, env, progress=progress)
    typer.echo(dumps(report, indent=2) if as_json else st.render(report))
    if not report["passed"]:
        raise typer.Exit(1)
