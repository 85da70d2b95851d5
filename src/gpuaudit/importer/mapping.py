"""Which Prometheus series and labels become which dataset columns.

The defaults follow NVIDIA dcgm-exporter; every metric and label name can be overridden for other
exporters (`--metric FIELD=NAME[:UNIT],...`, `--label FIELD=NAME,...`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from gpuaudit.errors import GpuauditError
from gpuaudit.schema import MIB

# Unit -> factor to the field's stored unit (fractions, bytes, W, J, °C).
_UNITS: dict[str, dict[str, float]] = {
    "fraction": {"fraction": 1.0, "ratio": 1.0, "percent": 0.01},
    "bytes": {"mib": MIB, "bytes": 1.0, "kib": 1024.0, "gib": 1024.0**3},
    "w": {"w": 1.0, "mw": 0.001},
    "j": {"mj": 0.001, "j": 1.0},
    "c": {"c": 1.0},
}

# How the server is asked: interval average, the last value in the interval, or a counter's increase.
AVG, LAST, INCREASE = "avg", "last", "increase"


@dataclass(frozen=True)
class MetricSpec:
    names: tuple[str, ...]  # tried in this order of preference, per GPU and timestamp
    unit: str  # unit the exporter reports in
    kind: str  # one of AVG, LAST, INCREASE
    stored: str  # key of _UNITS: the unit family of the dataset column


# dataset-side field -> how to get it. `sm_active`'s fallback GR_ENGINE_ACTIVE is the same measurement
# on older DCGM; duty cycle (DEV_GPU_UTIL) is a different one and only an upper bound on SM activity.
DEFAULT_METRICS: dict[str, MetricSpec] = {
    "sm_active": MetricSpec(("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"), "fraction", AVG,
                            "fraction"),
    "duty_cycle": MetricSpec(("DCGM_FI_DEV_GPU_UTIL",), "percent", AVG, "fraction"),
    "sm_occupancy": MetricSpec(("DCGM_FI_PROF_SM_OCCUPANCY",), "fraction", AVG, "fraction"),
    "tensor_active": MetricSpec(("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",), "fraction", AVG, "fraction"),
    "dram_active": MetricSpec(("DCGM_FI_PROF_DRAM_ACTIVE",), "fraction", AVG, "fraction"),
    "mem_util": MetricSpec(("DCGM_FI_DEV_MEM_COPY_UTIL",), "percent", AVG, "fraction"),
    "fb_used": MetricSpec(("DCGM_FI_DEV_FB_USED",), "MiB", LAST, "bytes"),
    "fb_free": MetricSpec(("DCGM_FI_DEV_FB_FREE",), "MiB", LAST, "bytes"),
    "power_w": MetricSpec(("DCGM_FI_DEV_POWER_USAGE",), "W", AVG, "w"),
    "energy_j": MetricSpec(("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",), "mJ", INCREASE, "j"),
    "temp_c": MetricSpec(("DCGM_FI_DEV_GPU_TEMP",), "C", LAST, "c"),
}

# dataset-side label field -> label names, first present wins. For the three Kubernetes fields the
# i-th names form one naming style (exported_pod/exported_namespace/exported_container, ...): the
# style is chosen by the first pod label present on a series, so names from different styles are
# never mixed on one row.
DEFAULT_LABELS: dict[str, tuple[str, ...]] = {
    "host": ("Hostname", "hostname", "instance"),
    "gpu_uuid": ("UUID", "uuid"),
    "gpu_index": ("gpu",),
    "gpu_name": ("modelName",),
    "mig_instance": ("GPU_I_ID",),
    "mig_profile": ("GPU_I_PROFILE",),
    "k8s_pod": ("exported_pod", "pod_name", "pod"),
    "k8s_namespace": ("exported_namespace", "pod_namespace", "namespace"),
    "container": ("exported_container", "container_name", "container"),
    "job_id": ("hpc_job",),
}

# Pods matching this are the exporter itself (a ServiceMonitor's target labels), not a workload.
DEFAULT_EXPORTER_POD = r"dcgm-exporter"

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


@dataclass(frozen=True)
class Mapping:
    metrics: dict[str, MetricSpec] = field(default_factory=lambda: dict(DEFAULT_METRICS))
    labels: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_LABELS))
    selector: str = ""  # extra label matchers, e.g. job="dcgm", added to every query
    exporter_pod: str = DEFAULT_EXPORTER_POD

    def factor(self, fld: str) -> float:
        spec = self.metrics[fld]
        return _UNITS[spec.stored][spec.unit.lower()]


def build_mapping(metric_overrides: list[str] | None = None, label_overrides: list[str] | None = None,
                  selector: str = "", exporter_pod: str = DEFAULT_EXPORTER_POD) -> Mapping:
    """The default dcgm-exporter mapping with `FIELD=NAME[:UNIT][,NAME...]` and `FIELD=LABEL[,LABEL...]`
    overrides applied. An empty NAME list (`FIELD=`) turns a metric off."""
    metrics = dict(DEFAULT_METRICS)
    for item in metric_overrides or []:
        fld, names = _split(item, "--metric", metrics)
        spec = metrics[fld]
        if not names:
            metrics.pop(fld)
            continue
        units = {n.split(":", 1)[1] for n in names if ":" in n}
        unit = spec.unit
        if len(units) > 1:
            raise GpuauditError(f"--metric {item!r}: give one unit for all names of {fld}")
        if units:
            unit = units.pop()
            if unit.lower() not in _UNITS[spec.stored]:
                raise GpuauditError(f"--metric {item!r}: unit {unit!r} does not fit {fld}; "
                                    f"use one of {', '.join(sorted(_UNITS[spec.stored]))}")
        bare = tuple(n.split(":", 1)[0] for n in names)
        for n in bare:
            if not _NAME.fullmatch(n):
                raise GpuauditError(f"--metric {item!r}: {n!r} is not a Prometheus metric name")
        metrics[fld] = replace(spec, names=bare, unit=unit)
    if "sm_active" not in metrics and "duty_cycle" not in metrics:
        raise GpuauditError("--metric: keep at least one of sm_active and duty_cycle (utilization)")
    labels = dict(DEFAULT_LABELS)
    for item in label_overrides or []:
        fld, names = _split(item, "--label", labels)
        for n in names:
            if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", n):
                raise GpuauditError(f"--label {item!r}: {n!r} is not a Prometheus label name")
        labels[fld] = tuple(names)
    selector = selector.strip()
    if selector.startswith("{") and selector.endswith("}"):
        selector = selector[1:-1].strip()
    if "{" in selector or "}" in selector:
        raise GpuauditError(f"bad --selector {selector!r}: give label matchers like job=\"dcgm\"")
    try:
        re.compile(exporter_pod)
    except re.error as e:
        raise GpuauditError(f"bad --exporter-pod regex {exporter_pod!r}: {e}") from None
    return Mapping(metrics=metrics, labels=labels, selector=selector, exporter_pod=exporter_pod)


def _split(item: str, option: str, known: dict) -> tuple[str, list[str]]:
    if "=" not in item:
        raise GpuauditError(f"bad {option} {item!r}: use FIELD=NAME[,NAME...]")
    fld, _, rest = item.partition("=")
    fld = fld.strip()
    if fld not in known:
        raise GpuauditError(f"bad {option} {item!r}: unknown field {fld!r}; known: {', '.join(known)}")
    return fld, [n.strip() for n in rest.split(",") if n.strip()]


# GPU models whose full MIG GPU has 4 compute slices instead of 7.
_FOUR_SLICE_MODELS = ("A30",)


def gpu_fraction(mig_profile: str | None, gpu_name: str | None = None) -> float:
    """Share of a physical GPU a MIG profile stands for: the leading slice count over the model's slices
    (7, or 4 on an A30). `3g.40gb` -> 3/7, `1g.10gb+me` -> 1/7, `1c.3g.40gb` (a compute instance)
    -> 3/7 (its GPU instance). A whole GPU (no profile) is 1; an unreadable profile counts as 1/7."""
    if not mig_profile:
        return 1.0
    total = 4 if gpu_name and any(m in gpu_name for m in _FOUR_SLICE_MODELS) else 7
    m = re.search(r"(?:^|\.)(\d+)g\.", mig_profile)
    slices = int(m.group(1)) if m else 1
    return min(slices, total) / total
