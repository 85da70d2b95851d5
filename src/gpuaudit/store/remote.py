"""Datasets in object storage: `--data s3://bucket/prefix` for the reading commands, and the S3 side of
`gpuaudit push`.

The local path stays as it is (os.listdir, no fsspec import); a URL takes this separate path: the files are
listed with one recursive listing per table, the compaction records are honoured exactly as on disk
(store.superseded), and DuckDB reads the objects through the same fsspec filesystem registered on its
connection, so no DuckDB extension (httpfs) is needed. Credentials and region come from the standard AWS
environment variables and config files; an S3-compatible store is reached with AWS_ENDPOINT_URL (or
`--endpoint-url` where a command has it).

Every filesystem is created by `filesystem()`: s3fs is imported only here, only when a URL is used.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from gpuaudit.errors import GpuauditError
from gpuaudit.util import jsonio
from gpuaudit.util.paths import split

if TYPE_CHECKING:
    import duckdb

# botocore's own timeouts are 60 s to connect and 60 s to read, retried: far too long for an agent's uploader
# to notice an unreachable endpoint. gpuaudit retries on top of this (push.py), with its own backoff.
_CONFIG = {"connect_timeout": 10, "read_timeout": 60, "retries": {"max_attempts": 2, "mode": "standard"}}
_S3FS_RETRIES = 2  # s3fs' retry loop around each call (its default is 5)


def _endpoint_from_env() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def filesystem(url: str, *, endpoint_url: str | None = None, cache_listings: bool = False) -> Any:
    """An s3fs filesystem for `url`. Listings are cached only for a reader (`cache_listings`), which lists once
    and then opens each file many times (DuckDB asks for its size at every open: a HEAD request each without
    the cache); a long-lived pusher must see what others changed since."""
    try:
        import s3fs
    except ModuleNotFoundError:
        raise GpuauditError(f"{url}: S3 support is not installed: pip install 'gpuaudit[s3]'") from None
    endpoint = endpoint_url or _endpoint_from_env()
    fs = s3fs.S3FileSystem(
        endpoint_url=endpoint, config_kwargs=_CONFIG, use_listings_cache=cache_listings,
    )
    fs.retries = _S3FS_RETRIES
    return fs


def describe_error(e: BaseException) -> str:
    """One line for a storage error (botocore's messages can span lines)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def exists(url: str) -> bool:
    fs = filesystem(url)
    try:
        return bool(fs.exists(split(url)[1]))
    except Exception as e:
        raise GpuauditError(f"cannot read {url}: {describe_error(e)}") from e


def register(con: duckdb.DuckDBPyConnection, url: str) -> None:
    """Let DuckDB read `url`'s objects through fsspec (instead of the httpfs extension)."""
    con.register_filesystem(filesystem(url, cache_listings=True))


def table_files(url: str, table: str) -> tuple[list[str], list[tuple[str, str]]]:
    """(readable files, [(unreadable file, reason)]) of one table under `url`, as s3:// URLs: one recursive
    listing, then the compaction records of the partitions that have any (fetched together)."""
    from gpuaudit.store.journal import JOURNAL_PREFIX, has_supersedable, superseded

    scheme, base = split(url)
    fs = filesystem(url, cache_listings=True)  # the same instance DuckDB reads through (register)
    root = f"{base}/{table}"
    fs.invalidate_cache(root)  # a process that opens the dataset again (tests, a notebook) lists afresh
    try:
        listing = fs.find(root, detail=True)
    except FileNotFoundError:
        return [], []
    except Exception as e:
        raise GpuauditError(f"cannot list {scheme}://{root}: {describe_error(e)}") from e
    # partition directory -> {name: size}; only <table>/host=*/date=*/<name>, as the local reader.
    parts: dict[str, dict[str, int]] = {}
    for key, info in listing.items():
        rel = key[len(root) + 1:].split("/")
        if len(rel) != 3 or not rel[0].startswith("host=") or not rel[1].startswith("date="):
            continue
        parts.setdefault(f"{root}/{rel[0]}/{rel[1]}", {})[rel[2]] = int(info.get("size") or 0)
    record_keys = [f"{d}/{n}" for d, names in parts.items() if has_supersedable(names) for n in names
                   if n.startswith(JOURNAL_PREFIX) and n.endswith(".json")]
    records: dict[str, list[Any]] = {}
    if record_keys:
        try:
            blobs = fs.cat(record_keys, on_error="return")
        except Exception as e:
            raise GpuauditError(f"cannot read compaction records under {scheme}://{root}: {describe_error(e)}") from e
        for key, blob in blobs.items():
            try:
                records.setdefault(key.rsplit("/", 1)[0], []).append(jsonio.loads(blob))
            except (TypeError, ValueError):  # an error object, or damaged JSON: ignored, as on disk
                continue
    good: list[str] = []
    bad: list[tuple[str, str]] = []
    for part_dir in sorted(parts):
        names = parts[part_dir]
        hidden = superseded(names, records.get(part_dir, ()))
        for name in sorted(names):
            if not name.endswith(".parquet") or name.startswith(".") or name in hidden:
                continue
            path = f"{scheme}://{part_dir}/{name}"
            # The cheap check here is the size only (reading every footer would cost a request per file);
            # deeper damage is caught when a query reads the file, as for local files.
            (bad.append((path, f"too small ({names[name]} bytes)")) if names[name] < 12 else good.append(path))
    return good, bad
