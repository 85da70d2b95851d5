"""`gpuaudit agent run` and `gpuaudit agent status`: argument parsing only; the work is in gpuaudit.agent."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import typer

from gpuaudit.cli import app
from gpuaudit.cli._common import DataOption, data_path, fail, handle_errors
from gpuaudit.cli.push import DeleteOption, EndpointOption
from gpuaudit.util import logsetup, paths
from gpuaudit.util.paths import collection_target

agent_app = typer.Typer(
    name="agent",
    help="The node agent: sample real GPU utilization with NVML and store it (run it on every GPU node).",
    no_args_is_help=True,
)
app.add_typer(agent_app, name="agent")

SimulateOption = typer.Option(
    None, "--simulate", metavar="SCENARIO",
    help="Run against a simulated NVML driven by a workload scenario (phantom, idle-cluster, "
    "steady-training, bursty-agents, mixed, static): see the agent working on a machine without a GPU.",
)
HardwareOption = typer.Option(
    "h100", "--simulate-hardware", metavar="PROFILE",
    help="Simulated hardware: h100, h200, pre-hopper, not-supported, gpu-lost, mig, zero-devices, "
    "library-missing, driver-mismatch, driver-reload.",
)
HostOption = typer.Option(None, "--host", help="Host name to record (default: this machine's hostname).")


def _nvml(simulate: str | None, hardware: str, gpus: int, seed: int, interval_s: float, host: str):
    from gpuaudit.agent.nvml import Nvml

    if simulate is None:
        return Nvml(), None
    from gpuaudit.sim.agentfake import build_fake

    fake = build_fake(simulate, n_gpus=gpus, hardware=hardware, seed=seed, interval_s=interval_s, host=host)
    return Nvml(fake), fake


@agent_app.command("run")
@handle_errors
def run(
    interval: float = typer.Option(10.0, "--interval", "-i",
                                   help="Seconds per sample (interval average), 0.1 to 3600."),
    data: Path | None = DataOption,
    once: bool = typer.Option(False, "--once", help="Sample one interval, flush, exit."),
    duration: float | None = typer.Option(None, "--duration", help="Stop after this many seconds."),
    flush_interval: float = typer.Option(
        60.0, "--flush-interval", help="Seconds between flushes to disk: the most data a crash can lose."),
    max_buffer_rows: int = typer.Option(
        50_000, "--max-buffer-rows", help="Rows kept in memory while the disk is unwritable; oldest dropped."),
    host: str | None = HostOption,
    simulate: str | None = SimulateOption,
    simulate_hardware: str = HardwareOption,
    simulate_gpus: int = typer.Option(8, "--simulate-gpus", help="Simulated GPUs, 1 to 1024."),
    seed: int = typer.Option(0, "--seed", help="Seed of the simulated workload."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logs (every flush)."),
    upload: str | None = typer.Option(
        None, "--upload", metavar="URL",
        help="Also ship each flush to a collection target (shared directory or s3://bucket/prefix), in a "
        "background process; see `gpuaudit push`."),
    endpoint_url: str | None = EndpointOption,
    delete_after_upload: bool = DeleteOption,
    metrics_listen: str | None = typer.Option(
        None, "--metrics-listen", metavar="HOST:PORT",
        help="Serve the interval averages as Prometheus metrics on HOST:PORT (off by default; a loopback "
        "address unless --metrics-allow-remote). Names: agents/README.md."),
    metrics_allow_remote: bool = typer.Option(
        False, "--metrics-allow-remote", help="Allow --metrics-listen on a non-loopback address."),
    metrics_names: str = typer.Option(
        "gpuaudit", "--metrics-names", metavar="gpuaudit|dcgm|both",
        help="Metric names: gpuaudit's, dcgm-exporter's (existing dashboards work), or both."),
) -> None:
    """Sample every GPU each interval and write interval averages to the dataset (until SIGTERM; SIGHUP
    flushes now). One agent per host and data directory."""
    from gpuaudit.agent.runner import Agent, AgentConfig
    logsetup.setup(events=True, verbose=verbose)
    url = paths.as_url(data)
    if url:
        fail(f"the agent writes to a local directory, not {url}: "
             f"give --data DIR and --upload {url} to ship each flush there")
    if upload:
        upload = collection_target(upload, "--upload")
    config = AgentConfig(root=data_path(data), interval_s=interval, flush_interval_s=flush_interval,
                         duration_s=duration, once=once, host=host or "", max_buffer_rows=max_buffer_rows,
                         upload=upload, upload_endpoint_url=endpoint_url, delete_after_upload=delete_after_upload,
                         metrics_listen=metrics_listen, metrics_allow_remote=metrics_allow_remote,
                         metrics_names=metrics_names)
    config.validate()
    nvml, fake = _nvml(simulate, simulate_hardware, simulate_gpus, seed, interval, config.host)
    extra: dict[str, Any] = {"simulated": {"scenario": simulate, "hardware": simulate_hardware}} if fake else {}
    if upload:
        extra["upload"] = upload
    agent = Agent(config, nvml, attributor=fake.attribution if fake else None, extra_status=extra)
    agent.install_signal_handlers()
    st = agent.run()
    if st["buffered_rows"]:
        from gpuaudit.errors import GpuauditError

        raise GpuauditError(f"{st['buffered_rows']} rows could not be written to {config.root}: "
                            f"{st['flush_error']}")


@agent_app.command("status")
@handle_errors
def status(
    data: Path | None = DataOption,
    host: str | None = HostOption,
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    simulate: str | None = SimulateOption,
    simulate_hardware: str = HardwareOption,
    simulate_gpus: int = typer.Option(8, "--simulate-gpus", help="Simulated GPUs, 1 to 1024."),
) -> None:
    """Devices found, which metrics they support (GPM or duty-cycle fallback), whether the agent is running
    (its pid and start time are checked, not just its last flush), and its last flush.
    Exit status: 0 NVML works and the agent runs; 1 NVML unusable; 3 the agent is not running."""
    from gpuaudit.agent.status import collect, exit_code, render
    from gpuaudit.util.jsonio import dumps

    host = host or socket.gethostname()
    nvml, _ = _nvml(simulate, simulate_hardware, simulate_gpus, 0, 1.0, host)
    st = collect(data_path(data), host, nvml)
    typer.echo(dumps(st, indent=2, default=str) if as_json else render(st))
    code = exit_code(st)
    if code:
        raise typer.Exit(code)
