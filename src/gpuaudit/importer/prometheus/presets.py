"""Exporter presets: which series and labels of each supported exporter become which dataset columns.

Data tables, not code (the exporters' own names, read at their sources):
- `dcgm`: NVIDIA dcgm-exporter (etc/default-counters.csv, etc/1.x-compatibility-metrics.csv, the label
  templates of internal/pkg/rendermetrics/render_metrics.go, the pod attributes of
  internal/pkg/transformation/const.go and kubernetes.go), as a Prometheus ServiceMonitor stores them.
- `jobstats`: Princeton jobstats' GPU exporter (plazonic/nvidia_gpu_prometheus_exporter, main.go): `nvidia_gpu_*`,
  labels ordinal, minor_number, uuid, name, GPU_I_ID, jobid, userid; power in mW; GPM metrics named `*_percent`
  that hold 0-1 fractions (the exporter divides NVML's percent by 100).
- `nvidia-smi`: utkuozdemir/nvidia_gpu_exporter (docs/METRICS.md, internal/integration/testdata): `nvidia_smi_*`
  with only a `uuid` label (no `GPU-` prefix); name and index on the `nvidia_smi_gpu_info` info series; MIG GPUs
  have no utilization series (the NVML backend adds `nvidia_smi_mig_*` per GPU instance).
- `gpuaudit`: gpuaudit's own agent (`agent run --metrics-listen`, agent/metrics.py; names in agents/README.md):
  `gpuaudit_gpu_*` in the dataset's units (fractions, bytes, W, J) and labelled with the dataset's column names.
  The holders are a separate series (`gpuaudit_gpu_holder_processes`), not labels of the GPU series: this
  preset imports the GPU rows; the agent's own Parquet keeps the process rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# How the server is asked: interval average, the last value in the interval, a counter's increase, or a
# counter read as its last and highest value per step (the importer differences consecutive values: energy
# whatever the scrape interval, resets handled, gaps spanned).
AVG, LAST, INCREASE, COUNTER = "avg", "last", "increase", "counter"


@dataclass(frozen=True)
class MetricSpec:
    names: tuple[str, ...]  # tried in this order of preference, per GPU and timestamp
    unit: str  # unit the exporter reports in
    kind: str  # one of AVG, LAST, INCREASE
    stored: str  # the unit family of the dataset column (a key of mapping._UNITS)



@dataclass(frozen=True)
class _InfoSeries:
    """A constant-1 series whose labels describe a GPU (or MIG instance): joined on `key` labels (the
    dataset fields they give: gpu_uuid, mig_instance) to fill `fields` (dataset field -> label)."""

    metric: str
    key: dict[str, str]  # dataset field -> label on the info series
    fields: dict[str, str]


@dataclass(frozen=True)
class Preset:
    name: str  # the --exporter value; rows are tagged prometheus-<name>[-engine|-util]
    title: str
    metrics: dict[str, MetricSpec]
    # dataset field -> label names, first present wins. For k8s_pod/k8s_namespace/container the i-th names form
    # one naming style, tried in order on each series (identity.py).
    labels: dict[str, tuple[str, ...]]
    exporter_pod: str = ""  # default regex of pod names that are the exporter itself
    info: tuple[_InfoSeries, ...] = ()
    # Time-slicing (dcgm-exporter 4.5+, KUBERNETES_VIRTUAL_GPUS): beside the device-level series, these fields
    # get one series per pod holding that pod's own share; such series carry one of `share_markers`.
    share_fields: tuple[str, ...] = ()
    share_markers: tuple[str, ...] = ()
    # MIG devices with their own UUID (jobstats: MIG-...): the parent GPU is the series on the same host with
    # the same value of this label and no MIG instance; the profile is read from the device name.
    mig_parent_label: str = ""
    mig_profile_in_name: str = ""  # regex with one group, e.g. r"MIG (\S+)"
    uuid_prefix: str = "GPU-"  # added to a bare UUID (nvidia_gpu_exporter drops it)


# Label names that hold the node's name where a relabeling put it there (kube-prometheus, the dcgm-exporter
# Helm chart's commented example): preferred over what the exporter says about itself.
NODE_LABELS = ("node", "kubernetes_node", "nodename")


def _m(names: tuple[str, ...], unit: str, kind: str, stored: str) -> MetricSpec:
    return MetricSpec(names, unit, kind, stored)


_FRACTION = "fraction"

DCGM = Preset(
    name="dcgm",
    title="NVIDIA dcgm-exporter",
    metrics={
        # SM_ACTIVE: an SM has a warp assigned. GR_ENGINE_ACTIVE (enabled by default instead) only says that any
        # SM had work: one busy SM of 132 reads 100 %. Kept in its own column, an upper bound.
        "sm_active": _m(("DCGM_FI_PROF_SM_ACTIVE", "dcgm_fi_prof_sm_active"), "fraction", AVG, _FRACTION),
        "gr_engine_active": _m(("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "dcgm_fi_prof_gr_engine_active"), "fraction", AVG,
                               _FRACTION),
        "duty_cycle": _m(("DCGM_FI_DEV_GPU_UTIL", "dcgm_fi_dev_gpu_util", "dcgm_gpu_utilization"), "percent", AVG,
                         _FRACTION),
        "sm_occupancy": _m(("DCGM_FI_PROF_SM_OCCUPANCY", "dcgm_fi_prof_sm_occupancy"), "fraction", AVG, _FRACTION),
        "tensor_active": _m(("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "dcgm_fi_prof_pipe_tensor_active"), "fraction", AVG,
                            _FRACTION),
        "dram_active": _m(("DCGM_FI_PROF_DRAM_ACTIVE", "dcgm_fi_prof_dram_active"), "fraction", AVG, _FRACTION),
        "mem_util": _m(("DCGM_FI_DEV_MEM_COPY_UTIL", "dcgm_fi_dev_mem_copy_util", "dcgm_mem_copy_utilization"),
                       "percent", AVG, _FRACTION),
        "fb_used": _m(("DCGM_FI_DEV_FB_USED", "dcgm_fi_dev_fb_used", "dcgm_fb_used"), "MiB", LAST, "bytes"),
        "fb_free": _m(("DCGM_FI_DEV_FB_FREE", "dcgm_fi_dev_fb_free", "dcgm_fb_free"), "MiB", LAST, "bytes"),
        "power_w": _m(("DCGM_FI_DEV_POWER_USAGE", "dcgm_fi_dev_power_usage", "dcgm_power_usage"), "W", AVG, "w"),
        "energy_j": _m(("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "dcgm_fi_dev_total_energy_consumption",
                        "dcgm_total_energy_consumption"), "mJ", COUNTER, "j"),
        "temp_c": _m(("DCGM_FI_DEV_GPU_TEMP", "dcgm_fi_dev_gpu_temp", "dcgm_gpu_temp"), "C", LAST, "c"),
    },
    labels={
        "host": (*NODE_LABELS, "Hostname", "hostname", "instance"),
        "gpu_uuid": ("UUID", "uuid"),
        "gpu_index": ("gpu",),
        "gpu_name": ("modelName",),
        "mig_instance": ("GPU_I_ID",),
        "mig_profile": ("GPU_I_PROFILE",),
        # The exporter's attributes are pod/namespace/container (pod_name/pod_namespace/container_name with
        # --use-old-namespace); a ServiceMonitor without honorLabels renames them exported_*.
        "k8s_pod": ("exported_pod", "pod_name", "pod"),
        "k8s_namespace": ("exported_namespace", "pod_namespace", "namespace"),
        "container": ("exported_container", "container_name", "container"),
        # The pod's UID: on every pod-labelled series with --kubernetes-enable-pod-uid, and always on the
        # per-pod shares of a time-sliced GPU (internal/pkg/transformation/const.go uidAttribute).
        "pod_uid": ("pod_uid",),
        "job_id": ("hpc_job",),
        "user": (),
    },
    exporter_pod=r"dcgm-exporter",
    share_fields=("duty_cycle", "fb_used"),  # isPerProcessMetric: DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED
    # A share: a pod of a shared device id (`<uuid>::N`, GKE's `nvidia0/vgpuN`) gets `vgpu`. `pod_uid` marks no
    # share: --kubernetes-enable-pod-uid puts it on every pod series (internal/pkg/transformation/kubernetes.go).
    share_markers=("vgpu",),
)

_JOBSTATS = Preset(
    name="jobstats",
    title="Princeton jobstats GPU exporter (nvidia_gpu_prometheus_exporter)",
    metrics={
        "sm_active": _m(("nvidia_gpu_sm_util_percent",), "fraction", AVG, _FRACTION),
        "gr_engine_active": _m(("nvidia_gpu_graphics_util_percent",), "fraction", AVG, _FRACTION),
        "duty_cycle": _m(("nvidia_gpu_duty_cycle",), "percent", AVG, _FRACTION),
        "sm_occupancy": _m(("nvidia_gpu_sm_occupancy_percent",), "fraction", AVG, _FRACTION),
        "tensor_active": _m(("nvidia_gpu_any_tensor_util_percent",), "fraction", AVG, _FRACTION),
        "dram_active": _m(("nvidia_gpu_dram_bw_util_percent",), "fraction", AVG, _FRACTION),
        "fb_used": _m(("nvidia_gpu_memory_used_bytes",), "bytes", LAST, "bytes"),
        "mem_total": _m(("nvidia_gpu_memory_total_bytes",), "bytes", LAST, "bytes"),
        "power_w": _m(("nvidia_gpu_power_usage_milliwatts",), "mW", AVG, "w"),
        "temp_c": _m(("nvidia_gpu_temperature_celsius",), "C", LAST, "c"),
    },
    labels={
        "host": (*NODE_LABELS, "hostname", "instance"),
        "gpu_uuid": ("uuid",),
        "gpu_index": ("ordinal",),
        "gpu_name": ("name",),
        "mig_instance": ("GPU_I_ID",),
        "mig_profile": (),
        "k8s_pod": (), "k8s_namespace": (), "container": (), "pod_uid": (),
        "job_id": ("jobid",),
        "user": ("userid",),
    },
    mig_parent_label="ordinal",
    mig_profile_in_name=r"MIG (\S+)",
)

_NVIDIA_SMI = Preset(
    name="nvidia-smi",
    title="utkuozdemir/nvidia_gpu_exporter (nvidia-smi)",
    metrics={
        "sm_active": _m(("nvidia_smi_mig_sm_activity_ratio",), "fraction", AVG, _FRACTION),
        "gr_engine_active": _m(("nvidia_smi_mig_graphics_activity_ratio",), "fraction", AVG, _FRACTION),
        "duty_cycle": _m(("nvidia_smi_utilization_gpu_ratio",), "fraction", AVG, _FRACTION),
        "sm_occupancy": _m(("nvidia_smi_mig_sm_occupancy_ratio",), "fraction", AVG, _FRACTION),
        "tensor_active": _m(("nvidia_smi_mig_tensor_activity_ratio",), "fraction", AVG, _FRACTION),
        "mem_util": _m(("nvidia_smi_utilization_memory_ratio",), "fraction", AVG, _FRACTION),
        "fb_used": _m(("nvidia_smi_memory_used_bytes", "nvidia_smi_mig_memory_used_bytes"), "bytes", LAST, "bytes"),
        "mem_total": _m(("nvidia_smi_memory_total_bytes", "nvidia_smi_mig_memory_total_bytes"), "bytes", LAST,
                        "bytes"),
        "power_w": _m(("nvidia_smi_power_draw_watts", "nvidia_smi_power_draw_average_watts"), "W", AVG, "w"),
        "energy_j": _m(("nvidia_smi_energy_joules_total",), "J", COUNTER, "j"),
        "temp_c": _m(("nvidia_smi_temperature_gpu",), "C", LAST, "c"),
    },
    labels={
        "host": (*NODE_LABELS, "hostname", "instance"),
        "gpu_uuid": ("uuid",),
        "gpu_index": ("index",),
        "gpu_name": ("name",),
        "mig_instance": ("gpu_instance_id",),
        "mig_profile": ("profile",),
        "k8s_pod": (), "k8s_namespace": (), "container": (), "pod_uid": (),
        "job_id": (),
        "user": (),
    },
    info=(_InfoSeries("nvidia_smi_gpu_info", {"gpu_uuid": "uuid"}, {"gpu_name": "name", "gpu_index": "index"}),
          _InfoSeries("nvidia_smi_mig_info", {"gpu_uuid": "uuid", "mig_instance": "gpu_instance_id"},
                     {"mig_profile": "profile"})),
)

_GPUAUDIT = Preset(
    name="gpuaudit",
    title="gpuaudit agent (agent run --metrics-listen)",
    metrics={
        "sm_active": _m(("gpuaudit_gpu_sm_active_ratio",), "fraction", AVG, _FRACTION),
        "duty_cycle": _m(("gpuaudit_gpu_duty_cycle_ratio",), "fraction", AVG, _FRACTION),
        "sm_occupancy": _m(("gpuaudit_gpu_sm_occupancy_ratio",), "fraction", AVG, _FRACTION),
        "tensor_active": _m(("gpuaudit_gpu_tensor_active_ratio",), "fraction", AVG, _FRACTION),
        "dram_active": _m(("gpuaudit_gpu_dram_active_ratio",), "fraction", AVG, _FRACTION),
        "fb_used": _m(("gpuaudit_gpu_memory_used_bytes",), "bytes", LAST, "bytes"),
        "mem_total": _m(("gpuaudit_gpu_memory_total_bytes",), "bytes", LAST, "bytes"),
        "power_w": _m(("gpuaudit_gpu_power_watts",), "W", AVG, "w"),
        "energy_j": _m(("gpuaudit_gpu_energy_joules_total",), "J", COUNTER, "j"),
    },
    labels={
        # `host` is the agent's own --host: the host its Parquet is under, so imported rows meet its own rows.
        "host": ("host", *NODE_LABELS, "instance"),
        "gpu_uuid": ("gpu_uuid",),
        "gpu_index": ("gpu_index",),
        "gpu_name": ("gpu_name",),
        "mig_instance": ("mig_instance",),
        "mig_profile": ("mig_profile",),
        "k8s_pod": (), "k8s_namespace": (), "container": (), "pod_uid": (),
        "job_id": (),
        "user": (),
    },
)

PRESETS: dict[str, Preset] = {p.name: p for p in (DCGM, _JOBSTATS, _NVIDIA_SMI, _GPUAUDIT)}
DEFAULT_PRESET = DCGM.name


@dataclass
class _Detection:
    """Metric names the server holds in the window, per preset: (utilization names, all names)."""

    present: dict[str, tuple[set[str], set[str]]] = field(default_factory=dict)

    def best(self) -> str | None:
        """The preset with the most utilization series names present, then the most names."""
        scored = sorted(((len(u), len(a), p) for p, (u, a) in self.present.items() if a), reverse=True)
        return scored[0][2] if scored else None

    def others(self, chosen: str) -> list[str]:
        return [p for p, (_, a) in self.present.items() if a and p != chosen]


_UTIL_FIELDS = ("sm_active", "gr_engine_active", "duty_cycle")


def all_metric_names() -> list[str]:
    return sorted({n for p in PRESETS.values() for spec in p.metrics.values() for n in spec.names})


def detect(names: set[str]) -> _Detection:
    d = _Detection()
    for p in PRESETS.values():
        util = {n for f in _UTIL_FIELDS if f in p.metrics for n in p.metrics[f].names}
        mine = {n for spec in p.metrics.values() for n in spec.names}
        d.present[p.name] = (names & util, names & mine)
    return d
