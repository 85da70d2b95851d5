"""CLI for the store: `gpuaudit sql` and `gpuaudit compact`."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from gpuaudit.cli import app
from gpuaudit.cli._common import DataOption, data_path, data_source, fail, handle_errors
from gpuaudit.util.fmt import count
from gpuaudit.util.paths import expand_user

# What one `gpuaudit sql` may take from the machine by default: a query is the user's, so it gets bounds a shared
# analysis host can live with (and spills only into a private directory: store/sqlquery.private_spill_dir).
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_MEMORY_LIMIT = "50%"  # of this machine's memory (DuckDB's own default is 80 %)
TERMINAL_ROWS = 1000  # table output to a terminal shows this many rows unless --limit says otherwise


@app.command()
@handle_errors
def sql(
    query: str = typer.Argument(None, help="A read-only SQL statement over the views `samples` and `processes`. "
                                "One that starts with `--` (a comment) goes after `--`: gpuaudit sql -- '-- c ...'."),
    file: Path = typer.Option(
        None, "--file", "-f", help="Read the query from a file, or name a canned query (e.g. sql/fleet_summary.sql)."
    ),
    fmt: str = typer.Option("table", "--format", help="Output format: table, csv, json or parquet."),
    out: Path = typer.Option(None, "--out", "-o", help="Write the result to this file (required for parquet)."),
    limit: int = typer.Option(None, "--limit", min=0, show_default=False,
                              help=f"Return at most this many rows; 0: all (default: {TERMINAL_ROWS} for table output "
                              "to a terminal, with a note when rows were cut; all otherwise)."),
    timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout", min=0,
                                  help="Stop the query after this many seconds; 0: no limit."),
    memory_limit: str = typer.Option(DEFAULT_MEMORY_LIMIT, "--memory-limit",
                                     help="Memory the query may use: a share of this machine's (50%) or a size "
                                     "(4GB, 512MiB); beyond it DuckDB spills to a private temporary directory."),
    views: bool = typer.Option(False, "--views", help="Print CREATE VIEW statements for the DuckDB CLI and exit."),
    list_queries: bool = typer.Option(False, "--list", help="List the canned user queries, a line each "
                                     "(the analyzer's own sql/analysis_*.sql are not listed)."),
    data: Path = DataOption,
) -> None:
    """Query the dataset with SQL (DuckDB). Read-only: writes, ATTACH, COPY and SET are refused.

    Examples: gpuaudit sql "SELECT host, count(*) FROM samples GROUP BY host";
    gpuaudit sql --file sql/fleet_summary.sql --format json;
    gpuaudit sql -- "-- GPUs per host
    SELECT host, count(DISTINCT gpu_uuid) FROM samples GROUP BY host".
    """
    from gpuaudit import store
    from gpuaudit.flows import require_dataset
    from gpuaudit.store import sqlquery
    from gpuaudit.util import resources

    if list_queries:
        for name, about in resources.user_queries():
            typer.echo(f"{name:<16} {about}")
        return
    memory_bytes = sqlquery.memory_limit_bytes(memory_limit)
    root = data_source(data)
    require_dataset(root)
    from gpuaudit.analysis.stage1.streams import user_views

    if file is not None:
        if query:
            fail("give a query or --file, not both")
        text = _read_query_file(file)
    elif query:
        text = query
    elif not views:
        fail("no query: give one as an argument, or --file, --views or --list")
    if limit is None and fmt == "table" and out is None and sys.stdout.isatty():
        limit = TERMINAL_ROWS
    with sqlquery.private_spill_dir() as spill:
        # The connection can read the dataset's files, nothing else. It also sees the analyzer's de-duplicated
        # streams and GPU-hours (`gpu_hours`), so the user queries agree with `analyze` and the canned stage-1
        # queries run as they are (the analyzer materializes the same SQL as tables).
        ds = store.open_dataset(root, strict=True, views=user_views(),
                                settings=sqlquery.session_settings(memory_bytes, spill))
        ds.timeout_s = timeout or None
        try:
            if views:
                typer.echo(ds.view_sql(), nl=False)
                return
            table = sqlquery.run_query(ds, text, limit=limit + 1 if limit else None)
        finally:
            ds.close()
    if limit and table.num_rows > limit:
        table = table.slice(0, limit)
        typer.echo(f"gpuaudit: note: showing the first {limit:,} rows; more were cut (--limit N for more, "
                   "--limit 0 for all)", err=True)
    rendered = sqlquery.write_output(table, fmt, out)
    if rendered is not None:
        typer.echo(rendered, nl=False)


def _read_query_file(file: Path) -> str:
    from gpuaudit.util import resources
    from gpuaudit.util.smallfile import QUERY_MAX_BYTES, read_small_text

    file = expand_user(file, "--file")
    if file.exists():
        text = read_small_text(file, "--file", QUERY_MAX_BYTES)  # a regular file of a sane size, nothing else
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

    root = data_path(data)
    if not root.is_dir():
        fail(f"no dataset at {root}")
    stats = store.compact(root, table=table, host=host, date=date, wait=not no_wait)
    saved = stats.bytes_before - stats.bytes_after
    typer.echo(
        f"compacted {count(stats.partitions, 'partition')}: {stats.files_before} files -> {stats.files_after}, "
        f"{stats.bytes_before:,} -> {stats.bytes_after:,} bytes ({saved:,} saved)"
        + (f"; finished {count(stats.recovered, 'interrupted compaction')}" if stats.recovered else "")
        + (f"; left {count(len(stats.skipped), 'unreadable or foreign file')} in place" if stats.skipped else "")
    )
