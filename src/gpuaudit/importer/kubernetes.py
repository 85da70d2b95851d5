"""Kubernetes GPU allocations from kube-state-metrics, read through Prometheus.

kube-state-metrics (docs/metrics/workload/pod-metrics.md) exports
- `kube_pod_container_resource_requests{namespace, pod, uid, container, node, resource, unit}`: one series per
  container and resource; the resource name is sanitized for Prometheus (`nvidia.com/gpu` -> `nvidia_com_gpu`,
  a MIG resource `nvidia.com/mig-3g.40gb` -> `nvidia_com_mig_3g_40gb`), unit `integer`;
- `kube_pod_init_container_resource_requests{...}`: the same for the init containers (internal/store/pod.go);
- `kube_pod_status_phase{namespace, pod, uid, phase}`: 1 for the pod's current phase, 0 for the others.

A pod holds its GPUs while it is Running: per resource, the larger of its app containers' requests (summed) and
its largest init container's (the scheduler's effective request), joined with its Running phase,
on the node the `node` label names. Evaluated at each step of the window, the consecutive steps a pod is present
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
from gpuaudit.errors import GpuauditError
from gpuaudit.importer.promclient import MAX_POINTS, PromClient, Transport, chunks
from gpuaudit.importer.timespec import align_down

SOURCE = schema.ALLOC_SOURCE_KUBERNETES
_MIG_RESOURCE = re.compile(r"nvidia_com_mig_(\d)g_(\d+)gb")
_RESOURCES = "nvidia_com_gpu|nvidia_com_mig_.+"
_KEY = ("namespace", "pod", "uid", "node", "resource")


def requests_query(selector: str = "") -> str:
    """PromQL: GPUs requested per running pod, node and GPU resource, as the scheduler reserves them: the larger
    of the sum of the app containers' requests and the largest init container's (several kube-state-metrics
    replicas report the same series: `max` over the replicas of each container, and over the pod's phase)."""
    extra = f", {selector}" if selector else ""
    by = ", ".join(_KEY)

    def per_container(metric: str) -> str:
        return f'max by ({by}, container) ({metric}{{resource=~"{_RESOURCES}"{extra}}})'

    app = f'label_replace(sum by ({by}) ({per_container("kube_pod_container_resource_requests")}), ' \
          '"gpuaudit_part", "app", "pod", ".*")'
    init = f'label_replace(max by ({by}) ({per_container("kube_pod_init_container_resource_requests")}), ' \
           '"gpuaudit_part", "init", "pod", ".*")'
    return (f'max by ({by}) ({app} or {init}) '
            f'* on (namespace, pod, uid) group_left () '
            f'(max by (namespace, pod, uid) (kube_pod_status_phase{{phase="Running"{extra}}}) == 1)')


def gpu_equivalents(resource: str, count: float) -> tuple[float, str | None]:
    """(GPU equivalents, MIG profile) of `count` units of a sanitized resource name."""
    m = _MIG_RESOURCE.fullmatch(resource)
    if m:
        profile = f"{m.group(1)}g.{m.group(2)}gb"
        return count * schema.mig_fraction(profile), profile
    return count, None


@dataclass
class KubeImport:
    start: datetime  # the window evaluated (step-aligned): the import replaces this source's rows in it
    end: datetime
    rows: list[dict[str, Any]] = field(default_factory=list)
    pods: int = 0
    skipped: dict[str, int] = field(default_factory=dict)


def import_rows(client: PromClient | Transport, start: datetime, end: datetime, step_s: int, *,
                selector: str = "", max_points: int = MAX_POINTS) -> KubeImport:
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
    try:
        query = requests_query(selector)
        for first, last in chunks(start, end, step_s, max_points):
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
    out = KubeImport(start, end)
    pods: set[tuple[str, str, str]] = set()
    for (namespace, pod, uid, node, resource), series in sorted(points.items()):
        if not node:
            out.skipped["no node label"] = out.skipped.get("no node label", 0) + 1
            continue
        for run_start, run_end, count in _runs(series, step_s):
            if count <= 0:
                continue
            gpus, mig = gpu_equivalents(resource, count)
            pods.add((namespace, pod, uid))
            out.rows.append({
                "job_id": f"{namespace}/{pod}", "job_id_raw": uid or None, "user": None, "account": None,
                "partition": None, "namespace": namespace or None, "host": node, "gpus": gpus, "gpu_type": None,
                "mig_profile": mig,
                "start_ts": datetime.fromtimestamp(run_start, UTC),
                "end_ts": datetime.fromtimestamp(run_end, UTC),
                "state": "Running", "source": SOURCE,
            })
    out.pods = len(pods)
    return out


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

    got = import_rows(client, start, end, step_s, selector=selector, max_points=max_points)
    return store_rows(root, got.rows, SOURCE, got.pods, got.skipped, {}, window=(got.start, got.end))
