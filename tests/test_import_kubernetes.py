"""`import kubernetes` against a real Prometheus serving a backfilled day of kube-state-metrics series.

The series have kube-state-metrics' names and labels (docs/metrics/workload/pod-metrics.md):
kube_pod_container_resource_requests{namespace, pod, uid, container, node, resource, unit} with the resource
sanitized (`nvidia.com/gpu` -> nvidia_com_gpu, `nvidia.com/mig-3g.40gb` -> nvidia_com_mig_3g_40gb), and
kube_pod_status_phase{namespace, pod, uid, phase} = 1 for the current phase, 0 for the others, and
kube_pod_init_container_resource_requests with the same labels for the init containers (internal/store/pod.go:
createPodInitContainerResourceRequestsFamilyGenerator; extended resources such as nvidia.com/gpu in unit
`integer`).
kube_node_labels{node, label_<name>} carries the node labels kube-state-metrics' --metric-labels-allowlist names
(internal/store/node.go, utils.go: `label_` + the name with characters outside [a-zA-Z0-9_] made `_`, snake
case): GPU feature discovery's nvidia.com/gpu.product is label_nvidia_com_gpu_product."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from tests.helpers import one_error_line, require_binary, run_cli
from tests.prom_helpers import START, PromServer, served

from gpuaudit.importer.kubernetes import import_kubernetes
from gpuaudit.importer.promclient import transport
from gpuaudit.store import open_dataset

pytestmark = pytest.mark.prometheus
HOW = "install Prometheus (it ships promtool): apt-get install --no-install-recommends prometheus"
DAY = 86400
SPACING_S, OFFSET_S = 60, 7
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def _phase_at(pod: str, t: int) -> str:
    """train-0 waits 01:30-02:00, runs 02:00-06:00, then has succeeded; the others run all day."""
    if pod != "train-0":
        return "Running"
    h = t / 3600
    return "Pending" if h < 2 else "Running" if h < 6 else "Succeeded"


PODS = [  # (namespace, pod, uid, node, [(container, resource, value)], [instances], first second)
    ("ml", "train-0", "uid-a", "gpu-node-1", [("main", "nvidia_com_gpu", 2), ("log", "cpu", 0.5)], ["ksm-0"], 5400),
    ("research", "notebook", "uid-b", "gpu-node-2", [("jupyter", "nvidia_com_mig_3g_40gb", 1)],
     ["ksm-0", "ksm-1"], 0),  # two kube-state-metrics replicas report the same series
    ("web", "api", "uid-c", "cpu-node-1", [("app", "cpu", 2)], ["ksm-0"], 0),
    # Init containers: the scheduler reserves max(largest init container, sum of the app containers).
    ("ml", "warmup", "uid-d", "gpu-node-3", [("main", "nvidia_com_gpu", 1), ("eval", "nvidia_com_gpu", 1)],
     ["ksm-0"], 0),
    ("ml", "fetch", "uid-e", "gpu-node-3", [("main", "nvidia_com_gpu", 2)], ["ksm-0"], 0),
    ("ml", "convert", "uid-f", "gpu-node-4", [("main", "cpu", 1)], ["ksm-0"], 0),
    # The mixed MIG strategy: `nvidia.com/mig-1g.10gb` (an 80 GB A100/H100, 7 slices) and an A30's
    # `nvidia.com/mig-1g.6gb` (4 slices), as kube-state-metrics sanitizes them.
    ("ml", "mig-h100", "uid-g", "gpu-node-5", [("main", "nvidia_com_mig_1g_10gb", 2)], ["ksm-0"], 0),
    ("ml", "mig-a30", "uid-h", "gpu-node-6", [("main", "nvidia_com_mig_1g_6gb", 1)], ["ksm-0"], 0),
]
MIG_GPUS = {"ml/mig-h100": ("1g.10gb", 2 / 7), "ml/mig-a30": ("1g.6gb", 1 / 4)}
# Init containers per pod: warmup's (4 GPUs) is larger than its app containers' sum (2), fetch's (1) smaller
# than its app container's (2); convert's app containers request no GPU, its init container 1.
INIT = {"warmup": [("compile", "nvidia_com_gpu", 4), ("sync", "nvidia_com_gpu", 1)],
        "fetch": [("download", "nvidia_com_gpu", 1)], "convert": [("convert", "nvidia_com_gpu", 1)]}
INIT_GPUS = {"ml/warmup": 4, "ml/fetch": 2, "ml/convert": 1}
# nvidia.com/gpu.product per node as GPU feature discovery sets it (the product name, spaces as '-'); gpu-node-6's
# series carries only another allowlisted label (its GPU feature discovery is not running).
PRODUCTS = {"gpu-node-1": "NVIDIA-H100-80GB-HBM3", "gpu-node-2": "NVIDIA-A100-SXM4-80GB", "gpu-node-3": "Tesla-T4",
            "gpu-node-4": "NVIDIA-L4", "gpu-node-5": "NVIDIA-H100-80GB-HBM3"}
MODELS = {"ml/train-0": "h100-sxm-80gb", "research/notebook": "a100-sxm-80gb", "ml/warmup": "t4", "ml/fetch": "t4",
          "ml/convert": "l4", "ml/mig-h100": "h100-sxm-80gb", "ml/mig-a30": None}


def _openmetrics(path: Path) -> None:
    base = int(START.timestamp())
    times = range(OFFSET_S, DAY, SPACING_S)
    with path.open("w") as out:
        out.write("# TYPE kube_pod_container_resource_requests gauge\n")
        for ns, pod, uid, node, containers, instances, first in PODS:
            for inst in instances:
                for container, resource, value in containers:
                    unit = "core" if resource == "cpu" else "integer"
                    labels = (f'namespace="{ns}",pod="{pod}",uid="{uid}",container="{container}",node="{node}",'
                              f'resource="{resource}",unit="{unit}",instance="{inst}"')
                    out.writelines(f"kube_pod_container_resource_requests{{{labels}}} {value} {base + t}\n"
                                   for t in times if t >= first)
        out.write("# TYPE kube_pod_init_container_resource_requests gauge\n")
        for ns, pod, uid, node, _c, instances, first in PODS:
            for inst in instances:
                for container, resource, value in INIT.get(pod, []):
                    labels = (f'namespace="{ns}",pod="{pod}",uid="{uid}",container="{container}",node="{node}",'
                              f'resource="{resource}",unit="integer",instance="{inst}"')
                    out.writelines(f"kube_pod_init_container_resource_requests{{{labels}}} {value} {base + t}\n"
                                   for t in times if t >= first)
        out.write("# TYPE kube_node_labels gauge\n")
        for node in sorted({p[3] for p in PODS}):
            for inst in ("ksm-0", "ksm-1"):
                label = (f'label_nvidia_com_gpu_product="{PRODUCTS[node]}"' if node in PRODUCTS
                         else 'label_topology_kubernetes_io_zone="zone-b"')
                out.writelines(f'kube_node_labels{{node="{node}",{label},instance="{inst}"}} 1 {base + t}\n'
                               for t in times)
        out.write("# TYPE kube_pod_status_phase gauge\n")
        for ns, pod, uid, _node, _c, instances, first in PODS:
            for inst in instances:
                for phase in PHASES:
                    labels = f'namespace="{ns}",pod="{pod}",uid="{uid}",phase="{phase}",instance="{inst}"'
                    out.writelines(f"kube_pod_status_phase{{{labels}}} {int(_phase_at(pod, t) == phase)} "
                                   f"{base + t}\n" for t in times if t >= first)
        out.write("# EOF\n")


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromServer]:
    prometheus = require_binary("prometheus", HOW)
    promtool = require_binary("promtool", HOW)
    work = tmp_path_factory.mktemp("ksm")
    om = work / "ksm.om.txt"
    _openmetrics(om)
    yield from served(prometheus, promtool, om, work)


def _rows(root: Path) -> list[tuple]:
    with open_dataset(root) as ds:
        return ds.fetchall("SELECT job_id, job_id_raw, namespace, host, gpus, mig_profile, start_ts, end_ts, "
                           "source FROM allocations ORDER BY job_id, start_ts")


def _gpu_hours(root: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for job, _raw, _ns, _host, gpus, _mig, start, end, _src in _rows(root):
        out[job] = out.get(job, 0.0) + gpus * (end - start).total_seconds() / 3600
    return out


def test_running_pods_gpu_requests_become_allocations(prom: PromServer, tmp_path: Path) -> None:
    """train-0: 2 GPUs while Running 02:00-06:00 (not while Pending, not after it Succeeded) = 8 GPU-h; the
    notebook's MIG slice 3g.40gb all day = 24 x 3/7, once although two replicas report it; a CPU-only pod none."""
    root = tmp_path / "d"
    s = import_kubernetes(root, transport(prom.url, retries=0), START, START + timedelta(days=1), 60)
    assert s.jobs == 2 + len(INIT_GPUS) + len(MIG_GPUS)
    rows = _rows(root)
    train = [r for r in rows if r[0] == "ml/train-0"]
    assert len(train) == 1
    assert train[0][1:4] == ("uid-a", "ml", "gpu-node-1")
    assert (train[0][6], train[0][7]) == (START + timedelta(hours=2), START + timedelta(hours=6))
    nb = [r for r in rows if r[0] == "research/notebook"]
    assert nb[0][5] == "3g.40gb" and nb[0][4] == pytest.approx(3 / 7)
    hours = _gpu_hours(root)
    assert hours.keys() == {"ml/train-0", "research/notebook", *INIT_GPUS, *MIG_GPUS}
    assert hours["ml/train-0"] == pytest.approx(8.0)
    assert hours["research/notebook"] == pytest.approx(24 * 3 / 7)


def test_init_containers_reserve_the_larger_of_the_largest_and_the_app_sum(prom: PromServer,
                                                                            tmp_path: Path) -> None:
    """Issue 27.3: init containers' requests are exported in their own metric; the importer read only the app
    containers', so a pod whose init container asks for more GPUs than its app containers (or whose app
    containers ask for none) was under-counted or missing. The pod's GPUs are, per resource, the larger of the
    largest init container's request and the sum of the app containers' (the scheduler's effective request)."""
    root = tmp_path / "d"
    import_kubernetes(root, transport(prom.url, retries=0), START, START + timedelta(days=1), 60)
    rows = {r[0]: r for r in _rows(root)}
    for job, gpus in INIT_GPUS.items():
        assert rows[job][4] == pytest.approx(gpus), job
    hours = _gpu_hours(root)
    assert {j: hours[j] for j in INIT_GPUS} == pytest.approx({j: 24 * g for j, g in INIT_GPUS.items()})


def test_mig_resources_count_as_their_share_of_the_model(prom: PromServer, tmp_path: Path) -> None:
    """Issue 27.4: under the mixed MIG strategy a pod requests `nvidia.com/mig-<profile>`; each slice counts as
    its profile's compute slices over its GPU model's: 1g.10gb is 1/7 of an 80 GB GPU, an A30's 1g.6gb 1/4 (the
    importer counted every profile over 7 slices)."""
    root = tmp_path / "d"
    import_kubernetes(root, transport(prom.url, retries=0), START, START + timedelta(days=1), 60)
    rows = {r[0]: r for r in _rows(root)}
    assert {j: rows[j][5] for j in MIG_GPUS} == {j: p for j, (p, _g) in MIG_GPUS.items()}
    assert {j: rows[j][4] for j in MIG_GPUS} == pytest.approx({j: g for j, (_p, g) in MIG_GPUS.items()})
    hours = _gpu_hours(root)
    assert {j: hours[j] for j in MIG_GPUS} == pytest.approx({j: 24 * g for j, (_p, g) in MIG_GPUS.items()})


def test_each_allocation_carries_its_nodes_gpu_model(prom: PromServer, tmp_path: Path) -> None:
    """Issue 25.6: Kubernetes allocations had no GPU model (gpu_type null), so a mixed fleet's allocations could
    not be priced per model. The node's nvidia.com/gpu.product (kube_node_labels) is the row's gpu_type and its
    catalogue key the gpu_model; a node without the label leaves it empty, said once, never guessed."""
    root = tmp_path / "d"
    s = import_kubernetes(root, transport(prom.url, retries=0), START, START + timedelta(days=1), 60)
    with open_dataset(root) as ds:
        got = dict(ds.fetchall("SELECT DISTINCT job_id, gpu_model FROM allocations"))
        types = dict(ds.fetchall("SELECT DISTINCT host, gpu_type FROM allocations"))
    assert got == MODELS
    assert types == {**{n: p for n, p in PRODUCTS.items()}, "gpu-node-6": None}
    assert len(s.warnings) == 1 and "e.g. gpu-node-6" in s.warnings[0], s.warnings


def test_overlapping_imports_replace_their_window(prom: PromServer, tmp_path: Path) -> None:
    root = tmp_path / "d"
    conn = transport(prom.url, retries=0)
    import_kubernetes(root, conn, START, START + timedelta(days=1), 60)
    first = _gpu_hours(root)
    again = import_kubernetes(root, conn, START + timedelta(hours=4), START + timedelta(hours=12), 300)
    assert again.replaced == 2 + len(INIT_GPUS) + len(MIG_GPUS)
    hours = _gpu_hours(root)
    assert hours == pytest.approx(first)


def test_cli_import_kubernetes(prom: PromServer, tmp_path: Path) -> None:
    r = run_cli("import", "kubernetes", "--url", prom.url, "--start", START.isoformat(),
                "--end", (START + timedelta(days=1)).isoformat(), "--data", str(tmp_path))
    assert r.returncode == 0, r.stderr
    pods = 2 + len(INIT_GPUS) + len(MIG_GPUS)
    assert f"imported {pods} allocation rows ({pods} pods" in r.stdout
    assert "gpuaudit: warning: 1 of the nodes with GPU allocations had no nvidia.com/gpu.product" in r.stderr
    r = run_cli("import", "kubernetes", "--url", "ftp://x", "--data", str(tmp_path))
    assert "bad --url" in one_error_line(r)
