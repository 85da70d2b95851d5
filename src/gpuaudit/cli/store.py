"""CLI for the store: `gpuaudit sql` and `gpuaudit compact`."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuaudit.cli import app
from gpuaudit.cli._common import DataOption, data_path, data_source, fail, handle_errors
from gpuaudit.util import logsetup
from gpuaudit.util.paths import expand_user


@app.command()
@handle_errors
def sql(
    query: str = typer.Argument(None, help="A read-only SQL statement over the views `samples` and `processes`."),
    file: Path = typer.Option(
        None, "--file", "-f", help="Read the query from a file, or name a canned query (e.g. sql/fleet_summary.sql)."
    ),
    fmt: str = typer.Option("table", "--format", help="Output format: table, csv, json or parquet."),
    out: Path = typer.Option(None, "--out", "-o", help="Write the result to this file (required for parquet)."),
    views: bool = typer.Option(False, "--views", help="Print CREATE VIEW statements for the DuckDB CLI and exit."),
    list_queries: bool = typer.Option(False, "--list", help="List the canned queries shipped with gpuaudit."),
    data: Path = DataOption,
) -> None:
    """Query the dataset with SQL (DuckDB). Read-only: writes, ATTACH, COPY and SET are refused.

    Examples: gpuaudit sql "SELECT host, count(*) FROM samples GROUP BY host";
    gpuaudit sql --file sql/fleet_summary.sql --format json.
    """
    from gpuaudit import store
    from gpuaudit.flows import require_dataset
    from gpuaudit.store import sqlquery
    from gpuaudit.util import resources

    logsetup.setup()  # store warnings (skipped files) as `gpuaudit: warning: ...` lines
    if list_queries:
        for name in resources.sql_names():
            typer.echo(name)
        return
    root = data_source(data)
    require_dataset(root)
    from gpuaudit.analysis.stage1.streams import streams_views

    # The connection can read the dataset's files, nothing else. It also sees the analyzer's de-duplicated
    # streams, so the canned stage-1 queries run as they are (the analyzer materializes the same SQL as a table).
    ds = store.open_dataset(root, strict=True, views=streams_views())
    if views:
        typer.echo(ds.view_sql(), nl=False)
        return
    if file is not None:
        if query:
            fail("give a query or --file, not both")
        text = _read_query_file(file)
    elif query:
        text = query
    else:
        fail("no query: give one as an argument, or --file, --views or --list")
    table = sqlquery.run_query(ds, text)
    rendered = sqlquery.write_output(table, fmt, out)
    if rendered is not None:
        typer.echo(rendered, nl=False)


def _read_query_file(file: Path) -> str:
    from gpuaudit.util import resources

    file = expand_user(file, "--file")
    if file.exists() and not file.is_dir():  # a regular file, or a device or pipe (/dev/stdin, /dev/null)
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            fail(f"--file {file} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})")
        except OSError as e:
            fail(f"cannot read --file {file}: {e.strerror or e}")
        if not text.strip():
            fail(f"empty query file: {file}")
        return text
    # `--file sql/NAME.sql` also finds the canned queries shipped inside the package, from anywhere.
    if file.parent.name in ("sql", "") and file.suffix in (".sql", ""):
        return resources.load_sql(file.stem)
    fail(f"no such file: {file}")
    raise AssertionError


@app.command()
@handle_errors
def compact(
    data: Path = DataOption,
    table: str = typer.Option(None, "--table", help="Only this table: gpu_samples or gpu_processes."),
    host: str = typer.Option(None, "--host", help="Only this host's partitions."),
    date: str = typer.Option(None, "--date", help="Only this date's partitions (YYYY-MM-DD)."),
    no_wait: bool = typer.Option(False, "--no-wait", help="Fail at once if another compaction of the dataset runs "
                                 "(default: wait for it to finish)."),
) -> None:
    """Merge each partition's small files into one (safe to interrupt; readers never see rows twice)."""
    from gpuaudit import store

    logsetup.setup()  # store warnings (skipped files) as `gpuaudit: warning: ...` lines
    root = data_path(data)
    if not root.is_dir():
        fail(f"no dataset at {root}")
    stats = store.compact(root, table=table, host=host, date=date, wait=not no_wait)
    saved = stats.bytes_before - stats.bytes_after
    typer.echo(
        f"compacted {stats.partitions} partition(s): {stats.files_before} files -> {stats.files_after}, "
        f"{stats.bytes_before:,} -> {stats.bytes_after:,} bytes ({saved:,} saved)"
        + (f"; finished {stats.recovered} interrupted compaction(s)" if stats.recovered else "")
        + (f"; left {len(stats.skipped)} unreadable or foreign file(s) in place" if stats.skipped else "")
    )
