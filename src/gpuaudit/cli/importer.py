"""CLI for importers: `gpuaudit import prometheus`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from gpuaudit.cli import app
from gpuaudit.cli._common import DataOption, data_path, handle_errors
from gpuaudit.util.paths import local_path

import_app = typer.Typer(
    help="Import utilization history from existing monitoring (no agent needed).",
    no_args_is_help=True,
)
app.add_typer(import_app, name="import")


@import_app.command("prometheus")
@handle_errors
def prometheus(
    url: str = typer.Option(..., "--url", envvar="GPUAUDIT_PROM_URL",
                            help="Base URL of Prometheus (or Thanos, Mimir, VictoriaMetrics), e.g. "
                                 "http://prometheus:9090 (env GPUAUDIT_PROM_URL)."),
    start: str = typer.Option("-30d", "--start",
                              help="Window start: ISO date/datetime (UTC unless it has an offset), "
                                   "a relative offset like -30d / -6h, or now."),
    end: str = typer.Option("now", "--end", help="Window end, same forms as --start."),
    step: str = typer.Option("60s", "--step", help="Row length: each row is the average over one step "
                                                   "(60s, 5m, 1h)."),
    selector: str = typer.Option("", "--selector",
                                 help='Extra label matchers for every query, e.g. \'job="dcgm-exporter"\'.'),
    metric: list[str] = typer.Option([], "--metric", help="Override a metric: FIELD=NAME[:UNIT][,NAME...] "
                                                          "(repeatable; FIELD= turns it off). See docs."),
    label: list[str] = typer.Option([], "--label", help="Override label names: FIELD=LABEL[,LABEL...] "
                                                        "(repeatable)."),
    exporter: str = typer.Option(None, "--exporter",
                                 help="Exporter preset: dcgm (NVIDIA dcgm-exporter), jobstats (Princeton jobstats' "
                                      "GPU exporter), nvidia-smi (utkuozdemir/nvidia_gpu_exporter). Default: "
                                      "detected from the metric names on the server."),
    exporter_pod: str = typer.Option(None, "--exporter-pod",
                                     help="Regex of pod names that are the exporter itself, not a workload "
                                          "('' keeps every pod; default: the preset's, dcgm-exporter)."),
    bearer_token_file: Path = typer.Option(None, "--bearer-token-file",
                                           help="File holding a bearer token (else env GPUAUDIT_PROM_TOKEN)."),
    user: str = typer.Option(None, "--user", help="Basic-auth user."),
    password: str = typer.Option(None, "--password",
                                 help="Basic-auth password; prefer env GPUAUDIT_PROM_PASSWORD (visible to "
                                      "other users in the process list otherwise)."),
    ca_file: Path = typer.Option(None, "--ca-file", help="CA bundle to verify the server's TLS certificate."),
    insecure: bool = typer.Option(False, "--insecure", help="Do not verify TLS certificates."),
    timeout: float = typer.Option(30.0, "--timeout",
                                  help="Seconds one request may take in all: connecting, headers and body (a "
                                       "server that answers slowly is cut off too); with retries, "
                                       "timeout x (retries + 1)."),
    retries: int = typer.Option(3, "--retries", help="Retries on connection errors, timeouts, 429 and 5xx."),
    max_points: int = typer.Option(10_000, "--max-points",
                                   help="Points per series per query (Prometheus allows 11,000)."),
    max_response_mb: float = typer.Option(256, "--max-response-mb",
                                          help="Largest answer accepted from the server, MiB (decompressed): "
                                               "more is an error, never an exhausted memory."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    data: Path = DataOption,
) -> None:
    """Import GPU exporter history from Prometheus: interval averages per GPU, MIG slice and pod.

    Example: gpuaudit import prometheus --url http://prometheus:9090 --start -30d --step 5m
    """
    from gpuaudit.importer.mapping import build_mapping
    from gpuaudit.importer.promclient import transport
    from gpuaudit.importer.prometheus import import_prometheus, summary
    from gpuaudit.importer.timespec import parse_step_s, parse_time
    from gpuaudit.util.textsafe import printable

    if bearer_token_file is not None:
        bearer_token_file = local_path(bearer_token_file, "--bearer-token-file", "a file")
    if ca_file is not None:
        ca_file = local_path(ca_file, "--ca-file", "a file")
    step_s = parse_step_s(step)
    t_start, t_end = parse_time(start, option="--start"), parse_time(end, option="--end")
    mapping = build_mapping(metric, label, selector=selector, exporter_pod=exporter_pod, exporter=exporter)
    conn = transport(url, bearer_token_file=bearer_token_file, user=user, password=password, ca_file=ca_file,
                     insecure=insecure, timeout_s=timeout, retries=retries, max_response_mb=max_response_mb)
    bar: dict[str, Any] = {}

    def progress(done: int, total: int) -> None:
        if quiet:
            return
        if "bar" not in bar:
            bar["bar"] = typer.progressbar(length=total, label="querying", file=sys.stderr)
            bar["bar"].__enter__()
        bar["bar"].update(1)
        if done == total:
            bar["bar"].__exit__(None, None, None)

    root = data_path(data)
    try:
        result = import_prometheus(root, conn, mapping, t_start, t_end, step_s, max_points=max_points,
                                   progress=progress)
    finally:
        if "bar" in bar and not bar["bar"].finished:
            bar["bar"].__exit__(None, None, None)  # end the bar's line before an error message
    window = f"{result.start:%Y-%m-%dT%H:%M:%SZ} .. {result.end:%Y-%m-%dT%H:%M:%SZ}"
    typer.echo(f"imported {result.sample_rows} sample rows ({result.gpus} GPUs/MIG slices on {result.hosts} "
               f"hosts) and {result.process_rows} process rows, {window} at {step_s}s, into {printable(root)}")
    if result.replaced_rows:
        typer.echo(f"replaced {result.replaced_rows} rows of earlier imports of this window")
    lines, notes = summary(result)
    for line in lines:
        typer.echo(printable(line))
    for note in notes:
        typer.echo(f"note: {printable(note)}", err=True)
