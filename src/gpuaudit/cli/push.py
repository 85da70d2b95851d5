"""`gpuaudit push`: argument parsing only; the work is in gpuaudit.push."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuaudit.cli import app
from gpuaudit.cli._common import DataOption, data_path, handle_errors
from gpuaudit.util import logsetup
from gpuaudit.util.paths import collection_target

EndpointOption = typer.Option(
    None, "--endpoint-url",
    help="S3-compatible endpoint (MinIO, Ceph, ...); default: $AWS_ENDPOINT_URL, else AWS.",
)
DeleteOption = typer.Option(
    False, "--delete-after-upload",
    help="Delete each local data file once the target has confirmed its copy (off: the node keeps its data).",
)


@app.command("push")
@handle_errors
def push_cmd(
    to: str = typer.Option(..., "--to", metavar="URL",
                           help="Collection target: a shared directory, or s3://bucket/prefix."),
    data: Path | None = DataOption,
    endpoint_url: str | None = EndpointOption,
    delete_after_upload: bool = DeleteOption,
    retries: int = typer.Option(3, "--retries", help="Retries of each remote operation (backoff 1 s, 2 s, 4 s ...)."),
    follow: bool = typer.Option(False, "--follow", hidden=True,
                                help="Push at each line on stdin and at its end (used by `agent run --upload`)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", hidden=True, help="With --follow: log every round."),
) -> None:
    """Ship this node's finished dataset files to a shared directory or S3: idempotent (a file the target already
    holds is not sent again), resumable (run it again after a failure), never deletes local data unless asked.
    While another push of the same data to the same target runs, it says "skipped: ..." and exits 0.

    Examples: gpuaudit push --data /var/lib/gpuaudit --to s3://audit-bucket/fleet;
    gpuaudit push --to /shared/gpuaudit (from cron, e.g. hourly).
    """
    from gpuaudit import push

    to = collection_target(to, "--to")
    root = data_path(data)
    if follow:
        import signal

        from gpuaudit.agent import log

        # The agent's child: it stops when the agent closes the pipe (after its last flush, or when it dies),
        # not on the SIGTERM/SIGINT a service manager or a terminal sends the whole group.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        logsetup.setup(events=True, verbose=verbose)
        push.follow(root, to, endpoint_url=endpoint_url, delete_after_upload=delete_after_upload, retries=retries,
                    event=log.event)
        return
    try:
        stats = push.push(root, to, endpoint_url=endpoint_url, delete_after_upload=delete_after_upload,
                          retries=retries)
    except push.PushBusy as e:  # cron overlapping the agent's uploader: nothing wrong, nothing to do
        typer.echo(f"skipped: {e}")
        return
    typer.echo(stats.summary(to))
