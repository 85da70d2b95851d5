"""The four-state ledger on a Kubernetes fleet imported from a real Prometheus.

Twelve hours backfilled, as the exporters' own sources shape the series:
- dcgm-exporter (internal/pkg/transformation/kubernetes.go): DCGM_FI_* per GPU with `gpu`, `UUID`, `device`,
  `modelName`, `Hostname`; while a pod holds the GPU its series carry `pod`, `namespace`, `container` (the bare
  series otherwise). Node gpu-b runs the device plugin with deviceIDStrategy=index: dcgm-exporter cannot map
  its GPUs to pods, so its series never carry pod labels (the GPUs read as held by their framebuffer use).
- kube-state-metrics (internal/store/pod.go): kube_pod_container_resource_requests and kube_pod_status_phase
  with namespace, pod, uid (and node, resource, unit, container).

gpu-a: StatefulSet pod ml/web-0 (uid-a) on GPUs 0, 1 from 0 h to 4 h, working 0-2 h; deleted, recreated as
uid-b on GPUs 2, 3 from 6 h to 10 h, working 6-8 h. gpu-b: ml/train (uid-t) 2 GPUs all 12 h, on GPUs 2, 3 (held
at SM 0.5, unlabelled), GPUs 0, 1 idle. The ledger, per GPU-hour by construction:
productive 16, held_idle 16, allocated_no_process 8 (web-0's idle hours), unallocated 56."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest
from tests.helpers import require_binary
from tests.prom_helpers import START, PromServer, served, write_gauge_families

from gpuaudit.analysis.ledger import STATES, ledger
from gpuaudit.analysis.stage1.rollup import load_rollups
from gpuaudit.importer.kubernetes import ALLOWLIST_FLAG, import_kubernetes
from gpuaudit.importer.promclient import transport
from gpuaudit.importer.prometheus import import_prometheus
from gpuaudit.importer.prometheus.mapping import build_mapping
from gpuaudit.store import open_dataset

pytestmark = pytest.mark.prometheus
HOW = "install Prometheus (it ships promtool): apt-get install --no-install-recommends prometheus"
HOURS = 12
SPACING_S, OFFSET_S = 60, 7
N = HOURS * 3600 // SPACING_S
MIB = 1024 * 1024
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
# (node, gpu index) -> (pod, uid, hours held with work, or None for unlabelled)
WORK = {("gpu-a", 0): ("web-0", (0, 2)), ("gpu-a", 1): ("web-0", (0, 2)),
        ("gpu-a", 2): ("web-0", (6, 8)), ("gpu-a", 3): ("web-0", (6, 8)),
        ("gpu-b", 2): (None, (0, HOURS)), ("gpu-b", 3): (None, (0, HOURS))}
# (pod, uid, node, gpus, running hours)
PODS = [("web-0", "uid-a", "gpu-a", 2, (0, 4)), ("web-0", "uid-b", "gpu-a", 2, (6, 10)),
        ("train", "uid-t", "gpu-b", 2, (0, HOURS))]
GONE_S = 600  # a deleted pod's series: 10 min of its last phase (> the 5 min lookback), then nothing


def _openmetrics(path: Path) -> None:
    base = int(START.timestamp())
    times = [OFFSET_S + SPACING_S * i for i in range(N)]
    lines: dict[str, list[str]] = {}
    for node in ("gpu-a", "gpu-b"):
        for k in range(4):
            pod, (h0, h1) = WORK.get((node, k), (None, (0, 0)))
            base_labels = (f'gpu="{k}",UUID="GPU-{node}-{k}",device="nvidia{k}",modelName="NVIDIA H100 80GB HBM3",'
                           f'Hostname="{node}"')
            for t in times:
                busy = h0 * 3600 <= t < h1 * 3600
                labels = base_labels + (f',pod="{pod}",namespace="ml",container="main"' if busy and pod else "")
                values = {"DCGM_FI_PROF_SM_ACTIVE": 0.5 if busy else 0.0, "DCGM_FI_DEV_GPU_UTIL": 60 if busy else 0,
                          "DCGM_FI_DEV_FB_USED": 40000 if busy else 0, "DCGM_FI_DEV_FB_FREE": 41559 if busy else 81559,
                          "DCGM_FI_DEV_POWER_USAGE": 500.0 if busy else 70.0}
                for metric, v in values.items():
                    lines.setdefault(metric, []).append(f"{metric}{{{labels}}} {v} {base + t}")
    for pod, uid, node, gpus, (h0, h1) in PODS:
        ident = f'namespace="ml",pod="{pod}",uid="{uid}"'
        for t in times:
            if not h0 * 3600 <= t < h1 * 3600 + GONE_S:
                continue
            running = t < h1 * 3600
            lines.setdefault("kube_pod_container_resource_requests", []).append(
                f'kube_pod_container_resource_requests{{{ident},container="main",node="{node}",'
                f'resource="nvidia_com_gpu",unit="integer"}} {gpus} {base + t}')
            for phase in PHASES:
                on = phase == ("Running" if running else "Succeeded")
                lines.setdefault("kube_pod_status_phase", []).append(
                    f'kube_pod_status_phase{{{ident},phase="{phase}"}} {int(on)} {base + t}')
    write_gauge_families(path, lines)


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromServer]:
    prometheus = require_binary("prometheus", HOW)
    promtool = require_binary("promtool", HOW)
    work = tmp_path_factory.mktemp("k8s-ledger")
    om = work / "fleet.om.txt"
    _openmetrics(om)
    yield from served(prometheus, promtool, om, work)


def test_recreated_pod_and_unlabelled_node_ledger_is_exact(prom: PromServer, tmp_path: Path) -> None:
    root = tmp_path / "d"
    start, end = START, START + timedelta(hours=HOURS)
    conn = transport(prom.url, retries=0)
    import_prometheus(root, conn, build_mapping(None, None, selector="", exporter_pod="dcgm-exporter"),
                      start, end, 60)
    import_kubernetes(root, conn, start, end, 60)
    roll = load_rollups(root)
    led, m = ledger(roll.gpu_hours, roll.holders, roll.allocations, start.timestamp(), end.timestamp(), False)
    assert led.scheduler_gpu_hours.value == pytest.approx(2 * 4 + 2 * 4 + 2 * 12)
    v = {s: getattr(led, s).value for s in STATES}
    assert v == pytest.approx({"productive": 16.0, "held_idle": 16.0, "allocated_no_process": 8.0,
                               "unallocated": 56.0}, abs=1e-6)
    # Each incarnation on its own GPUs; train on the held, unlabelled GPUs of gpu-b.
    g = m.gpu_hours.with_columns(((pl.col("hour_s") - start.timestamp()) / 3600).alias("h"))
    on = {(r["host"], r["gpu_uuid"]): r["allocated_s"] / 3600 for r in
          g.group_by("host", "gpu_uuid").agg(pl.col("allocated_s").sum()).to_dicts()}
    assert on == pytest.approx({("gpu-a", "GPU-gpu-a-0"): 4.0, ("gpu-a", "GPU-gpu-a-1"): 4.0,
                                ("gpu-a", "GPU-gpu-a-2"): 4.0, ("gpu-a", "GPU-gpu-a-3"): 4.0,
                                ("gpu-b", "GPU-gpu-b-0"): 0.0, ("gpu-b", "GPU-gpu-b-1"): 0.0,
                                ("gpu-b", "GPU-gpu-b-2"): 12.0, ("gpu-b", "GPU-gpu-b-3"): 12.0}, abs=1e-6)
    early = g.filter(pl.col("gpu_uuid").is_in(["GPU-gpu-a-2", "GPU-gpu-a-3"]) & (pl.col("h") < 4))
    assert early["allocated_s"].sum() == pytest.approx(0.0, abs=1e-6)


def test_without_the_node_label_allowlist_the_gpu_model_is_left_empty_and_said_once(prom: PromServer,
                                                                                    tmp_path: Path) -> None:
    """kube-state-metrics exports kube_node_labels only for the labels its allowlist names: this fleet's has
    none, so no allocation can carry a GPU model; the import says so once, naming the flag, and guesses none."""
    root = tmp_path / "d"
    s = import_kubernetes(root, transport(prom.url, retries=0), START, START + timedelta(hours=HOURS), 60)
    assert len(s.warnings) == 1 and ALLOWLIST_FLAG in s.warnings[0], s.warnings
    with open_dataset(root) as ds:
        assert ds.fetchall("SELECT DISTINCT gpu_type, gpu_model FROM allocations") == [(None, None)]
