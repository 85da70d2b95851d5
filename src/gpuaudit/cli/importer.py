"""CLI for importers: `gpuaudit import prometheus`, `import slurm`, `import kubernetes`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from gpuaudit.cli import app
from gpuaudit.cli._common import DataOption, data_path, handle_errors
from gpuaudit.errors import GpuauditError
from gpuaudit.util.paths import local_path

import_app = typer.Typer(
    help="Import utilization history from existing monitoring (no agent needed).",
    no_args_is_help=True,
)
app.add_typer(import_app, name="import")

# How `import prometheus` and `import kubernetes` reach the Prometheus server (the same options for both).
BearerOption = typer.Option(None, "--bearer-token-file",
                            help="File holding a bearer token (else env GPUAUDIT_PROM_TOKEN).")
UserOption = typer.Option(None, "--user", help="Basic-auth user.")
PasswordOption = typer.Option(None, "--password",
                              help="Basic-auth password; prefer env GPUAUDIT_PROM_PASSWORD (visible to other "
                                   "users in the process list otherwise).")
CaFileOption = typer.Option(None, "--ca-file", help="CA bundle to verify the server's TLS certificate.")
InsecureOption = typer.Option(False, "--insecure", help="Do not verify TLS certificates.")


def _connect(url: str, bearer_token_file: Path | None, user: str | None, password: str | None,
             ca_file: Path | None, insecure: bool, **transport_kw: Any) -> Any:
    """The Prometheus transport from the connection options (the token and CA files must be local files)."""
    from gpuaudit.importer.promclient import transport

    if bearer_token_file is not None:
        bearer_token_file = local_path(bearer_token_file, "--bearer-token-file", "a file")
    if ca_file is not None:
        ca_file = local_path(ca_file, "--ca-file", "a file")
    return transport(url, bearer_token_file=bearer_token_file, user=user, password=password, ca_file=ca_file,
                     insecure=insecure, **transport_kw)


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
                                      "GPU exporter), nvidia-smi (utkuozdemir/nvidia_gpu_exporter), gpuaudit (the "
                                      "agent's --metrics-listen). Default: "
                                      "detected from the metric names on the server."),
    exporter_pod: str = typer.Option(None, "--exporter-pod",
                                     help="Regex of pod names that are the exporter itself, not a workload "
                                          "('' keeps every pod; default: the preset's, dcgm-exporter)."),
    bearer_token_file: Path = BearerOption,
    user: str = UserOption,
    password: str = PasswordOption,
    ca_file: Path = CaFileOption,
    insecure: bool = InsecureOption,
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
    from gpuaudit.importer.prometheus import import_prometheus, summary
    from gpuaudit.importer.prometheus.mapping import build_mapping
    from gpuaudit.importer.timespec import parse_step_s, parse_time
    from gpuaudit.util.textsafe import printable

    step_s = parse_step_s(step)
    t_start, t_end = parse_time(start, option="--start"), parse_time(end, option="--end")
    mapping = build_mapping(metric, label, selector=selector, exporter_pod=exporter_pod, exporter=exporter)
    conn = _connect(url, bearer_token_file, user, password, ca_file, insecure, timeout_s=timeout, retries=retries,
                    max_response_mb=max_response_mb)
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


def _allocation_summary(what: str, s: Any, root: Path, unit: str) -> None:
    """The import's outcome on stdout; skipped jobs and hosts without telemetry as `gpuaudit: warning:` lines
    (the one warning format, util/logsetup's)."""
    import logging

    from gpuaudit.util.fmt import count
    from gpuaudit.util.textsafe import printable

    log = logging.getLogger("gpuaudit")
    typer.echo(f"imported {count(s.rows, 'allocation row')} ({count(s.jobs, unit)}, {s.gpu_hours:,.1f} GPU-hours "
               f"allocated) from {what} into {printable(root)}")
    if s.replaced:
        typer.echo(f"replaced {count(s.replaced, 'row')} of earlier imports")
    for reason, n in sorted(s.skipped.items()):
        example = s.examples.get(reason)
        log.warning("skipped %s: %s%s", count(n, unit), reason, f" (e.g. {example})" if example else "")
    for warning in s.warnings:
        log.warning("%s", warning)
    if s.unknown_hosts:
        shown = ", ".join(s.unknown_hosts[:5])
        more = f" and {len(s.unknown_hosts) - 5} more" if len(s.unknown_hosts) > 5 else ""
        n_hosts = len(s.unknown_hosts)
        log.warning("%s %s allocations but no telemetry in the dataset (%s%s): kept, and reported by analyze as "
                    "allocations outside the ledger", count(n_hosts, "host"), "has" if n_hosts == 1 else "have",
                    shown, more)


@import_app.command("slurm")
@handle_errors
def slurm(
    sacct_file: str = typer.Option(None, "--sacct-file",
                                   help="sacct --parsable2 or sacct --json output to read ('-': standard "
                                        "input). Without it, gpuaudit runs sacct itself (it must be on PATH)."),
    start: str = typer.Option("-30d", "--start", help="When running sacct: window start (ISO, -30d, now)."),
    end: str = typer.Option("now", "--end", help="When running sacct: window end, same forms."),
    tz: str = typer.Option(None, "--tz", help="Zone of sacct's times that carry no offset (sacct prints the "
                                              "local time of the machine it ran on), e.g. Europe/Berlin; "
                                              "default: this machine's zone."),
    now: str = typer.Option("now", "--now", help="End given to running jobs (End=Unknown): ISO time or now."),
    data: Path = DataOption,
) -> None:
    """Import Slurm allocations (sacct AllocTRES gres/gpu) into gpu_allocations: what the scheduler says each
    job held, per job per host. The sacct --parsable2 output must start with its header line (no --noheader):
    the header names the columns. sacct --json output (told by its first character) carries its step records,
    which say how a multi-node job's GPUs were spread over its nodes.

    Example: sacct --allusers --parsable2 --format=JobID,JobIDRaw,User,Account,Partition,State,Start,End,\
NodeList,AllocTRES -S 2026-01-01 > jobs.txt; gpuaudit import slurm --sacct-file jobs.txt --tz Europe/Berlin
    """
    from gpuaudit.importer.slurm import import_sacct, run_sacct, zone
    from gpuaudit.importer.timespec import parse_time

    zone_info = zone(tz)
    t_now = parse_time(now, option="--now")
    if sacct_file is None:
        text = run_sacct(parse_time(start, option="--start"), parse_time(end, option="--end"))
        what = "sacct"
    elif sacct_file == "-":
        text, what = sys.stdin.read(), "standard input"
    else:
        path = local_path(sacct_file, "--sacct-file", "a file")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise GpuauditError(f"--sacct-file {path}: not UTF-8 text (is it sacct --parsable2 or --json "
                                "output?)") from None
        except OSError as e:
            raise GpuauditError(f"cannot read --sacct-file {path}: {e.strerror or e}") from None
        what = str(path)
    root = data_path(data)
    summary = import_sacct(root, text, tz=zone_info, now=t_now)
    _allocation_summary(what, summary, root, "job")


@import_app.command("kubernetes")
@handle_errors
def kubernetes(
    url: str = typer.Option(..., "--url", envvar="GPUAUDIT_PROM_URL",
                            help="Base URL of the Prometheus that scrapes kube-state-metrics (env "
                                 "GPUAUDIT_PROM_URL)."),
    start: str = typer.Option("-30d", "--start", help="Window start: ISO, a relative offset like -30d, or now."),
    end: str = typer.Option("now", "--end", help="Window end, same forms as --start."),
    step: str = typer.Option("60s", "--step", help="Resolution of pod start and end (60s, 5m)."),
    selector: str = typer.Option("", "--selector", help='Extra label matchers, e.g. \'cluster="prod"\'.'),
    bearer_token_file: Path = BearerOption,
    user: str = UserOption,
    password: str = PasswordOption,
    ca_file: Path = CaFileOption,
    insecure: bool = InsecureOption,
    timeout: float = typer.Option(30.0, "--timeout", help="Seconds to wait for each HTTP answer."),
    data: Path = DataOption,
) -> None:
    """Import Kubernetes GPU allocations (kube-state-metrics requests of nvidia.com/gpu and MIG resources, for
    running pods) through Prometheus into gpu_allocations.

    Example: gpuaudit import kubernetes --url http://prometheus:9090 --start -30d
    """
    from gpuaudit.importer.kubernetes import import_kubernetes
    from gpuaudit.importer.timespec import parse_step_s, parse_time

    step_s = parse_step_s(step)
    t_start, t_end = parse_time(start, option="--start"), parse_time(end, option="--end")
    conn = _connect(url, bearer_token_file, user, password, ca_file, insecure, timeout_s=timeout)
    root = data_path(data)
    summary = import_kubernetes(root, conn, t_start, t_end, step_s, selector=selector)
    _allocation_summary(url, summary, root, "pod")
