"""The command line. It only parses arguments and calls library functions; each area of the product
registers its commands from its own module here. Importing this package never imports polars,
pynvml or the Prometheus client: command bodies import the library lazily."""

from __future__ import annotations

import typer

from gpuaudit import __version__

app = typer.Typer(
    name="gpuaudit",
    help="Measure real GPU utilization (SM activity, not runtime hours) and turn it into a "
    "cloud / hybrid / on-prem decision.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuaudit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """gpuaudit: real GPU utilization, and what it means for cloud vs on-prem."""
    from gpuaudit.util import logsetup

    logsetup.setup()


# Each module adds its commands to `app` on import.
from gpuaudit.cli import agent, analyze, importer, push, report, selftest, simulate, store  # noqa: E402,F401


def main() -> None:
    """The console script: usage errors are one `gpuaudit: error: ...` line, as every other error."""
    import sys

    from gpuaudit.cli._usage import run

    sys.exit(run(app))
