"""`agent run --metrics-listen HOST:PORT`: the agent's interval averages as a Prometheus endpoint.

Served from memory only: at the end of every interval the life cycle hands the rows it just sampled to
`MetricsState.update`, which builds an immutable `Snapshot` and swaps one reference. A scrape renders that
snapshot through a custom prometheus-client Collector: no NVML call, no disk read, no lock shared with the
sampling loop (a slow scraper can hold a snapshot, never the agent).

Scrapers are bounded: each connection has a socket timeout (a client that connects and sends nothing is
dropped after REQUEST_TIMEOUT_S), at most MAX_CONNECTIONS are served at once (more are closed at once), the
request line and headers are size-capped by http.server, and only GET / HEAD of /metrics (or /) is answered.
The server runs in daemon threads; the sampling loop never waits on it.

Names (`--metrics-names`): `gpuaudit` (the default, documented in agents/README.md), `dcgm` (dcgm-exporter's
names, units and labels, so existing dashboards and alerts work), or `both`.
"""

from __future__ import annotations

import ipaddress
import resource
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from gpuaudit import __version__
from gpuaudit.errors import GpuauditError

NAMES = ("gpuaudit", "dcgm", "both")
_REQUEST_TIMEOUT_S = 5.0  # a connection idle (or trickling) this long is closed
MAX_CONNECTIONS = 4  # scrapes served at once; Prometheus sends one per target at a time
MIB = 1024 * 1024
# Text format 0.0.4: every name here is a classic one, so the body is the same as 1.0.0's, and every
# Prometheus (2.x included) and scraper reads this type.
_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

GPU_LABELS = ("host", "gpu_uuid", "gpu_index", "gpu_name", "mig_instance", "mig_profile")
# The dataset's column names: none clashes with a label Prometheus or the Operator attaches to a target (job,
# instance, pod, namespace, container), so no relabelling or honor_labels is needed.
# pod_uid: the pod's UID from its cgroup, so a StatefulSet pod recreated under the same name is told apart.
HOLDER_LABELS = ("host", "gpu_uuid", "gpu_index", "mig_instance", "k8s_namespace", "k8s_pod", "k8s_container",
                 "pod_uid", "job_id", "user")
# dcgm-exporter's labels, as its exposition template writes them (gpu, UUID, device, modelName, GPU_I_PROFILE,
# GPU_I_ID, Hostname) plus its Kubernetes pod mapper's pod, namespace, container and, with
# --kubernetes-enable-pod-uid, pod_uid (internal/pkg/transformation/const.go uidAttribute).
DCGM_LABELS = ("gpu", "UUID", "device", "modelName", "Hostname", "GPU_I_ID", "GPU_I_PROFILE",
               "pod", "namespace", "container", "pod_uid")

# gpuaudit name -> (row key, help, scale). Fractions 0-1, bytes, watts.
GPU_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    ("gpuaudit_gpu_sm_active_ratio", "sm_active", "SM activity (GPM), interval average, 0-1", 1.0),
    ("gpuaudit_gpu_sm_occupancy_ratio", "sm_occupancy", "SM occupancy (GPM), interval average, 0-1", 1.0),
    ("gpuaudit_gpu_tensor_active_ratio", "tensor_active", "Tensor pipe activity (GPM), interval average, 0-1", 1.0),
    ("gpuaudit_gpu_dram_active_ratio", "dram_active", "DRAM bandwidth activity (GPM), interval average, 0-1", 1.0),
    ("gpuaudit_gpu_duty_cycle_ratio", "duty_cycle",
     "Kernel duty cycle (what nvidia-smi calls utilization), interval average, 0-1", 1.0),
    ("gpuaudit_gpu_memory_used_bytes", "mem_used_bytes", "Device memory used at the interval end, bytes", 1.0),
    ("gpuaudit_gpu_memory_total_bytes", "mem_total_bytes", "Device memory total, bytes", 1.0),
    ("gpuaudit_gpu_power_watts", "power_w", "Power, interval average from the energy counter, watts", 1.0),
    ("gpuaudit_gpu_processes", "n_processes", "Compute processes on the GPU at the interval end", 1.0),
    ("gpuaudit_gpu_interval_seconds", "interval_s", "Length of the interval the averages cover, seconds", 1.0),
)
# dcgm-exporter name -> (row key, help, scale)
DCGM_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    ("DCGM_FI_PROF_SM_ACTIVE", "sm_active", "Ratio of cycles an SM has at least 1 warp assigned", 1.0),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "sm_occupancy", "Ratio of number of warps resident on an SM", 1.0),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "tensor_active", "Ratio of cycles the tensor (HMMA) pipe is active", 1.0),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "dram_active", "Ratio of cycles the device memory interface is active", 1.0),
    ("DCGM_FI_DEV_GPU_UTIL", "duty_cycle", "GPU utilization (in %)", 100.0),
    ("DCGM_FI_DEV_FB_USED", "mem_used_bytes", "Framebuffer memory used (in MiB)", 1.0 / MIB),
    ("DCGM_FI_DEV_POWER_USAGE", "power_w", "Power draw (in W)", 1.0),
)


def parse_listen(value: str, allow_remote: bool = False) -> tuple[str, int]:
    """'HOST:PORT' (or '[v6]:PORT') -> (host, port). A non-loopback host needs `allow_remote`."""
    host, sep, port_s = value.rpartition(":")
    if not sep or not host:
        raise GpuauditError(f"--metrics-listen must be HOST:PORT (e.g. 127.0.0.1:9400), got {value!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        port = int(port_s)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise GpuauditError(f"--metrics-listen port must be 0 to 65535, got {port_s!r}")
    if not _is_loopback(host) and not allow_remote:
        raise GpuauditError(f"--metrics-listen {value}: {host} is not a loopback address; "
                            "add --metrics-allow-remote to serve metrics beyond this host")
    return host, port


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost: it may resolve to anything


@dataclass(frozen=True)
class _Snapshot:
    """What one scrape renders: the last interval's rows and holders, and the agent's counters."""

    rows: tuple[dict[str, Any], ...] = ()
    holders: tuple[tuple[tuple[str, ...], int], ...] = ()  # (HOLDER_LABELS values, processes)
    energy_j: dict[tuple[str, str], float] = field(default_factory=dict)  # (uuid, mig) -> since start
    counters: dict[str, float] = field(default_factory=dict)
    ts: float | None = None  # the interval end, Unix seconds


def _s(v: Any) -> str:
    return "" if v is None else str(v)


def _unit_key(row: dict[str, Any]) -> tuple[str, str]:
    return (_s(row.get("gpu_uuid")), _s(row.get("mig_instance")))


class MetricsState:
    """The current snapshot (swapped whole at each interval end) and the energy totals behind it."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.snapshot = _Snapshot()
        self._energy: dict[tuple[str, str], float] = {}
        self.updates = 0
        self._changed = threading.Condition()  # notified at each update (tests wait on it, never on sleeps)

    def update(self, rows: list[dict[str, Any]], procs: list[dict[str, Any]], counters: dict[str, float]) -> None:
        for r in rows:
            if r.get("energy_j") is not None:
                k = _unit_key(r)
                self._energy[k] = self._energy.get(k, 0.0) + float(r["energy_j"])
        index = {_unit_key(r): r for r in rows}
        held: Counter[tuple[str, ...]] = Counter()
        for p in procs:
            unit = index.get(_unit_key(p))
            if unit is None:
                continue
            held[(_s(unit.get("host")), _s(unit.get("gpu_uuid")), _s(unit.get("gpu_index")),
                  _s(unit.get("mig_instance")),
                  _s(p.get("k8s_namespace")), _s(p.get("k8s_pod")), _s(p.get("container")),
                  _s(p.get("pod_uid")), _s(p.get("job_id")), _s(p.get("user")))] += 1
        ru = resource.getrusage(resource.RUSAGE_SELF)
        counters = {**counters, "cpu_seconds": ru.ru_utime + ru.ru_stime, "peak_rss_bytes": ru.ru_maxrss * 1024.0}
        ts = max((r["ts"].timestamp() for r in rows), default=None)
        self.snapshot = _Snapshot(tuple(rows), tuple(sorted(held.items())), dict(self._energy), counters,
                                 ts if ts is not None else self.snapshot.ts)
        with self._changed:
            self.updates += 1
            self._changed.notify_all()

    def wait_updates(self, n: int, timeout_s: float) -> bool:
        """Wait until `n` intervals have been published; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self.updates >= n, timeout_s)


class _AgentCollector(Collector):
    """Renders the current snapshot; never touches NVML or the disk."""

    def __init__(self, state: MetricsState, names: str = "gpuaudit") -> None:
        self.state = state
        self.names = names

    def collect(self) -> Iterator[Metric]:
        snap = self.state.snapshot
        if self.names in ("gpuaudit", "both"):
            yield from self._gpuaudit(snap)
        if self.names in ("dcgm", "both"):
            yield from self._dcgm(snap)
        yield from self._agent(snap)

    def _gpuaudit(self, snap: _Snapshot) -> Iterable[Metric]:
        labels = [[_s(r.get(k)) for k in GPU_LABELS] for r in snap.rows]
        for name, key, doc, scale in GPU_GAUGES:
            g = GaugeMetricFamily(name, doc, labels=GPU_LABELS)
            for r, lv in zip(snap.rows, labels, strict=True):
                if r.get(key) is not None:
                    g.add_metric(lv, float(r[key]) * scale)
            yield g
        e = CounterMetricFamily("gpuaudit_gpu_energy_joules", "Energy used since the agent started, joules "
                                "(a MIG instance: its share of the GPU's)", labels=GPU_LABELS)
        for r, lv in zip(snap.rows, labels, strict=True):
            total = snap.energy_j.get(_unit_key(r))
            if total is not None:
                e.add_metric(lv, total)
        yield e
        h = GaugeMetricFamily("gpuaudit_gpu_holder_processes", "Compute processes of each holder (pod, job, "
                              "user) on the GPU in the last interval; only holders seen that interval",
                              labels=HOLDER_LABELS)
        for hl, n in snap.holders:
            h.add_metric(list(hl), float(n))
        yield h

    def _dcgm(self, snap: _Snapshot) -> Iterable[Metric]:
        # dcgm-exporter emits one series per pod holding the GPU (its pod labels), or one without pod labels.
        pods: dict[tuple[str, str], list[tuple[str, str, str, str]]] = {}
        for hl, _n in snap.holders:
            if hl[5]:  # (pod, namespace, container, pod_uid) in dcgm-exporter's order
                ent = pods.setdefault((hl[1], hl[3]), [])
                if (hl[5], hl[4], hl[6], hl[7]) not in ent:
                    ent.append((hl[5], hl[4], hl[6], hl[7]))
        series: list[tuple[dict[str, Any], list[str]]] = []
        for r in snap.rows:
            base = [_s(r.get("gpu_index")), _s(r.get("gpu_uuid")), f"nvidia{_s(r.get('gpu_index'))}",
                    _s(r.get("gpu_name")), _s(r.get("host")),
                    _s(r.get("mig_instance")), _s(r.get("mig_profile"))]
            for pod in pods.get(_unit_key(r)) or [("", "", "", "")]:
                series.append((r, [*base, *pod]))
        for name, key, doc, scale in DCGM_GAUGES:
            g = GaugeMetricFamily(name, doc, labels=DCGM_LABELS)
            for r, lv in series:
                if r.get(key) is not None:
                    g.add_metric(lv, float(r[key]) * scale)
            yield g
        e = GaugeMetricFamily("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                              "Total energy consumption since the agent started (in mJ)", labels=DCGM_LABELS)
        for r, lv in series:
            total = snap.energy_j.get(_unit_key(r))
            if total is not None:
                e.add_metric(lv, total * 1000.0)
        yield e

    def _agent(self, snap: _Snapshot) -> Iterable[Metric]:
        c = snap.counters
        host = [self.state.host]
        info = GaugeMetricFamily("gpuaudit_agent_info", "The agent's version (always 1)", labels=("host", "version"))
        info.add_metric([self.state.host, __version__], 1.0)
        yield info
        for name, key, doc in (
            ("gpuaudit_agent_intervals", "intervals", "Sampling intervals completed"),
            ("gpuaudit_agent_samples", "samples", "GPU sample rows produced"),
            ("gpuaudit_agent_flushes", "flushes", "Successful flushes to the dataset"),
            ("gpuaudit_agent_flush_failures", "flush_failures", "Failed flushes (retried with backoff)"),
            ("gpuaudit_agent_rows_written", "rows_written", "Sample rows written to the dataset"),
            ("gpuaudit_agent_dropped_rows", "dropped_rows", "Rows dropped from a full buffer"),
            ("gpuaudit_agent_overruns", "overruns", "Intervals that ran late"),
            ("gpuaudit_agent_cpu_seconds", "cpu_seconds", "CPU time the agent used (user + system), seconds"),
        ):
            m = CounterMetricFamily(name, doc, labels=("host",))
            m.add_metric(host, float(c.get(key, 0.0)))
            yield m
        for name, key, doc in (
            ("gpuaudit_agent_peak_rss_bytes", "peak_rss_bytes", "The agent's peak resident memory, bytes"),
            ("gpuaudit_agent_buffered_rows", "buffered_rows", "Rows in memory not yet flushed"),
        ):
            g = GaugeMetricFamily(name, doc, labels=("host",))
            g.add_metric(host, float(c.get(key, 0.0)))
            yield g
        if snap.ts is not None:
            g = GaugeMetricFamily("gpuaudit_agent_last_interval_timestamp_seconds",
                                  "End of the last sampled interval, Unix seconds", labels=("host",))
            g.add_metric(host, snap.ts)
            yield g


class _Handler(BaseHTTPRequestHandler):
    timeout = _REQUEST_TIMEOUT_S  # socket timeout for every read: an idle client is dropped
    server: _Server
    protocol_version = "HTTP/1.0"  # one request per connection: no keep-alive to hold a slot
    disable_nagle_algorithm = True  # headers and body are two writes: the body never waits for a delayed ACK

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _serve(self, body: bool) -> None:
        if self.path.split("?", 1)[0] not in ("/metrics", "/"):
            self.send_error(404)
            return
        out = generate_latest(self.server.registry)
        self.send_response(200)
        self.send_header("Content-Type", _CONTENT_TYPE)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if body:
            self.wfile.write(out)

    def log_message(self, format: str, *args: Any) -> None:  # scrapes are not events
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 16

    def __init__(self, addr: tuple[str, int], registry: CollectorRegistry, family: int) -> None:
        self.address_family = family
        self.registry = registry
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.refused = 0
        super().__init__(addr, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):  # all slots busy: close this one rather than queue it
            self.refused += 1
            self.shutdown_request(request)
            return
        request.settimeout(_REQUEST_TIMEOUT_S)
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up or timed out


class MetricsServer:
    """The endpoint: a registry holding only the agent's collector, served from daemon threads."""

    def __init__(self, host: str, port: int, state: MetricsState, names: str = "gpuaudit") -> None:
        if names not in NAMES:
            raise GpuauditError(f"--metrics-names must be one of {', '.join(NAMES)}, got {names!r}")
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_AgentCollector(state, names))
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self.httpd = _Server((host, port), self.registry, family)
        except OSError as e:
            raise GpuauditError(f"--metrics-listen {host}:{port}: cannot listen ({e.strerror or e})") from None
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.5},
                                       name="gpuaudit-metrics", daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        t0 = time.monotonic()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=max(0.0, _REQUEST_TIMEOUT_S - (time.monotonic() - t0)))
