"""CLI for the analyzer: `gpuaudit analyze`. Arguments only; the work is in gpuaudit.analysis."""

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


@app.command("analyze")
@handle_errors
def analyze_cmd(
    data: Path | None = DataOption,
    config: Path | None = ConfigOption,
    preset: str | None = PresetOption,
    as_json: bool = typer.Option(False, "--json", help="Print the whole result as JSON (stable keys)."),
    latency_sensitive: bool = LatencyOption,
    latency_sensitive_share: float | None = LatencyShareOption,
    data_residency: bool = ResidencyOption,
    egress_gb_per_week: float | None = EgressOption,
    current: str = CurrentOption,
    fleet_gpus: int | None = FleetOption,
    engine: str = EngineOption,
    no_cache: bool = NoCacheOption,
) -> None:
    """Analyze the dataset: real vs runtime-hour utilization, the cloud / hybrid / on-prem decision, costs.

    Examples: gpuaudit analyze --data ./gpuaudit-data;
    gpuaudit analyze --json --latency-sensitive --egress-gb-per-week 2000 --config costs.toml
    """
    from gpuaudit.flows import print_analysis

    config = local_path(config, "--config", "a file") if config is not None else None
    print_analysis(data_source(data), as_json=as_json, config=config, preset=preset,
                   overrides=overrides(latency_sensitive, latency_sensitive_share, data_residency,
                                       egress_gb_per_week, current, fleet_gpus), engine=engine,
                   cache=not no_cache)
