"""CLI for the analyzer: `gpuaudit analyze`. Arguments only; the work is in gpuaudit.analysis."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuaudit.cli import app
from gpuaudit.cli._common import DataOption, data_path, fail, handle_errors


@app.command("analyze")
@handle_errors
def analyze_cmd(
    data: Path | None = DataOption,
    config: Path | None = typer.Option(
        None, "--config", "-c", help="Cost and decision settings (TOML); unknown keys are an error.", dir_okay=False
    ),
    preset: str | None = typer.Option(
        None, "--preset", help="Base settings: default, or article (the reference article's cost model)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the whole result as JSON (stable keys)."),
    latency_sensitive: bool = typer.Option(
        False, "--latency-sensitive", help="Workloads need low latency to on-prem systems (decision input)."
    ),
    data_residency: bool = typer.Option(
        False, "--data-residency", help="Data residency rules forbid the cloud: the decision is on-prem."
    ),
    egress_gb_per_week: float | None = typer.Option(
        None, "--egress-gb-per-week", help="Data moved out of the cloud per week, GB [default: from config]."
    ),
    current: str = typer.Option("on-prem", "--current", help="Where the fleet runs today: on-prem or cloud."),
) -> None:
    """Analyze the dataset: real vs runtime-hour utilization, the cloud / hybrid / on-prem decision, costs.

    Examples: gpuaudit analyze --data ./gpuaudit-data;
    gpuaudit analyze --json --latency-sensitive --egress-gb-per-week 2000 --config costs.toml
    """
    import json

    from gpuaudit.analysis.config import load_config
    from gpuaudit.analysis.pipeline import analyze
    from gpuaudit.analysis.text import summary

    root = data_path(data)
    if not root.exists():
        fail(f"no dataset at {root} (use --data DIR, set GPUAUDIT_DATA, or run `gpuaudit simulate`)")
    cfg = load_config(config, preset)
    result = analyze(root, cfg, latency_sensitive=latency_sensitive, data_residency=data_residency,
                     egress_gb_per_week=egress_gb_per_week, current=current)
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        typer.echo(summary(result), nl=False)
