"""Shared CLI plumbing: the --data option and the one place that turns errors into one-line messages. What a
path option means (`~` expansion, URLs refused where only a local path works) is gpuaudit.util.paths'."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from gpuaudit.errors import GpuauditError
from gpuaudit.util import paths

if TYPE_CHECKING:
    from gpuaudit.analysis.overrides import Overrides

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
    False, "--latency-sensitive", help="All work needs low latency to on-prem systems: none of it may burst to the "
    "cloud (a latency-sensitive share of 1)."
)
LatencyShareOption = typer.Option(
    None, "--latency-sensitive-share", metavar="FRACTION",
    help="The share of demand (0-1) that is latency-sensitive: it stays on owned GPUs, the rest may burst "
    "(default 0; in a config: [decision] latency_sensitive_share).", show_default=False,
)
ResidencyOption = typer.Option(
    False, "--data-residency", help="Data residency rules forbid the cloud: the decision is on-prem."
)
EgressOption = typer.Option(
    None, "--egress-gb-per-week", help="Data moved out of the cloud per week, GB (default: from config)."
)
CurrentOption = typer.Option("on-prem", "--current", help="Where the fleet runs today: on-prem or cloud.")
EngineOption = typer.Option(
    "duckdb", "--engine",
    help="What runs the stage-1 SQL over the dataset: duckdb (this machine) or spark (Apache Spark: the active "
         "or a local session; pip install 'gpuaudit\\[spark]'). Same figures either way.")
NoCacheOption = typer.Option(
    False, "--no-cache", help="A cold run: read the whole dataset, neither using nor filling the stage-1 rollup "
    "cache (<data>/.rollups/; for s3:// data under $XDG_CACHE_HOME/gpuaudit/rollups/) or, for report, the chart "
    "cache ($XDG_CACHE_HOME/gpuaudit/charts/). Same figures either way.")
FleetOption = typer.Option(
    None, "--fleet-gpus", help="GPUs in the whole fleet when some nodes had no agent (default: the GPUs seen); "
    "measured demand is scaled to it; at least the GPUs seen."
)


def overrides(latency_sensitive: bool, latency_sensitive_share: float | None, data_residency: bool,
              egress_gb_per_week: float | None, current: str, fleet_gpus: int | None) -> Overrides:
    """The decision-input options (LatencyOption ... FleetOption) of `analyze` and `report` as one object;
    checked when the analysis applies them to the config (analysis/overrides.apply)."""
    from gpuaudit.analysis.overrides import Overrides

    return Overrides(latency_sensitive=latency_sensitive, latency_sensitive_share=latency_sensitive_share,
                     data_residency=data_residency, egress_gb_per_week=egress_gb_per_week, current=current,
                     fleet_gpus=fleet_gpus)


def data_path(value: Path | None) -> Path:
    """The local dataset directory of a command that writes (or keeps state) there; an s3:// URL is refused with
    a one-line error pointing to `gpuaudit push` / `agent run --upload` (never a local folder named `s3:`)."""
    from gpuaudit.store import data_root, local_root

    return local_root(data_root(value))


def data_source(value: Path | None) -> Path | str:
    """The dataset a reading command reads: a local directory, or an s3://bucket/prefix URL."""
    from gpuaudit.store import data_root

    root = data_root(value)
    return paths.as_url(root) or root


def fail(message: str, code: int = 2) -> None:
    from gpuaudit.util.textsafe import printable

    # Messages echo data (paths, names, server answers): escaped, so they stay one visible line.
    typer.echo(f"gpuaudit: error: {printable(message)}", err=True)
    raise typer.Exit(code)


# Optional dependencies -> (what they are, the extra that installs them). The base install is the agent's;
# a command that needs more says which extra to install instead of showing a traceback.
ANALYSIS = ("the analysis libraries", "full")
EXTRAS: dict[str, tuple[str, str]] = {
    **dict.fromkeys(("polars", "numpy", "pyarrow", "matplotlib", "jinja2", "prometheus_api_client", "requests"),
                    ANALYSIS),
    **dict.fromkeys(("fsspec", "s3fs", "aiobotocore", "botocore"), ("the object-storage libraries", "s3")),
    **dict.fromkeys(("pyspark", "py4j", "sqlglot"), ("Apache Spark", "spark")),
}


def missing_extra_message(e: ModuleNotFoundError, command: str) -> str | None:
    """The one-line hint for a missing optional dependency, or None when `e` is not one (a real bug)."""
    what = EXTRAS.get((e.name or "").partition(".")[0])
    if what is None:
        return None
    return f"{command} needs {what[0]}: pip install 'gpuaudit[{what[1]}]'"


def _command_path(callback: Callable[..., Any]) -> str:
    """`gpuaudit agent run`: the registered name of the command whose callback is `callback`."""
    from gpuaudit.cli import app

    def find(group: typer.Typer, path: list[str]) -> list[str] | None:
        for c in group.registered_commands:
            if c.callback is callback:
                return [*path, c.name or callback.__name__]
        for g in group.registered_groups:
            if g.typer_instance is not None and (found := find(g.typer_instance, [*path, g.name or ""])):
                return found
        return None

    return " ".join(find(app, ["gpuaudit"]) or ["gpuaudit"])


def handle_errors(fn: F) -> F:
    """Known errors become `gpuaudit: error: ...` on stderr and a non-zero exit, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except GpuauditError as e:
            fail(str(e), e.exit_code)
        except ModuleNotFoundError as e:  # a lean (agent-only) install running a command that needs an extra
            message = missing_extra_message(e, _command_path(wrapper))
            if message is None:
                raise
            fail(message)
        except KeyboardInterrupt:
            typer.echo("gpuaudit: interrupted", err=True)
            raise typer.Exit(130) from None
        except BrokenPipeError:
            sys.stderr.close()  # `gpuaudit sql ... | head` is fine
            raise typer.Exit(0) from None
        except OSError as e:  # the machine said no (read-only, permissions, a name too long): one line, not a bug
            where = f": {e.filename}" if e.filename else ""
            fail(f"{e.strerror or e}{where}")


    return wrapper  # type: ignore[return-value]
