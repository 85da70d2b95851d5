"""Shared CLI plumbing: the --data option and the one place that turns errors into one-line messages."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from gpuaudit.errors import GpuauditError

F = TypeVar("F", bound=Callable[..., Any])

DataOption = typer.Option(
    None,
    "--data",
    "-d",
    envvar="GPUAUDIT_DATA",
    help="Dataset root directory (default: ./gpuaudit-data, or $GPUAUDIT_DATA).",
    show_default=False,
)


# The analysis inputs shared by `gpuaudit analyze` and `gpuaudit report`.
ConfigOption = typer.Option(
    None, "--config", "-c", help="Cost and decision settings (TOML); unknown keys are an error.", dir_okay=False
)
PresetOption = typer.Option(
    None, "--preset", help="Base settings: default, or article (the reference article's cost model)."
)
LatencyOption = typer.Option(
    False, "--latency-sensitive", help="Workloads need low latency to on-prem systems (decision input)."
)
ResidencyOption = typer.Option(
    False, "--data-residency", help="Data residency rules forbid the cloud: the decision is on-prem."
)
EgressOption = typer.Option(
    None, "--egress-gb-per-week", help="Data moved out of the cloud per week, GB (default: from config)."
)
CurrentOption = typer.Option("on-prem", "--current", help="Where the fleet runs today: on-prem or cloud.")


def data_path(value: Path | None) -> Path:
    from gpuaudit.store import data_root

    return data_root(value)


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"gpuaudit: error: {message}", err=True)
    raise typer.Exit(code)


def handle_errors(fn: F) -> F:
    """Known errors become `gpuaudit: error: ...` on stderr and a non-zero exit, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except GpuauditError as e:
            fail(str(e), e.exit_code)
        except KeyboardInterrupt:
            typer.echo("gpuaudit: interrupted", err=True)
            raise typer.Exit(130) from None
        except BrokenPipeError:
            sys.stderr.close()  # `gpuaudit sql ... | head` is fine
            raise typer.Exit(0) from None

    return wrapper  # type: ignore[return-value]


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
