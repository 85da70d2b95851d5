"""The agent's life cycle: tick on a monotonic clock, sample, buffer, flush; survive faults; exit cleanly.

- Ticks are scheduled on time.monotonic(); a tick that comes late (overrun) is recorded as a longer
  `interval_s` of the next rows, never hidden, and missed ticks are skipped rather than bunched.
- Rows are stamped in UTC by `Stamper`: wall-clock time, but never earlier than the previous stamp plus
  the monotonic time elapsed, so a wall-clock step backwards neither duplicates nor reorders rows (and a
  step forward drops none). The last stamp is kept in the status file, so a restart continues after it.
- SIGTERM / SIGINT: stop sampling, flush, exit 0.
- Driver gone (reload, Uninitialized): re-init with exponential backoff; the missing intervals are a gap.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuaudit import __version__
from gpuaudit.agent.buffer import Flusher, RowBuffer, Writer, store_writer
from gpuaudit.agent.log import event
from gpuaudit.agent.procinfo import Attributor, ProcAttributor
from gpuaudit.agent.sampler import Sampler
from gpuaudit.errors import GpuauditError
from gpuaudit.nvml import DriverGone, Nvml

REINIT_MIN_S = 1.0
REINIT_MAX_S = 60.0
REDISCOVER_EMPTY_S = 60.0  # with no GPU found, look again this often


def status_name(host: str) -> str:
    from gpuaudit.agent.buffer import _safe

    return f"agent-status-{_safe(host)}.json"


@dataclass
class AgentConfig:
    root: Path
    interval_s: float = 10.0
    flush_interval_s: float = 60.0
    duration_s: float | None = None
    once: bool = False
    host: str = ""
    max_buffer_rows: int = 50_000
    fork_writer: bool = True  # flush from a forked child (see buffer.run_forked)

    def validate(self) -> None:
        if not self.interval_s > 0:
            raise GpuauditError(f"--interval must be > 0 seconds, got {self.interval_s}")
        if not self.flush_interval_s > 0:
            raise GpuauditError(f"--flush-interval must be > 0 seconds, got {self.flush_interval_s}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise GpuauditError(f"--duration must be > 0 seconds, got {self.duration_s}")
        if self.max_buffer_rows < 10:
            raise GpuauditError("--max-buffer-rows must be at least 10")
        if not self.host:
            self.host = socket.gethostname()


class Stamper:
    """UTC stamps that only move forward: max(wall clock, previous stamp + monotonic elapsed)."""

    def __init__(self, after: datetime | None = None, *, wall: Callable[[], float] = time.time,
                 mono: Callable[[], float] = time.monotonic) -> None:
        self.wall, self.mono = wall, mono
        self.last = after.timestamp() if after else None
        self.last_mono = mono()

    def stamp(self) -> datetime:
        now_mono = self.mono()
        t = self.wall()
        if self.last is not None:
            t = max(t, self.last + max(now_mono - self.last_mono, 1e-6))
        self.last, self.last_mono = t, now_mono
        return datetime.fromtimestamp(t, UTC)


class Agent:
    def __init__(self, config: AgentConfig, nvml: Nvml, *, attributor: Attributor | None = None,
                 writer: Writer = store_writer, mono: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, extra_status: dict[str, Any] | None = None) -> None:
        config.validate()
        self.config = config
        self.nvml = nvml
        self.mono = mono
        self.sampler = Sampler(nvml, config.host, attributor or ProcAttributor(), clock=mono)
        self.buffer = RowBuffer(config.max_buffer_rows)
        self.flusher = Flusher(config.root, config.host, self.buffer, writer=writer, clock=mono,
                               fork=config.fork_writer)
        self.stop_event = threading.Event()
        self.started = datetime.now(UTC)
        self.intervals = 0
        self.overruns = 0
        self.extra_status = extra_status or {}
        prev = self._read_status()
        after = None
        if prev and prev.get("last_ts"):
            try:
                after = datetime.fromisoformat(prev["last_ts"])
            except ValueError:
                after = None
        self.stamper = Stamper(after, wall=wall, mono=mono)

    # --- status file -----------------------------------------------------------------------------
    def _read_status(self) -> dict[str, Any] | None:
        try:
            from gpuaudit.store import read_json

            return read_json(self.config.root, status_name(self.config.host))
        except Exception:  # unreadable status must not stop the agent
            return None

    def status(self) -> dict[str, Any]:
        last_ts = self.stamper.last
        return {
            "host": self.config.host, "pid": os.getpid(), "version": __version__,
            "started": self.started.isoformat(), "updated": datetime.now(UTC).isoformat(),
            "interval_s": self.config.interval_s, "flush_interval_s": self.config.flush_interval_s,
            "driver_version": self.sampler.driver_version, "devices": self.sampler.describe(),
            "last_flush": self.flusher.last_flush.isoformat() if self.flusher.last_flush else None,
            "last_ts": datetime.fromtimestamp(last_ts, UTC).isoformat() if last_ts else None,
            "rows_written": self.flusher.rows_written, "dropped_rows": self.buffer.dropped,
            "buffered_rows": len(self.buffer), "flush_error": self.flusher.last_error,
            "intervals": self.intervals, "overruns": self.overruns, **self.extra_status,
        }

    def _write_status(self) -> None:
        try:
            from gpuaudit.store import write_json

            write_json(self.config.root, status_name(self.config.host), self.status())
        except Exception as e:  # the data matters, the status file is a convenience
            event("status_write_failed", logging.WARNING, error=str(e).splitlines()[0] if str(e) else e)

    # --- life cycle ----------------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        def handler(signum: int, frame: Any) -> None:
            event("signal", signal=signal.Signals(signum).name)
            self.stop_event.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def stop(self) -> None:
        self.stop_event.set()

    def _sleep_until(self, deadline: float) -> bool:
        """Sleep on the monotonic clock; False when asked to stop."""
        while not self.stop_event.is_set():
            left = deadline - self.mono()
            if left <= 0:
                return True
            self.stop_event.wait(min(left, 1.0))
        return False

    def _discover(self) -> bool:
        """(Re)discover devices, retrying a gone driver with backoff. False when stopped meanwhile."""
        delay = REINIT_MIN_S
        while not self.stop_event.is_set():
            try:
                self.sampler.discover()
                return True
            except DriverGone as e:
                self.nvml.shutdown()
                event("nvml_reinit_wait", logging.WARNING, error=str(e), retry_in_s=delay)
                if not self._sleep_until(self.mono() + delay):
                    return False
                delay = min(delay * 2, REINIT_MAX_S)
        return False

    def run(self) -> dict[str, Any]:
        """Sample until --duration, --once, or a signal; flush; return the final status."""
        cfg = self.config
        event("start", host=cfg.host, interval_s=cfg.interval_s, flush_interval_s=cfg.flush_interval_s,
              root=cfg.root, version=__version__)
        self.nvml.init()  # a missing library / driver is fatal here, with its hint
        start = self.mono()
        end = start + cfg.duration_s if cfg.duration_s else None
        if not self._discover():
            return self._finish()
        if not self.sampler.units:
            event("no_devices", logging.WARNING, hint="no NVIDIA GPU visible to NVML on this node")
        next_tick = self.mono() + cfg.interval_s
        next_flush = self.mono() + cfg.flush_interval_s
        next_rediscover = self.mono() + REDISCOVER_EMPTY_S
        while True:
            if end is not None:
                next_tick = min(next_tick, end)
            if not self._sleep_until(next_tick):
                break
            now = self.mono()
            try:
                rows, procs = self.sampler.sample(self.stamper.stamp()) if self.sampler.units else ([], [])
            except DriverGone as e:
                event("driver_gone", logging.WARNING, error=str(e))
                self.nvml.shutdown()
                if not self._discover():
                    break
                rows, procs = [], []
            self.buffer.add(rows, procs)
            self.intervals += 1
            if not self.sampler.units and now >= next_rediscover:
                next_rediscover = now + REDISCOVER_EMPTY_S
                self._discover()
            # Next tick on the fixed grid; ticks missed by an overrun are skipped (the longer interval_s
            # of the next rows records it).
            next_tick += cfg.interval_s
            if next_tick <= self.mono():
                missed = int((self.mono() - next_tick) // cfg.interval_s) + 1
                next_tick += missed * cfg.interval_s
                self.overruns += 1
                event("overrun", logging.WARNING, missed_ticks=missed)
            if cfg.once or (end is not None and self.mono() >= end - 1e-3):
                break
            if self.mono() >= next_flush and self.flusher.due_for_retry():
                self.flusher.flush()
                self._write_status()
                next_flush = self.mono() + cfg.flush_interval_s
        return self._finish()

    def _finish(self) -> dict[str, Any]:
        self.flusher.flush()
        self._write_status()
        self.sampler.close()
        self.nvml.shutdown()
        st = self.status()
        event("stop", intervals=self.intervals, rows_written=self.flusher.rows_written,
              buffered_rows=len(self.buffer), dropped_rows=self.buffer.dropped)
        return st
