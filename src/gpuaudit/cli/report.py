"""CLI for the report area: `gpuaudit report` and `gpuaudit demo`. Arguments only; the work is in
gpuaudit.report (imported inside the commands so `gpuaudit --help` stays light)."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuaudit.cli import app
from gpuaudit.cli._common import (
    ConfigOption,
    CurrentOption,
    DataOption,
    EgressOption,
    EngineOption,
    FleetOption,
    LatencyOption,
    LatencyShareOption,
    NoCacheOption,
    PresetOption,
    ResidencyOption,
    data_source,
    handle_errors,
    overrides,
)
from gpuaudit.util.paths import local_path

OutOption = typer.Option(Path("gpuaudit-report"), "--out", "-o", help="Directory to write the report into.")


@app.command("report")
@handle_errors
def report_cmd(
    data: Path | None = DataOption,
    config: Path | None = ConfigOption,
    out: Path = OutOption,
    format: str = typer.Option("html,md,json", "--format", "-f",
                               help="Comma-separated formats: html (one self-contained file), md "
                                    "(Markdown + SVG charts), json (the analyzer's result)."),
    preset: str | None = PresetOption,
    latency_sensitive: bool = LatencyOption,
    latency_sensitive_share: float | None = LatencyShareOption,
    data_residency: bool = ResidencyOption,
    egress_gb_per_week: float | None = EgressOption,
    current: str = CurrentOption,
    fleet_gpus: int | None = FleetOption,
    engine: str = EngineOption,
    no_cache: bool = NoCacheOption,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the paths written."),
    by: str = typer.Option(None, "--by", help="Chargeback / showback too: comma-separated account, user, "
                                             "partition, namespace -> chargeback-KEY.csv and .json (allocated, "
                                             "held, real, unused GPU-hours and their cost; rows sum to the fleet) and "
                                             "idle-jobs.csv / .json."),
) -> None:
    """Write the audit report (HTML, Markdown, JSON) for a dataset, and print a short summary.

    Run it after a trial period. It analyzes the dataset and explains the verdict (cloud, hybrid or on-prem):
    believed vs real utilization, where the waste is, when, demand and sizing, costs, sensitivity.
    """
    from gpuaudit.flows import report_dataset

    out = local_path(out, "--out", "a local directory (copy the report to object storage afterwards)")
    config = local_path(config, "--config", "a file") if config is not None else None
    report_dataset(data_source(data), out, formats=format, config=config, preset=preset, quiet=quiet,
                   overrides=overrides(latency_sensitive, latency_sensitive_share, data_residency,
                                       egress_gb_per_week, current, fleet_gpus),
                   engine=engine, cache=not no_cache, by=by)


@app.command("demo")
@handle_errors
def demo_cmd(
    scenario: str = typer.Option("mixed", "--scenario", "-s",
                                 help="Simulated fleet: phantom, idle-cluster, steady-training, bursty-agents, "
                                      "mixed."),
    out: Path = OutOption,
    gpus: int = typer.Option(64, "--gpus", min=1, help="GPUs in the simulated fleet."),
    days: float = typer.Option(90, "--days", min=0.01, help="Length of the simulated trial, in days."),
    interval: float = typer.Option(60, "--interval", min=1, help="Sampling interval, in seconds."),
    seed: int = typer.Option(1, "--seed", help="Random seed of the simulation."),
    format: str = typer.Option("html,md,json", "--format", "-f", help="Report formats, as for `report`."),
) -> None:
    """Simulate a 90-day trial on a fleet, analyze it and write the report: the first thing to run.

    The simulated dataset goes to OUT/data (query it with `gpuaudit sql --data OUT/data ...`).
    The report goes to OUT/report.html, OUT/report.md and OUT/report.json.
    """
    from gpuaudit.flows import run_demo

    out = local_path(out, "--out", "a local directory")
    run_demo(out, scenario=scenario, gpus=gpus, days=days, interval_s=interval, seed=seed, formats=format)
