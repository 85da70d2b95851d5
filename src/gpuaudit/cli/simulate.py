"""CLI for the synthetic fleet: `gpuaudit simulate`."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import typer

from gpuaudit.cli import app
from gpuaudit.cli._common import DataOption, data_path, handle_errors
from gpuaudit.errors import GpuauditError

# Kept here (not imported from gpuaudit.sim.workload) so `--help` stays cheap; a test checks they match.
SCENARIO_HELP = (
    "phantom (runtime ~60 %, real ~23 %), idle-cluster (16 nodes x 8 GPUs at ~12 %), "
    "steady-training (~95 % around the clock), bursty-agents (20 <-> 200 GPUs within minutes), "
    "mixed (a shared fleet: hybrid), mixed-models (8 H100 training beside 32 T4 mostly idle)"
)


def _parse_start(value: str | None, days: float) -> datetime | None:
    """--start: an ISO date or time (UTC unless it has an offset), within the years the importer accepts,
    with the whole simulated trial inside them too."""
    if value is None:
        return None
    try:
        start = datetime.fromisoformat(value.strip())
    except ValueError:
        raise GpuauditError(f"--start must be an ISO date or time, e.g. 2026-01-05 (got {value!r})") from None
    from gpuaudit.importer.timespec import LATEST, check_range

    start = check_range(start if start.tzinfo else start.replace(tzinfo=UTC), "--start", value)
    if math.isfinite(days) and 0 < days < 36600 and start + timedelta(days=days) > LATEST:
        raise GpuauditError(f"--start {value!r} with --days {days:g} ends after {LATEST:%Y-%m-%d}")
    return start


@app.command("simulate")
@handle_errors
def simulate_cmd(
    scenario: str = typer.Option("phantom", "--scenario", "-s", help=f"Workload scenario: {SCENARIO_HELP}."),
    gpus: int | None = typer.Option(None, "--gpus", "-g", help="Number of GPUs, 8 per host "
                                    "(default: the scenario's: 64; 128 for idle-cluster and mixed; 256 for "
                                    "bursty-agents; 40 for mixed-models)."),
    days: float = typer.Option(14.0, "--days", help="Days of history to generate."),
    interval: float = typer.Option(60.0, "--interval", "-i", help="Sample interval in seconds (1-3600)."),
    seed: int = typer.Option(0, "--seed", help="Random seed: the same seed gives the same dataset."),
    start: str | None = typer.Option(None, "--start", help="First sample, UTC, ISO date or time "
                                     "(default: midnight UTC --days days ago)."),
    force: bool = typer.Option(False, "--force", help="Replace a previous simulation in --data."),
    workers: int | None = typer.Option(None, "--workers", help="Parallel writer processes "
                                       "(default: one per CPU for runs over 4 M rows)."),
    list_: bool = typer.Option(False, "--list", help="List the scenarios with their ground truth and exit."),
    data: Path | None = DataOption,
) -> None:
    """Write a synthetic fleet dataset (both tables) with a known ground truth in simulation.json.

    Example: gpuaudit simulate --scenario phantom --gpus 64 --days 14 --interval 60 --data ./trial
    """
    from gpuaudit.sim import bulk as sim
    from gpuaudit.sim.workload import SCENARIOS

    if list_:
        for sc in SCENARIOS.values():
            t = sc.truth
            typer.echo(f"{sc.name:16} {sc.default_gpus:4d} GPUs  R/W {t.runtime_util:4.0%}  S/W {t.real_util:4.0%}  "
                       f"-> {t.branch:8}  {sc.title}")
        return
    from gpuaudit.report.terminal import progress_bar

    with progress_bar("simulating") as bar:  # drawn on a terminal's stderr only
        summary = sim.simulate(data_path(data), scenario, gpus, days, interval, seed, start=_parse_start(start, days),
                               progress=bar, force=force, workers=workers)
    typer.echo(summary.line())
