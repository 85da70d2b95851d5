"""The agent's life cycle: tick on a monotonic clock, sample, buffer, flush; survive faults; exit cleanly.

- Ticks are scheduled on time.monotonic(); a tick that comes late (overrun) is recorded as a longer
  `interval_s` of the next rows, never hidden, and missed ticks are skipped rather than bunched.
- Rows are stamped in UTC by `Stamper`: wall-clock time, but never earlier than the previous stamp plus
  the monotonic time elapsed, so a wall-clock step backwards neither duplicates nor reorders rows (and a
  step forward drops none). The last stamp is kept in the status file, so a restart continues after it,
  unless that stamp is ahead of the wall clock (a run while the clock was wrong): the wall clock is then
  trusted, with a warning, instead of stamping every later row in that future (readers refuse rows more than
  a day ahead). Within a run the stamps never lead the wall clock by more than MAX_LEAD_S for the same
  reason, and no row is stamped before schema.TS_MIN (a clock reset to 1970): such intervals are skipped.
- SIGTERM / SIGINT: stop sampling, flush, exit 0, promptly at any interval (sleeps wake on the signal).
  SIGHUP: flush now and keep running.
- One agent per (data directory, host): an flock held for the agent's life (gpuaudit.agent.instance). The
  status file is written at start (the agent's pid, start time and boot id: `agent status` checks them)
  and after every flush.
- Driver gone (reload, Uninitialized): re-init with exponential backoff; the missing intervals are a gap.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuaudit import __version__, schema
from gpuaudit.agent import instance
from gpuaudit.agent.buffer import Flusher, RowBuffer, Writer, store_writer
from gpuaudit.agent.log import event
from gpuaudit.agent.nvml import DriverGone, Nvml
from gpuaudit.agent.procinfo import Attributor, ProcAttributor
from gpuaudit.agent.sampler import Sampler
from gpuaudit.errors import GpuauditError

_REINIT_MIN_S = 1.0
_REINIT_MAX_S = 60.0
_REDISCOVER_EMPTY_S = 60.0  # with no GPU found, look again this often
# --interval range: below 0.1 s NVML's own sampling cannot follow (and a near-zero interval turns the loop
# into a busy spin); above an hour a row says little about when a GPU was busy.
_INTERVAL_MIN_S = 0.1
_INTERVAL_MAX_S = 3600.0


def status_name(host: str) -> str:
    """The status file of `host`'s agent: named as its lock is (instance.host_key), one file per host."""
    return f"agent-status-{instance.host_key(host)}.json"


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
    upload: str | None = None  # --upload: a collection target each flush is pushed to (agent/upload.py)
    upload_endpoint_url: str | None = None
    delete_after_upload: bool = False
    metrics_listen: str | None = None  # --metrics-listen HOST:PORT (agent/metrics.py); off by default
    metrics_allow_remote: bool = False
    metrics_names: str = "gpuaudit"

    def validate(self) -> None:
        if not _INTERVAL_MIN_S <= self.interval_s <= _INTERVAL_MAX_S:  # also refuses nan
            raise GpuauditError(f"--interval must be between {_INTERVAL_MIN_S:g} and {_INTERVAL_MAX_S:g} seconds, "
                                f"got {self.interval_s!r}")  # as given: 3600.0001, not a rounded 3600
        if not self.flush_interval_s > 0:
            raise GpuauditError(f"--flush-interval must be > 0 seconds, got {self.flush_interval_s}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise GpuauditError(f"--duration must be > 0 seconds, got {self.duration_s}")
        if self.max_buffer_rows < 10:
            raise GpuauditError("--max-buffer-rows must be at least 10")
        if not self.host:
            self.host = socket.gethostname()
        if self.upload:
            from gpuaudit.agent.upload import check_target

            check_target(self.root, self.upload)
        if self.metrics_listen is not None:
            from gpuaudit.agent.metrics import NAMES, parse_listen

            parse_listen(self.metrics_listen, self.metrics_allow_remote)
            if self.metrics_names not in NAMES:
                raise GpuauditError(f"--metrics-names must be one of {', '.join(NAMES)}, got {self.metrics_names!r}")


# The most the stamps may lead the wall clock after it stepped back: half the readers' bound on a future ts
# (schema.TS_MAX_AHEAD_S), so that no row is ever stamped where readers refuse it. A bigger step back is a
# wrong clock corrected, not jitter: the stamps follow the wall clock again.
MAX_LEAD_S = schema.TS_MAX_AHEAD_S / 2
_RESUME_SLACK_S = 1.0  # a previous stamp at most this far ahead is continued after (a clock slewed back a little)
_TS_MIN = datetime.fromisoformat(schema.TS_MIN).replace(tzinfo=UTC).timestamp()


class Stamper:
    """UTC stamps from the wall clock that only move forward within a run: max(wall clock, previous stamp +
    monotonic elapsed), never more than MAX_LEAD_S ahead of the wall clock. `after`: the previous run's last
    stamp, continued after unless it is ahead of the wall clock (then `ahead_s` says by how much and the wall
    clock is trusted)."""

    def __init__(self, after: datetime | None = None, *, wall: Callable[[], float] = time.time,
                 mono: Callable[[], float] = time.monotonic) -> None:
        self.wall, self.mono = wall, mono
        self.last: float | None = None
        self.ahead_s = 0.0
        self.reanchored = 0  # times the stamps gave up their lead and followed the wall clock again
        if after is not None:
            lead = after.timestamp() - wall()
            if lead > _RESUME_SLACK_S:
                self.ahead_s = lead
            else:
                self.last = after.timestamp()
        self.last_mono = mono()

    def stamp(self) -> datetime:
        now_mono = self.mono()
        wall = t = self.wall()
        if self.last is not None:
            t = max(t, self.last + max(now_mono - self.last_mono, 1e-6))
            if t - wall > MAX_LEAD_S:
                t = wall
                self.reanchored += 1
                event("clock_stepped_back", logging.WARNING, lead_s=round(self.last - wall),
                      hint="the wall clock went back far; stamping by it again (earlier rows may overlap)")
        self.last, self.last_mono = t, now_mono
        return datetime.fromtimestamp(t, UTC)

    @staticmethod
    def refused(ts: datetime) -> bool:
        """Whether readers would refuse a row stamped `ts` (before schema.TS_MIN: a clock reset to 1970)."""
        return ts.timestamp() < _TS_MIN


class Agent:
    def __init__(self, config: AgentConfig, nvml: Nvml, *, attributor: Attributor | None = None,
                 writer: Writer = store_writer, mono: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, extra_status: dict[str, Any] | None = None) -> None:
        config.validate()
        self.config = config
        self.nvml = nvml
        self.mono = mono
        self.stop_event = threading.Event()
        self.sampler = Sampler(nvml, config.host, attributor or ProcAttributor(), clock=mono,
                               stop=self.stop_event.is_set)
        self.buffer = RowBuffer(config.max_buffer_rows)
        self.uploader = None
        if config.upload:
            from gpuaudit.agent.upload import Uploader

            self.uploader = Uploader(config.root, config.upload, endpoint_url=config.upload_endpoint_url,
                                     delete_after_upload=config.delete_after_upload,
                                     verbose=logging.getLogger("gpuaudit").isEnabledFor(logging.DEBUG))
        self.flusher = Flusher(config.root, config.host, self.buffer, writer=writer, clock=mono,
                               fork=config.fork_writer, on_flush=self.uploader.notify if self.uploader else None)
        self.wake = threading.Event()  # set by every signal: a sleep ends at once
        self.flush_requested = False  # SIGHUP
        self.stopped: datetime | None = None
        self.lock = instance.AgentLock(config.root, config.host)
        self.started = datetime.now(UTC)
        self.intervals = 0
        self.overruns = 0
        self.extra_status = extra_status or {}
        self.metrics: Any = None  # agent/metrics.MetricsState when --metrics-listen is given
        self.metrics_server: Any = None
        self.samples = 0
        if config.metrics_listen is not None:
            from gpuaudit.agent.metrics import MetricsState

            self.metrics = MetricsState(config.host)
        prev = self._read_status()
        after = None
        if prev and prev.get("last_ts"):
            try:
                after = datetime.fromisoformat(prev["last_ts"])
            except ValueError:
                after = None
        self.stamper = Stamper(after, wall=wall, mono=mono)
        self.clock_skipped = 0  # intervals not recorded: the wall clock was before schema.TS_MIN
        if self.stamper.ahead_s:
            event("status_ahead_of_clock", logging.WARNING, last_ts=prev and prev.get("last_ts"),
                  ahead_s=round(self.stamper.ahead_s),
                  status=str(Path(self.config.root) / status_name(self.config.host)),
                  hint="a previous run's clock was ahead (or this clock is behind); stamping by this clock")

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
            "host": self.config.host, **instance.identity(), "version": __version__,
            "started": self.started.isoformat(), "updated": datetime.now(UTC).isoformat(),
            "stopped": self.stopped.isoformat() if self.stopped else None,
            "interval_s": self.config.interval_s, "flush_interval_s": self.config.flush_interval_s,
            "driver_version": self.sampler.driver_version, "devices": self.sampler.describe(),
            "last_flush": self.flusher.last_flush.isoformat() if self.flusher.last_flush else None,
            "last_ts": datetime.fromtimestamp(last_ts, UTC).isoformat() if last_ts else None,
            "rows_written": self.flusher.rows_written, "dropped_rows": self.buffer.dropped,
            "buffered_rows": len(self.buffer), "flush_error": self.flusher.last_error,
            "intervals": self.intervals, "overruns": self.overruns, "clock_skipped": self.clock_skipped,
            **self.extra_status,
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
            self.wake.set()

        def flush_handler(signum: int, frame: Any) -> None:
            event("signal", signal=signal.Signals(signum).name, action="flush")
            self.request_flush()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
        if hasattr(signal, "SIGHUP"):
            signal.signal(signal.SIGHUP, flush_handler)

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.set()

    def request_flush(self) -> None:
        """Flush at the next chance (within the current sleep), then keep sampling."""
        self.flush_requested = True
        self.wake.set()

    def _sleep_until(self, deadline: float) -> bool:
        """Sleep on the monotonic clock, serving flush requests; False when asked to stop."""
        while not self.stop_event.is_set():
            if self.flush_requested:
                self.flush_requested = False
                self.flusher.flush()
                self._write_status()
            left = deadline - self.mono()
            if left <= 0:
                return True
            self.wake.wait(min(left, 1.0))
            self.wake.clear()  # flags are set before wake: the loop sees them on its next pass
        return False

    def _discover(self) -> bool:
        """(Re)discover devices, retrying a gone driver with backoff. False when stopped meanwhile."""
        delay = _REINIT_MIN_S
        while not self.stop_event.is_set():
            try:
                self.sampler.discover()
                return True
            except DriverGone as e:
                self.nvml.shutdown()
                event("nvml_reinit_wait", logging.WARNING, error=str(e), retry_in_s=delay)
                if not self._sleep_until(self.mono() + delay):
                    return False
                delay = min(delay * 2, _REINIT_MAX_S)
        return False

    def run(self) -> dict[str, Any]:
        """Sample until --duration, --once, or a signal; flush; return the final status."""
        # NVML first: a node without a usable driver fails with its hint and leaves nothing behind (the lock
        # would create the data directory and a lock file for an agent that never ran).
        self.nvml.init()
        try:
            self.lock.acquire()  # a second agent for this host and directory stops here, naming the first
        except BaseException:
            self.nvml.shutdown()
            raise
        try:
            if self.metrics is not None:
                from gpuaudit.agent.metrics import MetricsServer, parse_listen

                host, port = parse_listen(str(self.config.metrics_listen), self.config.metrics_allow_remote)
                try:
                    self.metrics_server = MetricsServer(host, port, self.metrics, self.config.metrics_names)
                except BaseException:
                    self.nvml.shutdown()
                    raise
                self.metrics_server.start()
                event("metrics_listen", address=f"{host}:{self.metrics_server.port}",
                      names=self.config.metrics_names)
            return self._run()
        finally:
            if self.metrics_server is not None:
                self.metrics_server.close()
            self.lock.release()

    def _run(self) -> dict[str, Any]:
        cfg = self.config
        event("start", host=cfg.host, interval_s=cfg.interval_s, flush_interval_s=cfg.flush_interval_s,
              root=cfg.root, version=__version__)
        self._write_status()  # `agent status` sees the agent from now on (and tests wait for this)
        start = self.mono()
        end = start + cfg.duration_s if cfg.duration_s else None
        if not self._discover():
            return self._finish()
        self._write_status()  # with the devices
        if not self.sampler.units:
            event("no_devices", logging.WARNING, hint="no NVIDIA GPU visible to NVML on this node")
        next_tick = self.mono() + cfg.interval_s
        next_flush = self.mono() + cfg.flush_interval_s
        next_rediscover = self.mono() + _REDISCOVER_EMPTY_S
        while True:
            if end is not None:
                next_tick = min(next_tick, end)
            if not self._sleep_until(next_tick):
                break
            now = self.mono()
            try:
                stamp = self.stamper.stamp()
                refused = Stamper.refused(stamp)
                if refused:  # rows readers would refuse: not written, said once
                    if not self.clock_skipped:
                        event("clock_invalid", logging.ERROR, now=stamp.isoformat(),
                              hint=f"the wall clock is before {schema.TS_MIN}; set it (NTP): intervals are skipped")
                    self.clock_skipped += 1
                rows, procs = self.sampler.sample(stamp) if self.sampler.units and not refused else ([], [])
            except DriverGone as e:
                event("driver_gone", logging.WARNING, error=str(e))
                self.nvml.shutdown()
                if not self._discover():
                    break
                rows, procs = [], []
            self.buffer.add(rows, procs)
            self.intervals += 1
            self.samples += len(rows)
            if self.metrics is not None:
                self.metrics.update(rows, procs, self._counters())
            if not self.sampler.units and now >= next_rediscover:
                next_rediscover = now + _REDISCOVER_EMPTY_S
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

    def _counters(self) -> dict[str, float]:
        """The agent's counters as the metrics endpoint shows them (flushes as of the last interval end)."""
        f = self.flusher
        return {"intervals": self.intervals, "samples": self.samples, "flushes": f.flushes,
                "flush_failures": f.flush_failures, "rows_written": f.rows_written,
                "dropped_rows": self.buffer.dropped, "overruns": self.overruns, "buffered_rows": len(self.buffer)}

    def _finish(self) -> dict[str, Any]:
        self.flusher.flush()
        self.stopped = datetime.now(UTC)
        self._write_status()
        if self.uploader is not None:
            self.uploader.close()  # the last push, including the final flush (bounded wait)
        self.sampler.close()
        self.nvml.shutdown()
        st = self.status()
        event("stop", intervals=self.intervals, rows_written=self.flusher.rows_written,
              buffered_rows=len(self.buffer), dropped_rows=self.buffer.dropped)
        return st
