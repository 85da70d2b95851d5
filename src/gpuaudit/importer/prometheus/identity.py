"""What one series is about: its GPU (a GPU is its UUID), the host it is on, and the workload on it.

Label maps come from the exporter preset (presets.py) and the user's --label overrides; this module only
applies them:
- host: the first label of the host list present. Node labels a relabeling put there (node, kubernetes_node,
  nodename) come first; the exporter's Hostname is the exporter pod's name before dcgm-exporter 3.1 in
  Kubernetes, and `instance` the pod's IP: both change at each exporter restart, so one UUID seen under several
  host values is one GPU (the importer stores it under one, see prometheus.py), and such values are flagged.
- pods: the Kubernetes naming style is chosen per series, in the preset's order; a style whose pod is the
  exporter itself (a ServiceMonitor's target labels, or the relabeling of NVIDIA/dcgm-exporter#78 that
  overwrites pod_name) is skipped and the next one tried. Within a style, a label Prometheus renamed
  `exported_<label>` (because the target had one of the same name) is the series' own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuaudit.importer.prometheus.presets import NODE_LABELS

_IP = re.compile(r"^(\d{1,3}(\.\d{1,3}){3}|\[[0-9a-fA-F:]+\])(:\d+)?$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
SMALLINT_MAX = 32767  # gpu_index and mig_instance are SMALLINT columns
NO_MIG = -1  # stands in for a null mig_instance while grouping and joining


class BadLabel(Exception):
    """A label whose value the dataset cannot hold; the caller names the series."""


@dataclass(frozen=True)
class SeriesIdentity:
    host: str
    host_label: str | None
    host_rank: int  # position of host_label in the host list (lower: preferred)
    host_suspect: str | None  # "exporter pod" or "pod IP" when the host value looks like one
    gpu_uuid: str
    gpu_index: int | None
    gpu_name: str | None
    mig_instance: int  # NO_MIG for a whole GPU
    mig_profile: str | None
    mig_device: bool  # the series names a MIG device by its own UUID (jobstats: MIG-...)
    parent_ref: str | None  # the label value that names the parent GPU of a MIG device (jobstats: ordinal)
    k8s_pod: str | None
    k8s_namespace: str | None
    container: str | None
    pod_uid: str | None  # the workload pod's UID (dcgm-exporter's pod_uid), only with a workload pod
    pod_style: str | None  # the pod label the workload came from
    exporter_pods_skipped: int  # styles skipped because their pod was the exporter
    job_id: str | None
    user: str | None
    share: bool  # carries a time-slicing share marker (vgpu)


def normalize_uuid(value: str, prefix: str) -> str:
    """A bare UUID (nvidia_gpu_exporter drops NVML's `GPU-`) gets the prefix, so every exporter names a GPU
    the same way the agent does."""
    if prefix and _UUID.fullmatch(value):
        return prefix + value
    return value


def int_label(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def _small_int(label: str | None, value: str | None, what: str) -> int | None:
    """An integer label (a GPU index, a MIG instance id): a number outside 0-32767 is no such id, and would
    not fit its column (-1 also stands for "no MIG instance" while grouping); text that is not a number is no
    label at all."""
    n = int_label(value)
    if n is not None and not 0 <= n <= SMALLINT_MAX:
        raise BadLabel(f'{label}="{value}" is not a {what} (0-{SMALLINT_MAX})')
    return n


def host_suspect(value: str, labels: dict[str, str], exporter_pod: re.Pattern[str] | None) -> str | None:
    """Why a host value is probably not the node's name: a pod IP, or the exporter's own pod."""
    if _IP.match(value):
        return "pod IP"
    if (exporter_pod is not None and exporter_pod.search(value)) or value in (labels.get("pod"),
                                                                              labels.get("pod_name")):
        return "exporter pod"
    return None


def identify(labels: dict[str, str], names: dict[str, tuple[str, ...]], exporter_pod: re.Pattern[str] | None,
             *, uuid_prefix: str = "GPU-", share_markers: tuple[str, ...] = (), mig_parent_label: str = "",
             mig_profile_in_name: re.Pattern[str] | None = None) -> SeriesIdentity:
    def first(fld: str) -> tuple[str | None, str | None, int]:
        for i, label in enumerate(names.get(fld, ())):
            value = labels.get(label)
            if value:
                return label, value, i
        return None, None, len(names.get(fld, ()))

    host_label, host, rank = first("host")
    if host_label == "instance" and host:
        host = re.sub(r":\d+$", "", host)  # an exporter address, not a hostname: drop the port
    suspect = host_suspect(host, labels, exporter_pod) if host and host_label not in NODE_LABELS else None
    host = host or "unknown"
    gpu_index = _small_int(*first("gpu_index")[:2], "GPU index")
    raw_uuid = first("gpu_uuid")[1]
    uuid = (normalize_uuid(raw_uuid, uuid_prefix) if raw_uuid
            else f"{host}/gpu{gpu_index if gpu_index is not None else '?'}")
    mig = _small_int(*first("mig_instance")[:2], "MIG instance id")
    name = first("gpu_name")[1]
    profile = first("mig_profile")[1] if mig is not None else None
    mig_device = mig is not None and uuid.startswith("MIG-")
    if mig is not None and not profile and name and mig_profile_in_name is not None:
        m = mig_profile_in_name.search(name)
        profile = m.group(1) if m else None
    parent_ref = labels.get(mig_parent_label) if mig_parent_label else None

    pod = namespace = container = style = None
    skipped = 0
    pods, namespaces, containers = (names.get(f, ()) for f in ("k8s_pod", "k8s_namespace", "container"))
    for i, label in enumerate(pods):
        value = labels.get(label)
        if not value:
            continue
        if exporter_pod is not None and exporter_pod.search(value):
            skipped += 1  # the exporter's own pod in this style: the workload may be in the next one
            continue
        pod, style = value, label
        namespace = _own(labels, namespaces[i] if i < len(namespaces) else None, label)
        container = _own(labels, containers[i] if i < len(containers) else None, label)
        break
    share = pod is not None and any(labels.get(m) for m in share_markers)
    return SeriesIdentity(
        host=host, host_label=host_label, host_rank=rank, host_suspect=suspect, gpu_uuid=uuid,
        gpu_index=gpu_index, gpu_name=name, mig_instance=mig if mig is not None else NO_MIG, mig_profile=profile,
        mig_device=mig_device, parent_ref=parent_ref, k8s_pod=pod, k8s_namespace=namespace or None,
        container=container or None, pod_uid=first("pod_uid")[1] if pod is not None else None, pod_style=style,
        exporter_pods_skipped=skipped, job_id=first("job_id")[1],
        user=first("user")[1], share=share)


def _own(labels: dict[str, str], label: str | None, pod_label: str) -> str | None:
    """The value of `label` in the style of `pod_label`: where Prometheus renamed the series' own label to
    exported_<label> (the target had one), that is the workload's."""
    if label is None:
        return None
    if not pod_label.startswith("exported_") and labels.get(f"exported_{label}"):
        return labels[f"exported_{label}"]
    return labels.get(label)


def node_label_hint(labels: dict[str, str], host_labels: tuple[str, ...]) -> str | None:
    """A label of this series that seems to hold the node's name (for the `--label host=...` hint)."""
    for k, v in sorted(labels.items()):
        if k in host_labels or k.startswith("__") or not v:
            continue
        if ("node" in k.lower() or "host" in k.lower()) and not _IP.match(v):
            return k
    return None


def as_tuple(s: SeriesIdentity) -> tuple[Any, ...]:
    return (s.host, s.host_rank, s.gpu_uuid, s.gpu_index, s.gpu_name, s.mig_instance, s.mig_profile,
            s.mig_device, s.parent_ref, s.k8s_pod, s.k8s_namespace, s.container, s.pod_uid, s.job_id, s.user,
            s.share)
