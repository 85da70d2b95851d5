"""The dataset root and its layout: where a table's partitions live, the staging folder, the DuckDB session
settings every reader and writer uses, and the local-vs-object-storage rule for writers.

    <root>/gpu_samples/host=<host>/date=<YYYY-MM-DD>/<stem>.parquet
    <root>/gpu_processes/host=<host>/date=<YYYY-MM-DD>/<stem>.parquet
    <root>/<name>.json                      sidecars (e.g. simulation.json)
    <root>/.staging/                        files being written (never read)
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import duckdb

from gpuaudit import schema
from gpuaudit.errors import GpuauditError
from gpuaudit.store import remote
from gpuaudit.util import paths

if TYPE_CHECKING:
    pass

log = logging.getLogger("gpuaudit.store")

DEFAULT_DATA = "gpuaudit-data"
STAGING = ".staging"
PUSH_TARGET = ".gpuaudit-push-target"  # marks a directory `gpuaudit push` collects into
STALE_STAGING_S = 24 * 3600
SORT_KEYS = {schema.SAMPLES: ("gpu_uuid", "mig_instance", "ts"), schema.PROCESSES: ("gpu_uuid", "ts", "pid"),
             schema.ALLOCATIONS: ("start_ts", "job_id")}


def data_root(path: Path | str | None = None) -> Path:
    """The dataset root: an explicit path, else $GPUAUDIT_DATA, else ./gpuaudit-data."""
    given = path or os.environ.get("GPUAUDIT_DATA")
    if not given:
        return Path(DEFAULT_DATA)
    root = paths.expand_user(given, "--data")
    paths.check_name_lengths(root, "--data")
    return root


def connect(threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the session settings gpuaudit relies on (UTC)."""
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    # Several queries over the same thousands of files (the analyzer runs three): read each footer once.
    con.execute("SET parquet_metadata_cache = true")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    return con


def sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def partition_dir(root: Path, table: str, host: str, date: str) -> Path:
    # Percent-encoding keeps any hostname a single safe path component; DuckDB decodes it on read.
    return Path(root) / table / f"host={quote(host, safe='-_.~')}" / f"date={date}"


def local_root(root: Path | str) -> Path:
    """`root` as a local directory for writing. A URL is refused: a writer must never create a local folder
    named `s3:` (Path("s3://b/p") is the relative path s3:/b/p)."""
    url = paths.as_url(root)
    if url:
        raise GpuauditError(f"{url} is object storage: this command writes a local dataset; write it locally and "
                            f"ship it with `gpuaudit push --to {url}` (or `gpuaudit agent run --upload {url}`)")
    return Path(root)


def dataset_exists(root: Path | str) -> bool:
    """Whether `root` (a directory or an s3:// URL) exists; an empty one reads as an empty dataset."""
    url = paths.as_url(root)
    return remote.exists(url) if url else Path(root).exists()


def staging_dir(root: Path) -> Path:
    d = Path(root) / STAGING
    d.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for stale in d.iterdir():  # left by a crashed writer
        try:
            if now - stale.stat().st_mtime > STALE_STAGING_S:
                stale.unlink()
        except OSError:
            pass
    return d


def new_stem(prefix: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{prefix}-{stamp}-{uuid.uuid4().hex[:8]}"


def first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
