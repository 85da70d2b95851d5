"""Kubernetes GPU allocations from kube-state-metrics, read through Prometheus.

kube-state-metrics (docs/metrics/workload/pod-metrics.md) exports
- `kube_pod_container_resource_requests{namespace, pod, uid, container, node, resource, unit}`: one series per
  container and resource; the resource name is sanitized for Prometheus (`nvidia.com/gpu` -> `nvidia_com_gpu`,
  a MIG resource `nvidia.com/mig-3g.40gb` -> `nvidia_com_mig_3g_40gb`), unit `integer`;
- `kube_pod_init_container_resource_requests{...}`: the same for the init containers (internal/store/pod.go);
- `kube_pod_status_phase{namespace, pod, uid, phase}`: 1 for the pod's current phase, 0 for the others;
- `kube_node_labels{node, label_<name>...}` (internal/store/node.go): the node's Kubernetes labels named in
  `--metric-labels-allowlist=nodes=[...]`, each as `label_` + the name with every character outside
  [a-zA-Z0-9_] replaced by `_`, snake-cased (internal/store/utils.go): GPU feature discovery's
  `nvidia.com/gpu.product` (e.g. NVIDIA-H100-80GB-HBM3) is `label_nvidia_com_gpu_product`, and only there when
  the allowlist names it.

A pod holds its GPUs while it is Running: per resource, the larger of its app containers' requests (summed) and
its largest init container's (the scheduler's effective request), joined with its Running phase,
on the node the `node` label names, with that node's GPU product (gpu_type) and its model key (gpu_model,
gpuaudit.catalog) while the pod ran; where kube-state-metrics does not export the label, the model stays empty
and the import says why (never guessed). Evaluated at each step of the window, the consecutive steps a pod is present
become one allocation row (each evaluation standing for the step that ends at it): the row's edges are only as
exact as the step. An import replaces this source's rows inside its window (importer.allocations), so
overlapping imports never count a pod twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpuaudit import schema
from gpuaudit.catalog import model_key
from gpuaudit.errors import GpuauditError
from gpuaudit.importer.promclient import MAX_POINTS, PromClient, Transport, chunks
from gpuaudit.importer.timespec import align_down

SOURCE = schema.ALLOC_SOURCE_KUBERNETES
_MIG_RESOURCE = re.compile(r"nvidia_com_mig_(\d)g_(\d+)gb")
_RESOURCES = "nvidia_com_gpu|nvidia_com_mig_.+"
_KEY = ("namespace", "pod", "uid", "node", "resource")
_PRODUCT_LABEL = "label_nvidia_com_gpu_product"  # kube-state-metrics' name of the node label nvidia.com/gpu.product
ALLOWLIST_FLAG = "--metric-labels-allowlist=nodes=[nvidia.com/gpu.product]"


def _requests_query(selector: str = "") -> str:
    """PromQL: GPUs requested per running pod, node and GPU resource, as the scheduler reserves them: the larger
    of the sum of the app containers' requests and the largest init container's (several kube-state-metrics
    replicas report the same series: `max` over the replicas of each container, and over the pod's phase)."""
    extra = f", {selector}" if selector else ""
    by = ", ".join(_KEY)

    def per_container(metric: str) -> str:
        return f'max by ({by}, container) ({metric}{{resource=~"{_RESOURCES}"{extra}}})'

    app = f'label_replace(sum by ({by}) ({per_container("kube_pod_container_resource_requests")}), '\
          '"gpuaudit_part", "app", "pod", ".*")'
    init = f'label_replace(max by ({by}) ({per_container("kube_pod_init_container_resource_requests")}), '\
           '"gpuaudit_part", "init", "pod", ".*")'
    return (f'max by ({by}) ({app} or {init}) '
            f'* on (namespace, pod, uid) group_left () '
            f'(max by (namespace, pod, uid) (kube_pod_status_phase{{phase="Running"{extra}}}) == 1)')


def _products_query(selector: str = "") -> str:
    """PromQL: each node's GPU product label (replicas of kube-state-metrics report the same series)."""
    extra = f", {selector}" if selector else ""
    return f'max by (node, {_PRODUCT_LABEL}) (kube_node_labels{{{_PRODUCT_LABEL}!=""{extra}}})'


def gpu_equivalents(resource: str, count: float) -> tuple[float, str | None]:
    """(GPU equivalents, MIG profile) of `count` units of a sanitized resource name."""
    m = _MIG_RESOURCE.fullmatch(resource)
    if m:
        profile = f"{m.group(1)}g.{m.group(2)}gb"
        return count * schema.mig_fraction(profile), profile
    return count, None


@dataclass
class _KubeImport:
    start: datetime  # the window evaluated (step-aligned): the import replaces this source's rows in it
    end: datetime
    rows: list[dict[str, Any]] = field(default_factory=list)
    pods: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _import_rows(client: PromClient | Transport, start: datetime, end: datetime, step_s: int, *,
                selector: str = "", max_points: int = MAX_POINTS) -> _KubeImport:
    """Allocation rows (one per pod run per node and resource) for [start, end] from kube-state-metrics."""
    for t, what in ((start, "start"), (end, "end")):
        if t.tzinfo is None:
            raise GpuauditError(f"{what} time must be timezone-aware (UTC)")
    end = min(end, datetime.now(UTC))
    start, end = align_down(start, step_s), align_down(end, step_s)
    if end <= start:
        raise GpuauditError(f"empty window: the end ({end:%Y-%m-%dT%H:%M:%SZ}) must be at least one step "
                            f"({step_s}s) after the start ({start:%Y-%m-%dT%H:%M:%SZ})")
    owned = isinstance(client, Transport)
    prom = PromClient(client) if isinstance(client, Transport) else client
    points: dict[tuple[str, ...], dict[int, float]] = {}
    products: dict[str, dict[int, str]] = {}  # node -> evaluation time -> product
    try:
        query = _requests_query(selector)
        for first, last in chunks(start, end, step_s, max_points):
            for item in prom.query_range(_products_query(selector), first, last, step_s):
                node, product = (str(item["metric"].get(k, "")) for k in ("node", _PRODUCT_LABEL))
                at = products.setdefault(node, {})
                for pair in item["values"]:
                    try:
                        at[int(float(pair[0]))] = product
                    except (TypeError, ValueError, IndexError):
                        raise GpuauditError(f"malformed response from {prom.t.url}: a point of "
                                            "kube_node_labels is not [time, value]") from None
            for item in prom.query_range(query, first, last, step_s):
                labels = item["metric"]
                key = tuple(str(labels.get(k, "")) for k in _KEY)
                series = points.setdefault(key, {})
                for pair in item["values"]:
                    try:
                        ts, value = int(float(pair[0])), float(pair[1])
                    except (TypeError, ValueError, IndexError):
                        raise GpuauditError(f"malformed response from {prom.t.url}: a point of "
                                            f"kube_pod_container_resource_requests is not [time, value]") from None
                    series[ts] = value
    finally:
        if owned:
            prom.pc.close()
    out = _KubeImport(start, end)
    pods: set[tuple[str, str, str]] = set()
    unlabelled: set[str] = set()
    for (namespace, pod, uid, node, resource), series in sorted(points.items()):
        if not node:
            out.skipped["no node label"] = out.skipped.get("no node label", 0) + 1
            continue
        for run_start, run_end, count in _runs(series, step_s):
            if count <= 0:
                continue
            gpus, mig = gpu_equivalents(resource, count)
            pods.add((namespace, pod, uid))
            gpu_product = _product(products.get(node, {}), run_start, run_end)
            if gpu_product is None:
                unlabelled.add(node)
            out.rows.append({
                "job_id": f"{namespace}/{pod}", "job_id_raw": uid or None, "user": None, "account": None,
                "partition": None, "namespace": namespace or None, "host": node, "gpus": gpus,
                "gpu_type": gpu_product, "gpu_model": model_key(gpu_product) if gpu_product else None,
                "mig_profile": mig,
                "start_ts": datetime.fromtimestamp(run_start, UTC),
                "end_ts": datetime.fromtimestamp(run_end, UTC),
                "state": "Running", "source": SOURCE,
            })
    out.pods = len(pods)
    if unlabelled and not products:
        out.warnings.append(f"kube_node_labels has no {_PRODUCT_LABEL}: the GPU model of the Kubernetes "
                            f"allocations is left empty (run kube-state-metrics with {ALLOWLIST_FLAG}; GPU feature "
                            "discovery sets the node label)")
    elif unlabelled:
        shown = sorted(unlabelled)
        out.warnings.append(f"{len(shown)} of the nodes with GPU allocations had no nvidia.com/gpu.product label "
                            f"in kube_node_labels while their pods ran (e.g. {shown[0]}): the GPU model of their "
                            "allocations is left empty (is GPU feature discovery running there?)")
    return out


def _product(at: dict[int, str], run_start: int, run_end: int) -> str | None:
    """The node's GPU product at the last evaluation of (run_start, run_end] that has one."""
    seen = [t for t in at if run_start < t <= run_end]
    return at[max(seen)] if seen else None


def _runs(series: dict[int, float], step_s: int) -> list[tuple[int, int, float]]:
    """Consecutive steps with the same value -> (start, end, value). As a sample's `ts` in the dataset, each
    evaluation stands for the step that ends at it: a pod present at t, t+step, ..., t+k*step held its GPUs
    over (t - step, t + k*step]."""
    out: list[tuple[int, int, float]] = []
    for ts in sorted(series):
        v = series[ts]
        if out and ts == out[-1][1] + step_s and v == out[-1][2]:
            out[-1] = (out[-1][0], ts, v)
        else:
            out.append((ts - step_s, ts, v))
    return out



def import_kubernetes(root: Any, client: PromClient | Transport, start: datetime, end: datetime, step_s: int, *,
                      selector: str = "", max_points: int = MAX_POINTS) -> Any:
    """Query kube-state-metrics for [start, end] and write the pods' GPU allocations into the dataset at `root`,
    replacing what earlier imports wrote inside the window."""
    from gpuaudit.importer.allocations import store_rows

    got = _import_rows(client, start, end, step_s, selector=selector, max_points=max_points)
    return store_rows(root, got.rows, SOURCE, got.pods, got.skipped, {}, window=(got.start, got.end),
                      warnings=got.warnings)
