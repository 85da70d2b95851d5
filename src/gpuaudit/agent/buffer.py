"""Rows waiting to be flushed, and the flusher that writes them through the store's atomic writer.

Memory stays bounded whatever happens: past `max_rows` the oldest rows are dropped and counted. A failed
write (disk full, directory gone) keeps the rows and retries with exponential backoff. Each attempt has a new
file name, and a retry first removes what an attempt that half-succeeded published: no second copy (and no name
a compaction may have merged, whose record would hide the retry).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuaudit import schema
from gpuaudit.agent.log import event
from gpuaudit.errors import GpuauditError

BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 300.0
_DROP_LOG_EVERY_S = 60.0

Writer = Callable[[Path, str, dict[str, list[Any]], str], Any]  # (root, table, columns, name)


def _remove_attempt(root: Path, host: str, name: str) -> None:
    """Remove what a failed flush published under `name` (its rows are still buffered and go out again). If a
    compaction merged it already, the new attempt repeats those rows: the analyzer counts overlapping rows once."""
    for table in schema.TABLES:
        for f in (Path(root) / table).glob(f"host=*/date=*/{name}.parquet"):  # the name is this agent's alone
            with contextlib.suppress(OSError):
                f.unlink()


def store_writer(root: Path, table: str, columns: dict[str, list[Any]], name: str) -> Any:
    from gpuaudit.store import write_table  # imports duckdb: only once the first flush happens

    return write_table(root, table, columns, name=name)


def run_forked(fn: Callable[[], Any]) -> None:
    """Run `fn` in a forked child and wait for it; its exception comes back as a GpuauditError.

    Why: a DuckDB connection costs ~30 MB of RSS that the allocator never gives back; writing from a
    short-lived child keeps the long-lived agent small, and a crash inside the writer (OOM, segfault)
    cannot take the sampler down. Files appear atomically either way, so a child that outlives a killed
    parent only completes a write the parent had already started.
    """
    import duckdb  # noqa: F401  - imported once in the parent, shared copy-on-write by every child

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into the agent's loop
        code = 0
        try:
            os.close(read_fd)
            fn()
        except BaseException as e:
            code = 1
            with contextlib.suppress(OSError):
                os.write(write_fd, (str(e).splitlines()[0] if str(e) else type(e).__name__).encode()[:2000])
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        message = pipe.read().decode("utf-8", "replace")
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise GpuauditError(message or f"writer process failed (wait status {status})")


def columnar(rows: list[dict[str, Any]], table: str) -> dict[str, list[Any]]:
    names = schema.column_names(table)
    return {n: [r.get(n) for r in rows] for n in names}


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:80] or "host"


class RowBuffer:
    def __init__(self, max_rows: int = 50_000) -> None:
        self.max_rows = max_rows
        self.samples: deque[dict[str, Any]] = deque()
        self.processes: deque[dict[str, Any]] = deque()
        self.dropped = 0
        self._last_drop_log = 0.0

    def add(self, samples: list[dict[str, Any]], processes: list[dict[str, Any]]) -> None:
        self.samples.extend(samples)
        self.processes.extend(processes)
        over = len(self.samples) + len(self.processes) - self.max_rows
        if over > 0:
            self._drop(over)

    def _drop(self, n: int) -> None:
        """Drop the oldest rows: samples first by timestamp, then processes no older than them."""
        dropped = 0
        while dropped < n and (self.samples or self.processes):
            if self.samples and (not self.processes or self.samples[0]["ts"] <= self.processes[0]["ts"]):
                self.samples.popleft()
            else:
                self.processes.popleft()
            dropped += 1
        first = self.dropped == 0
        self.dropped += dropped
        now = time.monotonic()
        if first or now - self._last_drop_log >= _DROP_LOG_EVERY_S:  # one line a minute, not per interval
            self._last_drop_log = now
            event("buffer_full", logging.WARNING, dropped_now=dropped, dropped_total=self.dropped,
                  max_rows=self.max_rows)

    def __len__(self) -> int:
        return len(self.samples) + len(self.processes)


class Flusher:
    def __init__(self, root: Path, host: str, buffer: RowBuffer, *, writer: Writer = store_writer,
                 clock: Callable[[], float] = time.monotonic, fork: bool = False,
                 on_flush: Callable[[], None] | None = None) -> None:
        self.fork = fork and hasattr(os, "fork")
        self.on_flush = on_flush  # called after each successful flush (agent run --upload ships the new files)
        self.root = root
        self.host = host
        self.buffer = buffer
        self.writer = writer
        self.clock = clock
        self.batch_name: str | None = None
        self.failures = 0
        self.retry_at = 0.0
        self.last_flush: datetime | None = None
        self.last_error: str | None = None
        self.rows_written = 0
        self.flushes = 0  # successful flushes and failed attempts, for the metrics endpoint
        self.flush_failures = 0
        self._seq = 0

    def due_for_retry(self) -> bool:
        return self.clock() >= self.retry_at

    def flush(self) -> bool:
        """Write everything buffered; True when the buffer is empty afterwards."""
        buf = self.buffer
        if not buf:
            return True
        if self.batch_name is not None:
            # A retry: a new name, and the failed attempt's files (if any landed) removed. Rewriting the same name
            # could land on a name a compaction merged meanwhile, and its record would hide the new rows.
            _remove_attempt(self.root, self.host, self.batch_name)
        self._seq += 1
        first = min([r["ts"] for r in list(buf.samples)[:1] + list(buf.processes)[:1]])
        self.batch_name = (f"agent-{_safe(self.host)}-{first.astimezone(UTC):%Y%m%dT%H%M%S%f}Z"
                           f"-{self._seq}")
        samples, processes = list(buf.samples), list(buf.processes)
        name = self.batch_name

        def write() -> None:
            # Processes first: a crash between the two writes leaves attribution without its sample
            # rows, never sample rows whose processes are missing.
            if processes:
                self.writer(self.root, schema.PROCESSES, columnar(processes, schema.PROCESSES), name)
            if samples:
                self.writer(self.root, schema.SAMPLES, columnar(samples, schema.SAMPLES), name)

        try:
            run_forked(write) if self.fork else write()
        except Exception as e:  # disk full, unwritable, anything: keep the rows, retry later, never crash
            self.failures += 1
            self.flush_failures += 1
            delay = min(BACKOFF_MIN_S * 2 ** (self.failures - 1), BACKOFF_MAX_S)
            self.retry_at = self.clock() + delay
            self.last_error = str(e).splitlines()[0] if str(e) else type(e).__name__
            event("flush_failed", logging.ERROR, error=self.last_error, buffered_rows=len(buf),
                  retry_in_s=delay, failures=self.failures)
            return False
        # Rows added since the snapshot are the ones left in the deques past len(snapshot).
        for _ in samples:
            buf.samples.popleft()
        for _ in processes:
            buf.processes.popleft()
        if self.failures:
            event("flush_recovered", after_failures=self.failures)
        self.failures = 0
        self.retry_at = 0.0
        self.batch_name = None
        self.last_error = None
        self.last_flush = datetime.now(UTC)
        self.rows_written += len(samples) + len(processes)
        self.flushes += 1
        event("flush", logging.DEBUG, samples=len(samples), processes=len(processes), root=self.root)
        if self.on_flush is not None:
            self.on_flush()
        return True
