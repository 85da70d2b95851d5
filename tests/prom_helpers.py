"""A real Prometheus with a week of dcgm-exporter-shaped history, for the importer's tests and benchmark.

The fleet (`FLEET`) is generated sample by sample; `expected()` averages those same generated samples
over each step, independently of Prometheus, so a test can compare the import with known values.

Traps this avoids: OpenMetrics timestamps are in SECONDS; samples of a series must be in time order and a
metric family contiguous; `# EOF` ends the file; samples sit 7 s after each minute so no sample lies on a
step boundary; the week ends well before the query window's end (instant queries look back 5 minutes).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
from tests.helpers import IMPORT_START as START
from tests.helpers import wait_until

DAYS = 7
SPACING_S = 60  # scrape interval (well under the 5-minute lookback)
OFFSET_S = 7  # samples at hh:mm:07
N = DAYS * 86400 // SPACING_S
MIB = 1024 * 1024
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
H100_FB_MIB = 81559
EXPORTER_TARGET = {"pod": "nvidia-dcgm-exporter-7xk2p", "namespace": "gpu-operator",
                   "container": "nvidia-dcgm-exporter"}


def sample_times() -> np.ndarray:
    return START.timestamp() + OFFSET_S + SPACING_S * np.arange(N, dtype=np.int64)


@dataclass
class Gpu:
    """One GPU (or MIG instance) and its generated series: metric -> values per sample."""

    host: str
    host_label: str  # "Hostname" (older dcgm-exporter) or "hostname" (newer)
    uuid: str
    index: int
    model: str
    busy: np.ndarray  # bool per sample
    metrics: dict[str, np.ndarray]
    mig_instance: int | None = None
    mig_profile: str | None = None
    # Extra labels while busy (a pod or a job) and always (exporter target labels).
    busy_labels: dict[str, str] = field(default_factory=dict)
    static_labels: dict[str, str] = field(default_factory=dict)

    def labels(self, busy: bool) -> dict[str, str]:
        out = {"gpu": str(self.index), "UUID": self.uuid, "device": f"nvidia{self.index}",
               "modelName": self.model, self.host_label: self.host, "DCGM_FI_DRIVER_VERSION": "550.54.15"}
        if self.mig_instance is not None:
            out |= {"GPU_I_ID": str(self.mig_instance), "GPU_I_PROFILE": str(self.mig_profile)}
        out |= self.static_labels
        if busy:
            out |= self.busy_labels
        return out


def _hours() -> np.ndarray:
    return np.arange(N) // (3600 // SPACING_S)


def _energy_mj(power_w: np.ndarray) -> np.ndarray:
    """DCGM's energy counter (mJ since driver load): power integrated over each scrape interval."""
    return 5e11 + np.cumsum(power_w * SPACING_S * 1000.0)


def build_fleet() -> list[Gpu]:
    h = _hours()
    k = np.arange(N)
    wobble = 0.1 * (k % 5)  # varies within every 5 minutes: a point sample is not the 5-minute average
    fleet = []

    busy = h % 4 != 3  # 75 % of hours busy
    power = np.where(busy, 500.0, 70.0)
    used = np.where(busy, 40000.0, 1000.0)
    fleet.append(Gpu("node-a", "Hostname", "GPU-a0000000-0000-0000-0000-000000000000", 0, H100, busy, {
        "DCGM_FI_PROF_SM_ACTIVE": np.where(busy, 0.3 + wobble, 0.0),
        "DCGM_FI_PROF_SM_OCCUPANCY": np.where(busy, 0.4, 0.0),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": np.where(busy, 0.2, 0.0),
        "DCGM_FI_PROF_DRAM_ACTIVE": np.where(busy, 0.3, 0.0),
        "DCGM_FI_DEV_GPU_UTIL": np.where(busy, 90.0, 0.0),
        "DCGM_FI_DEV_MEM_COPY_UTIL": np.where(busy, 25.0, 0.0),
        "DCGM_FI_DEV_FB_USED": used,
        "DCGM_FI_DEV_FB_FREE": H100_FB_MIB - used,
        "DCGM_FI_DEV_POWER_USAGE": power,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": _energy_mj(power),
        "DCGM_FI_DEV_GPU_TEMP": np.where(busy, 70.0, 35.0),
    }))

    busy = h % 24 < 12  # busy half of each day, under a Kubernetes pod (plain `pod` label style)
    power = np.where(busy, 400.0, 60.0)
    used = np.where(busy, 60000.0, 0.0)
    fleet.append(Gpu("node-a", "Hostname", "GPU-a1111111-1111-1111-1111-111111111111", 1, H100, busy, {
        "DCGM_FI_PROF_SM_ACTIVE": np.where(busy, 0.7, 0.0),
        "DCGM_FI_DEV_GPU_UTIL": np.where(busy, 100.0, 0.0),
        "DCGM_FI_DEV_FB_USED": used,
        "DCGM_FI_DEV_FB_FREE": H100_FB_MIB - used,
        "DCGM_FI_DEV_POWER_USAGE": power,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": _energy_mj(power),
    }, busy_labels={"pod": "train-llm-0", "namespace": "ml", "container": "trainer"}))

    busy = (h // 24) % 2 == 0  # alternate days; an older DCGM with GR_ENGINE_ACTIVE only
    used = np.where(busy, 30000.0, 500.0)
    fleet.append(Gpu("node-b", "hostname", "GPU-b0000000-0000-0000-0000-000000000000", 0, H100, busy, {
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": np.where(busy, 0.8, 0.05),
        "DCGM_FI_DEV_GPU_UTIL": np.where(busy, 95.0, 10.0),
        "DCGM_FI_DEV_FB_USED": used,
        "DCGM_FI_DEV_FB_FREE": H100_FB_MIB - used,
        "DCGM_FI_DEV_POWER_USAGE": np.where(busy, 450.0, 80.0),
    }))

    busy = h % 2 == 0  # no profiling metrics at all: duty cycle only, under a Slurm job
    used = np.where(busy, 20000.0, 0.0)
    fleet.append(Gpu("node-b", "hostname", "GPU-b1111111-1111-1111-1111-111111111111", 1, H100, busy, {
        "DCGM_FI_DEV_GPU_UTIL": np.where(busy, 100.0, 0.0),
        "DCGM_FI_DEV_FB_USED": used,
        "DCGM_FI_DEV_FB_FREE": H100_FB_MIB - used,
        "DCGM_FI_DEV_POWER_USAGE": np.where(busy, 300.0, 55.0),
    }, busy_labels={"hpc_job": "4242"}))

    # A MIG-partitioned A100 with two instances; the ServiceMonitor adds the exporter's own pod labels,
    # so a workload's pod arrives as exported_pod.
    busy = h % 3 == 0
    used = np.where(busy, 30000.0, 0.0)
    fleet.append(Gpu("node-c", "Hostname", "GPU-c0000000-0000-0000-0000-000000000000", 0, A100, busy, {
        "DCGM_FI_PROF_SM_ACTIVE": np.where(busy, 0.6, 0.0),
        "DCGM_FI_DEV_FB_USED": used,
        "DCGM_FI_DEV_FB_FREE": 40192 - used,
    }, mig_instance=1, mig_profile="3g.40gb", static_labels=EXPORTER_TARGET))
    busy = np.ones(N, dtype=bool)
    fleet.append(Gpu("node-c", "Hostname", "GPU-c0000000-0000-0000-0000-000000000000", 0, A100, busy, {
        "DCGM_FI_PROF_SM_ACTIVE": np.full(N, 0.25),
        "DCGM_FI_DEV_FB_USED": np.full(N, 5000.0),
        "DCGM_FI_DEV_FB_FREE": np.full(N, 4864.0),
    }, mig_instance=2, mig_profile="1g.10gb", static_labels=EXPORTER_TARGET,
        busy_labels={"exported_pod": "notebook-7", "exported_namespace": "research",
                     "exported_container": "jupyter"}))
    return fleet


# The MIG parent reports only device-level power: it must not become a row (no utilization).
MIG_PARENT_POWER = ("node-c", "Hostname", "GPU-c0000000-0000-0000-0000-000000000000", 0, A100)


OmSeries = tuple[dict[str, str], list[float], list[float]]  # (labels, values, sample times in Unix seconds)


def write_openmetrics(path: Path, families: dict[str, list[OmSeries]]) -> int:
    """Series as one OpenMetrics file for `promtool tsdb create-blocks-from openmetrics`: each metric family
    contiguous, each series in time order; returns the number of samples."""
    n = 0
    with path.open("w", encoding="utf-8") as out:
        for metric, series in families.items():
            out.write(f"# TYPE {metric} gauge\n")  # gauge even for counters: OpenMetrics counters need _total
            for labels, values, times in series:
                text = ",".join(f'{k}="{v}"' for k, v in labels.items())
                prefix = f"{metric}{{{text}}} "
                # Shortest exact repr of each float: an energy counter needs all its digits.
                out.writelines(f"{prefix}{v!r} {t}\n" for v, t in zip(values, times, strict=True))
                n += len(values)
        out.write("# EOF\n")
    return n


def fleet_families(fleet: list[Gpu]) -> dict[str, list[OmSeries]]:
    """The fleet's series by metric family: a GPU a pod holds has its labelled series while busy and the bare
    one otherwise; the MIG parent reports only device-level power."""
    times = sample_times()
    families: dict[str, list[OmSeries]] = {}

    def add(metric: str, labels: dict[str, str], values: np.ndarray, mask: np.ndarray) -> None:
        families.setdefault(metric, []).append((labels, values[mask].tolist(), times[mask].tolist()))

    for g in fleet:
        for metric, values in g.metrics.items():
            if g.busy_labels:
                add(metric, g.labels(True), values, g.busy)
                if not g.busy.all():
                    add(metric, g.labels(False), values, ~g.busy)
            else:
                add(metric, g.labels(False), values, np.ones(N, bool))
    host, host_label, uuid, index, model = MIG_PARENT_POWER
    parent = {"gpu": str(index), "UUID": uuid, "modelName": model, host_label: host}
    add("DCGM_FI_DEV_POWER_USAGE", parent, np.full(N, 250.0), np.ones(N, bool))
    return families


def expected(fleet: list[Gpu], step_s: int) -> dict[tuple[str, int | None, int], dict[str, float]]:
    """(uuid, mig_instance, ts epoch s) -> the step averages of the generated samples in (ts-step, ts]."""
    times = sample_times()
    bins = (times - START.timestamp()) // step_s  # sample i falls in the step ending at START+(bin+1)*step
    ends = START.timestamp() + (bins + 1) * step_s
    out: dict[tuple[str, int | None, int], dict[str, float]] = {}
    uniq, first = np.unique(ends, return_index=True)
    bounds = [*first[1:], len(times)]
    for g in fleet:
        avgs = {m: np.add.reduceat(v, first) / np.diff([*first, len(times)]) for m, v in g.metrics.items()}
        last = {m: v[np.array(bounds) - 1] for m, v in g.metrics.items()}
        for j, ts in enumerate(uniq):
            row = {m: float(a[j]) for m, a in avgs.items()}
            row |= {f"last:{m}": float(a[j]) for m, a in last.items()}
            row["busy_any"] = float(g.busy[first[j]:bounds[j]].any())
            out[(g.uuid, g.mig_instance, int(ts))] = row
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PromServer:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        """Stop by PID: terminate, wait, then kill."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)


def backfill(promtool: str, openmetrics: Path, tsdb: Path) -> None:
    tsdb.mkdir(parents=True, exist_ok=True)
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=200h",
                    str(openmetrics), str(tsdb)], check=True, capture_output=True, timeout=300)


def start_prometheus(prometheus: str, tsdb: Path, work: Path, timeout_s: float = 60,
                     config_text: str = "global:\n  scrape_interval: 1h\n") -> PromServer:
    """A Prometheus on 127.0.0.1 (a free port); by default with no scrape targets."""
    config = work / "prometheus.yml"
    config.write_text(config_text, encoding="utf-8")
    port = free_port()
    log = work / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tsdb}",
             "--storage.tsdb.retention.time=10y", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT, cwd=work, start_new_session=True)
    server = PromServer(url=f"http://127.0.0.1:{port}", proc=proc, log=log)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    if wait_until(ready, timeout_s, poll_s=0.2):
        return server
    server.stop()
    raise RuntimeError(f"prometheus not ready after {timeout_s}s: {log.read_text()[-2000:]}")


def write_gauge_families(path: Path, lines: dict[str, list[str]]) -> None:
    """OpenMetrics text of gauge families given as exposition lines per metric: each family's series contiguous
    and each series in time order, as promtool's backfill requires."""
    with path.open("w", encoding="utf-8") as out:
        for metric, rows in lines.items():
            rows.sort(key=lambda r: (r.rsplit(" ", 2)[0], int(r.rsplit(" ", 1)[1])))
            out.write(f"# TYPE {metric} gauge\n")
            out.write("\n".join(rows) + "\n")
        out.write("# EOF\n")


def served(prometheus: str, promtool: str, openmetrics: Path, work: Path) -> Iterator[PromServer]:
    """Generator for a fixture: an OpenMetrics file backfilled into a fresh TSDB under `work`, served, stopped
    afterwards."""
    backfill(promtool, openmetrics, work / "tsdb")
    server = start_prometheus(prometheus, work / "tsdb", work)
    try:
        yield server
    finally:
        server.stop()


def fleet_server(prometheus: str, promtool: str, work: Path) -> Iterator[tuple[PromServer, list[Gpu]]]:
    """Generator for a fixture: the fleet backfilled into a fresh TSDB, served, and stopped afterwards."""
    fleet = build_fleet()
    om = work / "fleet.om.txt"
    write_openmetrics(om, fleet_families(fleet))
    backfill(promtool, om, work / "tsdb")
    om.unlink()
    server = start_prometheus(prometheus, work / "tsdb", work)
    try:
        yield server, fleet
    finally:
        server.stop()


def env_without_prom_secrets() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GPUAUDIT_PROM_")}


def epoch(dt: datetime) -> int:
    return int(dt.timestamp())


def window(days: float, start: datetime = START) -> tuple[datetime, datetime]:
    return start, start + timedelta(days=days)

