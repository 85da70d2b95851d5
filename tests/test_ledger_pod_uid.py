"""The ledger matches a Kubernetes allocation to its pod's GPUs by the pod UID where the processes carry it
(issue 27.1), imported from a real Prometheus.

dcgm-exporter run with --kubernetes-enable-pod-uid (pkg/cmd/app.go) adds `pod_uid` beside pod, namespace and
container to every series of a GPU a pod holds (internal/pkg/transformation/kubernetes.go, uidAttribute in
const.go); kube-state-metrics' kube_pod_container_resource_requests and kube_pod_status_phase carry the pod's
`uid` (internal/store/pod.go).

gpu-a, 4 H100s, 4 hours: StatefulSet pod ml/web-0 (uid-a) holds GPUs 0, 1 from 0:00 to 2:40 and is deleted; its
next incarnation (uid-b, same name) holds GPUs 2, 3 from 2:40 to 4:00. In hour 2 both incarnations ran under the
same name on different GPUs: matched by name, each allocation is spread over all four GPUs; matched by UID,
each stays on its own. Per GPU-hour, by construction: GPUs 0, 1 allocated 60 + 60 + 40 min, GPUs 2, 3 20 + 60
min; held = allocated; SM activity 0.5 while held."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest
from tests.helpers import require_binary
from tests.prom_helpers import START, PromServer, served, write_gauge_families
from tests.store_helpers import T0, raw_file, samples_frame

from gpuaudit import store
from gpuaudit.analysis.ledger import STATES, ledger
from gpuaudit.analysis.stage1.rollup import load_rollups
from gpuaudit.importer.kubernetes import import_kubernetes
from gpuaudit.importer.promclient import transport
from gpuaudit.importer.prometheus import import_prometheus
from gpuaudit.importer.prometheus.mapping import build_mapping
from gpuaudit.store import open_dataset

HOW = "install Prometheus (it ships promtool): apt-get install --no-install-recommends prometheus"
HOURS = 4
SPACING_S, OFFSET_S = 60, 7
N = HOURS * 3600 // SPACING_S
SWAP_S = 2 * 3600 + 40 * 60  # 2:40, when uid-a is deleted and uid-b starts
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
# (uid, GPUs on gpu-a, [start, end) seconds)
PODS = [("uid-a", (0, 1), (0, SWAP_S)), ("uid-b", (2, 3), (SWAP_S, HOURS * 3600))]
GONE_S = 600  # a deleted pod's series: 10 min of its last phase (> the 5 min lookback), then nothing


def _holder(k: int, t: int) -> str | None:
    for uid, gpus, (t0, t1) in PODS:
        if k in gpus and t0 <= t < t1:
            return uid
    return None


def _openmetrics(path: Path) -> None:
    base = int(START.timestamp())
    times = [OFFSET_S + SPACING_S * i for i in range(N)]
    lines: dict[str, list[str]] = {}
    for k in range(4):
        base_labels = (f'gpu="{k}",UUID="GPU-a-{k}",device="nvidia{k}",modelName="NVIDIA H100 80GB HBM3",'
                       'Hostname="gpu-a"')
        for t in times:
            uid = _holder(k, t)
            labels = base_labels + (f',pod="web-0",namespace="ml",container="main",pod_uid="{uid}"' if uid else "")
            values = {"DCGM_FI_PROF_SM_ACTIVE": 0.5 if uid else 0.0, "DCGM_FI_DEV_GPU_UTIL": 60 if uid else 0,
                      "DCGM_FI_DEV_FB_USED": 40000 if uid else 0, "DCGM_FI_DEV_FB_FREE": 41559 if uid else 81559,
                      "DCGM_FI_DEV_POWER_USAGE": 500.0 if uid else 70.0}
            for metric, v in values.items():
                lines.setdefault(metric, []).append(f"{metric}{{{labels}}} {v} {base + t}")
    for uid, gpus, (t0, t1) in PODS:
        ident = f'namespace="ml",pod="web-0",uid="{uid}"'
        for t in times:
            if not t0 <= t < t1 + GONE_S:
                continue
            running = t < t1
            lines.setdefault("kube_pod_container_resource_requests", []).append(
                f'kube_pod_container_resource_requests{{{ident},container="main",node="gpu-a",'
                f'resource="nvidia_com_gpu",unit="integer"}} {len(gpus)} {base + t}')
            for phase in PHASES:
                on = phase == ("Running" if running else "Succeeded")
                lines.setdefault("kube_pod_status_phase", []).append(
                    f'kube_pod_status_phase{{{ident},phase="{phase}"}} {int(on)} {base + t}')
    write_gauge_families(path, lines)


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromServer]:
    prometheus = require_binary("prometheus", HOW)
    promtool = require_binary("promtool", HOW)
    work = tmp_path_factory.mktemp("pod-uid")
    om = work / "fleet.om.txt"
    _openmetrics(om)
    yield from served(prometheus, promtool, om, work)


@pytest.fixture(scope="module")
def dataset(prom: PromServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pod-uid-data") / "d"
    conn = transport(prom.url, retries=0)
    start, end = START, START + timedelta(hours=HOURS)
    import_prometheus(root, conn, build_mapping(None, None, selector="", exporter_pod="dcgm-exporter"), start, end,
                      60)
    import_kubernetes(root, conn, start, end, 60)
    return root


@pytest.mark.prometheus
def test_the_prometheus_import_keeps_dcgm_exporters_pod_uid(dataset: Path) -> None:
    """dcgm-exporter's pod_uid label was read as a time-slicing marker only and dropped: the processes had the
    pod's name and no UID. Each GPU's process rows carry its incarnation's UID, for exactly the time it held it."""
    with open_dataset(dataset) as ds:
        got = ds.fetchall("SELECT gpu_uuid, k8s_pod, pod_uid, count(*) FROM processes GROUP BY ALL ORDER BY ALL")
    minutes = {uid: (t1 - t0) // 60 for uid, _g, (t0, t1) in PODS}
    assert got == [(f"GPU-a-{k}", "web-0", uid, minutes[uid]) for uid, gpus, _t in PODS for k in gpus]


@pytest.mark.prometheus
def test_a_recreated_pod_in_the_same_hour_keeps_its_own_gpus(dataset: Path) -> None:
    start, end = START, START + timedelta(hours=HOURS)
    roll = load_rollups(dataset)
    led, m = ledger(roll.gpu_hours, roll.holders, roll.allocations, start.timestamp(), end.timestamp(), False)
    held = 2 * SWAP_S / 3600 + 2 * (HOURS * 3600 - SWAP_S) / 3600  # 8 GPU-hours
    assert led.scheduler_gpu_hours.value == pytest.approx(held)
    v = {s: getattr(led, s).value for s in STATES}
    assert v == pytest.approx({"productive": held / 2, "held_idle": held / 2, "allocated_no_process": 0.0,
                               "unallocated": 4 * HOURS - held}, abs=1e-6)
    g = m.gpu_hours.with_columns(((pl.col("hour_s") - start.timestamp()) // 3600).cast(pl.Int64).alias("h"))
    per = {(r["gpu_uuid"], r["h"]): round(r["allocated_s"] / 60, 6) for r in g.to_dicts()}
    expected = {(f"GPU-a-{k}", h): 0.0 for k in range(4) for h in range(HOURS)}
    expected |= {("GPU-a-0", 0): 60.0, ("GPU-a-0", 1): 60.0, ("GPU-a-0", 2): 40.0,
                 ("GPU-a-1", 0): 60.0, ("GPU-a-1", 1): 60.0, ("GPU-a-1", 2): 40.0,
                 ("GPU-a-2", 2): 20.0, ("GPU-a-2", 3): 60.0, ("GPU-a-3", 2): 20.0, ("GPU-a-3", 3): 60.0}
    assert per == pytest.approx(expected, abs=1e-6)


@pytest.mark.prometheus
def test_pod_uid_alone_marks_no_time_slicing(prom: PromServer, tmp_path: Path) -> None:
    """`pod_uid` was read as a time-slicing marker: with --kubernetes-enable-pod-uid every pod series carries it,
    so at a 7-minute step in which a pod arrived (02:35-02:42, the pod from 02:40) its duty-cycle series was taken
    as a pod's share beside the device-level one: the GPU's duty cycle read 0 and every GPU was reported
    time-sliced. Only `vgpu` (a shared device id, `<uuid>::N` or GKE's `/vgpuN`) marks a share; the step's
    series are averaged by their samples, as SM activity is."""
    root = tmp_path / "d"
    r = import_prometheus(root, transport(prom.url, retries=0),
                          build_mapping(None, None, selector="", exporter_pod="dcgm-exporter"), START,
                          START + timedelta(hours=HOURS), 420)
    assert not r.time_sliced
    with open_dataset(root) as ds:
        duty, sm = ds.fetchall("SELECT duty_cycle, sm_active FROM samples WHERE gpu_uuid = 'GPU-a-2' AND "
                               "ts = TIMESTAMPTZ '2026-01-05 02:42:00+00'")[0]
    assert (duty, sm) == (pytest.approx(0.6 * 2 / 7, abs=1e-3), pytest.approx(0.5 * 2 / 7, abs=1e-3))


def test_a_dataset_from_before_the_column_still_reads(tmp_path: Path) -> None:
    """Process files written before schema 3 have no pod_uid: they read as NULL and the ledger's stage 1 runs."""
    root = tmp_path / "d"
    store.write_table(root, "gpu_samples", samples_frame(60, hosts=("node-a",)))
    raw_file(root, "gpu_processes", [{"ts": T0 + timedelta(seconds=20 * i), "host": "node-a", "gpu_uuid": "GPU-0",
                                      "pid": 7, "user": "alice", "k8s_namespace": "ml", "k8s_pod": "web-0"}
                                     for i in range(1, 4)], name="old")
    with open_dataset(root) as ds:
        assert ds.fetchall("SELECT k8s_pod, pod_uid, count(*) FROM processes GROUP BY ALL") == [("web-0", None, 3)]
    holders = load_rollups(root).holders
    assert holders.select("k8s_pod", "pod_uid").unique().rows() == [("web-0", "")]
