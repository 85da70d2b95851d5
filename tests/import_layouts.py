"""Real exporter deployments as a real Prometheus stores them, one layout per window of a shared TSDB.

Facts taken from the exporters' sources (our own code and values):
- dcgm-exporter: label template of internal/pkg/rendermetrics/render_metrics.go (gpu, UUID, pci_bus_id, device,
  modelName, GPU_I_PROFILE/GPU_I_ID on MIG entities, hostname; `Hostname` before 3.x, the exporter pod's name in
  Kubernetes before 3.1); pod attributes pod/namespace/container (pod_name/pod_namespace/container_name with
  --use-old-namespace), pod_uid and vgpu (internal/pkg/transformation/const.go); time-slicing
  (KUBERNETES_VIRTUAL_GPUS, kubernetes.go + process_metrics.go): DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_FB_USED keep
  the device-level series and get one per pod with the pod's own share, every other metric one copy per pod with
  the device value; hpc_job (hpc.go); etc/default-counters.csv enables GR_ENGINE_ACTIVE and leaves SM_ACTIVE
  commented out; etc/1.x-compatibility-metrics.csv names (dcgm_gpu_utilization, dcgm_fb_used, ...). A
  ServiceMonitor without honorLabels renames the exporter's pod/namespace/container to exported_* and adds the
  exporter pod's own (target) labels and instance=<pod IP>:9400.
- jobstats' exporter (plazonic/nvidia_gpu_prometheus_exporter main.go): nvidia_gpu_* with labels ordinal,
  minor_number, uuid, name, GPU_I_ID, jobid, userid; power in mW; GPM metrics *_percent holding 0-1; MIG devices
  as their own uuid (MIG-...) with the parent's power, no duty cycle in MIG mode.
- utkuozdemir/nvidia_gpu_exporter (docs/METRICS.md, testdata): nvidia_smi_* with uuid only (no GPU- prefix),
  name/index on nvidia_smi_gpu_info, energy in J, MIG GPUs without utilization series.

Every layout's truth is computed from the generated samples, independently of Prometheus and the importer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from tests.prom_helpers import OmSeries

BASE = datetime(2026, 3, 2, tzinfo=UTC)
HOURS = 4  # each layout's window
SLOT_H = 6  # windows start 6 h apart: no layout's series reach into another's window
OFFSET_S = 7  # samples at hh:mm:07 (and :37 at 30 s): none on a step boundary
MIB = 1024 * 1024
A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
L4 = "NVIDIA L4"
T4 = "Tesla T4"


@dataclass
class Series:
    metric: str
    labels: dict[str, str]
    times: np.ndarray  # epoch seconds
    values: np.ndarray


@dataclass
class Layout:
    name: str
    index: int
    scrape_s: int
    series: list[Series] = field(default_factory=list)
    truth: dict[str, Any] = field(default_factory=dict)

    @property
    def start(self) -> datetime:
        return BASE + timedelta(hours=SLOT_H * self.index)

    @property
    def end(self) -> datetime:
        return self.start + timedelta(hours=HOURS)

    def times(self) -> np.ndarray:
        n = HOURS * 3600 // self.scrape_s
        return self.start.timestamp() + OFFSET_S + self.scrape_s * np.arange(n, dtype=np.int64)

    def add(self, metric: str, labels: dict[str, str], values: np.ndarray, mask: np.ndarray | None = None,
            times: np.ndarray | None = None) -> None:
        t = self.times() if times is None else times
        m = np.ones(len(t), bool) if mask is None else mask
        if m.any():
            self.series.append(Series(metric, dict(labels), t[m], np.asarray(values, float)[m]))


def _blocks(t: np.ndarray, minutes: float, phase_s: float = 0.0) -> np.ndarray:
    """True in alternate blocks of `minutes` (not aligned to any step: labels change mid-step)."""
    return ((t - t[0] + phase_s) // (minutes * 60)) % 2 == 0


def counter_truth(values: np.ndarray) -> float:
    """A counter's increase over its samples: differences, a reset counted from zero (what Prometheus does)."""
    d = np.diff(values)
    return float(np.where(d >= 0, d, values[1:]).sum())


def _energy_mj(power_w: np.ndarray, scrape_s: int, start_mj: float = 3e11) -> np.ndarray:
    return start_mj + np.cumsum(power_w * scrape_s * 1000.0)


def _dcgm(gpu: int, uuid: str, model: str, host_label: str | None, host: str | None, **extra: str) -> dict[str, str]:
    labels = {"gpu": str(gpu), "UUID": uuid, "pci_bus_id": f"00000000:{0x17 + gpu:02X}:00.0",
              "device": f"nvidia{gpu}", "modelName": model, "DCGM_FI_DRIVER_VERSION": "550.54.15"}
    if host_label and host:
        labels[host_label] = host
    return labels | extra


# ------------------------------------------------------------------------------------------------ layouts


def slurm_mig(index: int) -> Layout:
    """A Slurm node: hpc_job labels; two A100s in MIG flex mode (only GPU-instance series, each carrying the whole
    GPU's power and energy counter). GPU M1: two 3g.40gb instances, instance 2's profiling series without
    GPU_I_PROFILE (its memory series have it). GPU M2: instance 7 with no profile anywhere and 10 GB (1g), instance
    8 with no profile and 40 GB (3g or 4g: not guessed)."""
    lay = Layout("slurm_mig", index, 30)
    t = lay.times()
    host = {"hostname": "gpu-a17"}
    m1, m2 = "GPU-5a1c0000-1111-2222-3333-444455556666", "GPU-5a1c0000-7777-8888-9999-aaaabbbbcccc"
    power1 = np.where(_blocks(t, 41), 320.0, 110.0)
    power2 = np.full(len(t), 95.0)
    energy1, energy2 = _energy_mj(power1, 30), _energy_mj(power2, 30, 9e11)
    truth: dict[str, Any] = {"host": "gpu-a17", "gpus": {}, "jobs": {}}
    for gi, job, sm, prof_on_sm in ((1, "7001", 0.55, True), (2, "7002", 0.35, False)):
        busy = _blocks(t, 23, phase_s=gi * 300)
        base = _dcgm(0, m1, A100, None, None, **host, GPU_I_ID=str(gi))
        with_prof = base | {"GPU_I_PROFILE": "3g.40gb"}
        sm_v, eng_v = np.where(busy, sm, 0.0), np.where(busy, min(sm + 0.3, 1.0), 0.0)
        used = np.where(busy, 30000.0, 400.0)
        for metric, values, prof in (("DCGM_FI_PROF_SM_ACTIVE", sm_v, prof_on_sm),
                                     ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", eng_v, prof_on_sm),
                                     ("DCGM_FI_DEV_FB_USED", used, True), ("DCGM_FI_DEV_FB_FREE", 40192 - used, True),
                                     ("DCGM_FI_DEV_POWER_USAGE", power1, True),
                                     ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", energy1, True)):
            labels = with_prof if prof else base
            lay.add(metric, labels | {"hpc_job": job}, values, busy)
            lay.add(metric, labels, values, ~busy)
        truth["gpus"][(m1, gi)] = {"sm": float(sm_v.mean()), "engine": float(eng_v.mean()), "fraction": 3 / 7}
        truth["jobs"][(m1, gi)] = (job, t[busy])  # the sample times under the job
    for gi, total_mib in ((7, 9984.0), (8, 40192.0)):
        base = _dcgm(1, m2, A100, None, None, **host, GPU_I_ID=str(gi))
        sm_v = np.full(len(t), 0.2 if gi == 7 else 0.6)
        used = np.full(len(t), 2000.0)
        for metric, values in (("DCGM_FI_PROF_SM_ACTIVE", sm_v), ("DCGM_FI_DEV_FB_USED", used),
                               ("DCGM_FI_DEV_FB_FREE", total_mib - used), ("DCGM_FI_DEV_POWER_USAGE", power2),
                               ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", energy2)):
            lay.add(metric, base, values)
    truth["gpus"][(m2, 7)] = {"sm": 0.2, "fraction": 1 / 7}
    truth["refused"] = (m2, 8)
    truth["energy_j"] = {m1: counter_truth(energy1) / 1000, m2: counter_truth(energy2) / 1000}
    truth["power_w"] = {m1: float(power1.mean()), m2: float(power2.mean())}
    lay.truth = truth
    return lay


def helm_servicemonitor(index: int) -> Layout:
    """dcgm-exporter 3.3 from its Helm chart with the default counters (GR_ENGINE_ACTIVE, no SM_ACTIVE), scraped
    every 60 s by a ServiceMonitor without honorLabels: the workload's labels as exported_*, the exporter pod's own
    pod/namespace/container/instance as target labels. The exporter rolls out at 1 h (new pod name and IP); the
    node reboots at 2 h 30 (5 minutes without samples, the energy counter restarts near zero, another new pod).
    Workload pods come and go in 37-minute blocks: labels change mid-step."""
    lay = Layout("helm_servicemonitor", index, 60)
    t = lay.times()
    rel = t - t[0]
    reboot_s = 2.5 * 3600
    up = ~((rel >= reboot_s) & (rel < reboot_s + 300))
    pods = np.where(rel < 3600, 0, np.where(rel < reboot_s, 1, 2))
    targets = [("dcgm-exporter-7d9xq", "10.42.3.17"), ("dcgm-exporter-k2m8w", "10.42.3.41"),
               ("dcgm-exporter-p4zt6", "10.42.3.58")]
    truth: dict[str, Any] = {"host": "gpu-node-1", "gpus": {}, "energy_j": {}, "held": {}, "fb": {}}
    for gpu, uuid, eng, duty, phase in ((0, "GPU-c0ffee00-0000-4000-8000-000000000001", 0.8, 97.0, 0),
                                        (1, "GPU-c0ffee00-0000-4000-8000-000000000002", 0.45, 60.0, 900)):
        busy = _blocks(t, 37, phase)
        power = np.where(busy, 480.0, 75.0)
        energy = np.empty(len(t))
        before = rel < reboot_s
        energy[before] = _energy_mj(power[before], 60)
        after = ~before
        boot_t = t[0] + reboot_s + 120  # the driver loads 2 minutes into the outage
        energy[after] = np.cumsum(power[after] * 60 * 1000.0) + power[after][0] * 1000.0 * (t[after][0] - 60 - boot_t)
        used = np.where(busy, 52000.0 + 100 * (rel % 600) / 60, 600.0)
        values = {
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": np.where(busy, eng, 0.02),
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": np.where(busy, 0.3, 0.0),
            "DCGM_FI_PROF_DRAM_ACTIVE": np.where(busy, 0.4, 0.0),
            "DCGM_FI_DEV_GPU_UTIL": np.where(busy, duty, 1.0),
            "DCGM_FI_DEV_MEM_COPY_UTIL": np.where(busy, 30.0, 0.0),
            "DCGM_FI_DEV_FB_USED": used, "DCGM_FI_DEV_FB_FREE": 81559 - used,
            "DCGM_FI_DEV_POWER_USAGE": power, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": energy,
            "DCGM_FI_DEV_GPU_TEMP": np.where(busy, 71.0, 38.0),
        }
        for p, (pod, ip) in enumerate(targets):
            target = {"pod": pod, "namespace": "gpu-operator", "container": "exporter", "instance": f"{ip}:9400",
                      "job": "dcgm-exporter", "service": "dcgm-exporter", "endpoint": "metrics"}
            base = _dcgm(gpu, uuid, H100, "Hostname", "gpu-node-1") | target
            workload = {"exported_pod": f"llm-train-{gpu}-5f7c9", "exported_namespace": "research",
                        "exported_container": "trainer"}
            for metric, v in values.items():
                mine = (pods == p) & up
                lay.add(metric, base | workload, v, mine & busy)
                lay.add(metric, base, v, mine & ~busy)
        ok = up
        truth["gpus"][uuid] = {"engine": float(values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"][ok].mean()),
                               "duty": float(values["DCGM_FI_DEV_GPU_UTIL"][ok].mean()) / 100}
        truth["energy_j"][uuid] = counter_truth(energy[ok]) / 1000
        truth["held"][uuid] = (f"llm-train-{gpu}-5f7c9", "research", "trainer", int((busy & ok).sum()))
        truth["fb"][uuid] = (t[ok], used[ok])  # every FB_USED sample, whichever series carried it
    lay.truth = truth
    return lay


def gpu_util_vm(index: int) -> Layout:
    """Cloud VMs without profiling metrics: one on current names (DCGM_FI_DEV_GPU_UTIL, ...), one on
    dcgm-exporter 1.x compatibility names (dcgm_gpu_utilization, ...) with no Hostname (instance is the VM), one
    on lowercase names (dcgm_fi_dev_gpu_util, ...: a relabeling that lowercases metric names)."""
    lay = Layout("gpu_util_vm", index, 30)
    t = lay.times()
    truth: dict[str, Any] = {"gpus": {}, "energy_j": {}, "hosts": {}}
    current = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE",
               "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    compat = ("dcgm_gpu_utilization", "dcgm_fb_used", "dcgm_fb_free", "dcgm_power_usage",
              "dcgm_total_energy_consumption")
    for k, (vm, names) in enumerate((("vm-t4-1", current), ("vm-t4-2", compat),
                                     ("vm-t4-3", tuple(n.lower() for n in current)))):
        uuid = f"GPU-7e570000-aaaa-bbbb-cccc-00000000000{k + 1}"
        busy = _blocks(t, 29, 60 * k)
        duty = np.where(busy, (88.0, 64.0, 47.0)[k], 0.0)
        power = np.where(busy, 62.0, 11.0)
        energy = _energy_mj(power, 30, 1e9)
        used = np.where(busy, 9000.0, 0.0)
        labels = (_dcgm(0, uuid, T4, "Hostname", vm) if names is not compat else
                  {"gpu": "0", "UUID": uuid, "instance": f"{vm}:9400", "job": "dcgm"})
        for metric, v in zip(names, (duty, used, 15360 - used, power, energy), strict=True):
            lay.add(metric, labels, v)
        truth["gpus"][uuid] = {"duty": float(duty.mean()) / 100}
        truth["energy_j"][uuid] = counter_truth(energy) / 1000
        truth["hosts"][uuid] = vm
    lay.truth = truth
    return lay


def legacy_relabel(index: int) -> Layout:
    """dcgm-exporter 2.x in Kubernetes: Hostname is the exporter pod (it restarts at 2 h: a new name), and the
    relabeling of NVIDIA/dcgm-exporter#78 overwrites pod_name and namespace with the exporter's own: the workload
    is in pod/container and exported_namespace. The ServiceMonitor relabels the node name into kubernetes_node."""
    lay = Layout("legacy_relabel", index, 30)
    t = lay.times()
    rel = t - t[0]
    uuid = "GPU-1e9ac700-0000-4000-8000-00000000beef"
    busy = _blocks(t, 31)
    duty = np.where(busy, 91.0, 0.0)
    eng = np.where(busy, 0.7, 0.0)
    used = np.where(busy, 20000.0, 100.0)  # idle: below the 256 MiB a CUDA context holds
    for first, pod in ((True, "dcgm-exporter-6ldbb"), (False, "dcgm-exporter-x9k2q")):
        mine = (rel < 7200) if first else (rel >= 7200)
        base = _dcgm(0, uuid, "Tesla V100-SXM2-32GB", "Hostname", pod) | {
            "pod_name": pod, "namespace": "gpu-operator", "kubernetes_node": "gpu-node-7",
            "instance": f"10.244.1.{20 if first else 33}:9400", "job": "dcgm-exporter"}
        workload = {"pod": "bert-serve-6b8d4-2xkqp", "container": "triton", "exported_namespace": "inference"}
        for metric, v in (("DCGM_FI_DEV_GPU_UTIL", duty), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", eng),
                          ("DCGM_FI_DEV_FB_USED", used), ("DCGM_FI_DEV_FB_FREE", 32510 - used)):
            lay.add(metric, base | workload, v, mine & busy)
            lay.add(metric, base, v, mine & ~busy)
    lay.truth = {"host": "gpu-node-7", "uuid": uuid, "duty": float(duty.mean()) / 100, "engine": float(eng.mean()),
                 "workload": ("bert-serve-6b8d4-2xkqp", "inference", "triton"), "busy_samples": int(busy.sum())}
    return lay


def no_hostname(index: int) -> Layout:
    """An old label set without Hostname: `instance` is the exporter pod's IP and changes when it restarts (at
    2 h). Node 1's ServiceMonitor relabels the node name into `node`; node 2's puts it only in `node_name` (not a
    label the importer trusts by itself: the summary names it)."""
    lay = Layout("no_hostname", index, 30)
    t = lay.times()
    rel = t - t[0]
    truth: dict[str, Any] = {"gpus": {}, "hosts": {}}
    for node, uuid, node_label, ips in (("gpu-node-21", "GPU-00aa0000-0000-4000-8000-000000000021", "node",
                                         ("10.1.4.8", "10.1.4.19")),
                                        ("gpu-node-22", "GPU-00aa0000-0000-4000-8000-000000000022", "node_name",
                                         ("10.1.5.3", "10.1.5.12"))):
        duty = np.where(_blocks(t, 17), 55.0, 5.0)
        for k, ip in enumerate(ips):
            mine = (rel < 7200) if k == 0 else (rel >= 7200)
            labels = {"gpu": "0", "UUID": uuid, "device": "nvidia0", "modelName": H100,
                      "instance": f"{ip}:9400", "job": "dcgm-exporter", node_label: node}
            lay.add("DCGM_FI_DEV_GPU_UTIL", labels, duty, mine)
            lay.add("DCGM_FI_DEV_FB_USED", labels, np.full(len(t), 1000.0), mine)
        truth["gpus"][uuid] = {"duty": float(duty.mean()) / 100}
        truth["hosts"][uuid] = node
        truth.setdefault("ips", {})[uuid] = ips
    lay.truth = truth
    return lay


def time_sliced_l4(index: int) -> Layout:
    """dcgm-exporter 4.5 with KUBERNETES_VIRTUAL_GPUS on an L4 shared by time-slicing: GPU_UTIL and FB_USED keep
    their device-level series and get one per pod (that pod's share; pod_uid and vgpu labels); every other metric
    is one copy per pod with the device value; while no pod holds the GPU, device-level series only."""
    lay = Layout("time_sliced_l4", index, 30)
    t = lay.times()
    uuid = "GPU-14140000-0000-4000-8000-000000000044"
    a_on = np.ones(len(t), bool)
    a_on[: len(t) // 8] = False  # no pod for the first half hour
    b_on = _blocks(t, 33) & a_on
    a_util, b_util = np.where(a_on, 30.0, 0.0), np.where(b_on, 40.0, 0.0)
    a_mem, b_mem = np.where(a_on, 6000.0, 0.0), np.where(b_on, 9000.0, 0.0)
    duty = a_util + b_util + np.where(a_on, 2.0, 0.0)
    used = a_mem + b_mem + 300.0
    eng = np.clip(duty / 100 + 0.05, 0, 1)
    power = 30 + 0.5 * duty
    energy = _energy_mj(power, 30, 2e10)
    base = _dcgm(0, uuid, L4, "hostname", "gpu-node-l4")
    pods = {"a": ({"pod": "sd-inference-0", "namespace": "genai", "container": "diffusers",
                   "pod_uid": "6f1c1a2e-0000-4000-8000-00000000000a", "vgpu": "0"}, a_on, a_util, a_mem),
            "b": ({"pod": "whisper-1", "namespace": "speech", "container": "asr",
                   "pod_uid": "6f1c1a2e-0000-4000-8000-00000000000b", "vgpu": "1"}, b_on, b_util, b_mem)}
    any_pod = a_on | b_on
    lay.add("DCGM_FI_DEV_GPU_UTIL", base, duty)
    lay.add("DCGM_FI_DEV_FB_USED", base, used)
    for labels, on, util, mem in pods.values():
        lay.add("DCGM_FI_DEV_GPU_UTIL", base | labels, util, on)
        lay.add("DCGM_FI_DEV_FB_USED", base | labels, mem, on)
    for metric, v in (("DCGM_FI_PROF_GR_ENGINE_ACTIVE", eng), ("DCGM_FI_DEV_FB_FREE", 23034 - used),
                      ("DCGM_FI_DEV_POWER_USAGE", power), ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", energy)):
        lay.add(metric, base, v, ~any_pod)
        for labels, on, _, _ in pods.values():
            lay.add(metric, base | {k: labels[k] for k in ("pod", "namespace", "container", "vgpu")}, v, on)
    lay.truth = {"uuid": uuid, "host": "gpu-node-l4", "duty": float(duty.mean()) / 100, "engine": float(eng.mean()),
                 "last_used": (t, used), "pods": {"sd-inference-0": (a_on, a_util, a_mem),
                                                  "whisper-1": (b_on, b_util, b_mem)},
                 "energy_j": counter_truth(energy) / 1000}
    return lay


def jobstats(index: int) -> Layout:
    """Princeton jobstats' GPU exporter on a Slurm node: an H100 with GPM metrics under jobs (jobid, userid),
    and an A100 in MIG mode: its MIG devices (MIG-... uuids, the parent's power) report memory and power only."""
    lay = Layout("jobstats", index, 30)
    t = lay.times()
    truth: dict[str, Any] = {}
    host = {"instance": "della-l01g3:9445", "job": "gpus", "cluster": "della"}
    uuid = "GPU-03aa20a1-2e97-d125-629d-fd4e5734553f"
    busy = _blocks(t, 27)
    base = host | {"ordinal": "0", "minor_number": "2", "uuid": uuid, "name": H100}
    job = {"jobid": "45916256", "userid": "262563"}
    values = {"nvidia_gpu_duty_cycle": np.where(busy, 93.0, 0.0),
              "nvidia_gpu_sm_util_percent": np.where(busy, 0.41, 0.0),
              "nvidia_gpu_graphics_util_percent": np.where(busy, 0.9, 0.0),
              "nvidia_gpu_memory_used_bytes": np.where(busy, 60e9, 5e8),
              "nvidia_gpu_memory_total_bytes": np.full(len(t), 85520809984.0),
              "nvidia_gpu_power_usage_milliwatts": np.where(busy, 610000.0, 72000.0),
              "nvidia_gpu_temperature_celsius": np.where(busy, 66.0, 33.0)}
    for metric, v in values.items():
        lay.add(metric, base | job, v, busy)
        lay.add(metric, base, v, ~busy)
    truth["h100"] = {"uuid": uuid, "sm": float(values["nvidia_gpu_sm_util_percent"].mean()),
                     "engine": float(values["nvidia_gpu_graphics_util_percent"].mean()),
                     "duty": float(values["nvidia_gpu_duty_cycle"].mean()) / 100, "job": job["jobid"],
                     "user": job["userid"], "busy": int(busy.sum()),
                     "power_w": float(values["nvidia_gpu_power_usage_milliwatts"].mean()) / 1000}
    parent = "GPU-9b6e0000-0000-4000-8000-00000000a100"
    pbase = host | {"ordinal": "1", "minor_number": "0", "uuid": parent, "name": A100}
    power = np.full(len(t), 180000.0)
    for labels in (pbase, pbase | {"uuid": "MIG-265a219d-a49f-578a-825d-222c72699c16",
                                   "name": f"{A100} MIG 3g.40gb", "GPU_I_ID": "1"}):
        lay.add("nvidia_gpu_memory_used_bytes", labels, np.full(len(t), 2e9))
        lay.add("nvidia_gpu_power_usage_milliwatts", labels, power)
    truth["mig_parent"] = parent
    truth["host"] = "della-l01g3"
    lay.truth = truth
    return lay


def nvidia_smi(index: int) -> Layout:
    """utkuozdemir/nvidia_gpu_exporter (NVML backend) on a workstation: uuid without GPU-, name and index only on
    nvidia_smi_gpu_info; an H100 in MIG mode has no utilization series."""
    lay = Layout("nvidia_smi", index, 30)
    t = lay.times()
    host = {"instance": "ws-01:9835", "job": "nvidia_gpu_exporter"}
    bare = "5f3c7e21-8a9b-4c2d-9e0f-1a2b3c4d5e6f"
    busy = _blocks(t, 19)
    util = np.where(busy, 0.77, 0.03)
    power = np.where(busy, 290.0, 25.0)
    energy = 4.2e6 + np.cumsum(power * 30.0)  # J
    for metric, v in (("nvidia_smi_utilization_gpu_ratio", util), ("nvidia_smi_utilization_memory_ratio", util / 2),
                      ("nvidia_smi_memory_used_bytes", np.where(busy, 1.2e10, 6e8)),
                      ("nvidia_smi_memory_total_bytes", np.full(len(t), 17171480576.0)),
                      ("nvidia_smi_power_draw_watts", power), ("nvidia_smi_energy_joules_total", energy),
                      ("nvidia_smi_temperature_gpu", np.where(busy, 64.0, 31.0))):
        lay.add(metric, host | {"uuid": bare}, v)
    lay.add("nvidia_smi_gpu_info", host | {"uuid": bare, "name": "NVIDIA GeForce RTX 4080 SUPER", "index": "0",
                                           "driver_version": "595.71.05", "pci_bus_id": "00000000:01:00.0"},
            np.ones(len(t)))
    mig = "00000000-1111-4222-8333-444444444444"
    lay.add("nvidia_smi_gpu_info", host | {"uuid": mig, "name": H100, "index": "1"}, np.ones(len(t)))
    lay.add("nvidia_smi_memory_used_bytes", host | {"uuid": mig}, np.full(len(t), 1.1665408e10))
    lay.add("nvidia_smi_power_draw_watts", host | {"uuid": mig}, np.full(len(t), 433.78))
    lay.add("nvidia_smi_mig_mode_current", host | {"uuid": mig}, np.ones(len(t)))
    # With the NVML backend, a MIG GPU has per-GPU-instance activity (mig_info gives the profile); its power and
    # energy stay on the GPU's uuid.
    nvml = "00000000-2222-4333-8444-555555555555"
    lay.add("nvidia_smi_gpu_info", host | {"uuid": nvml, "name": H100, "index": "2"}, np.ones(len(t)))
    mig_power = np.where(busy, 350.0, 120.0)
    mig_energy = 9.9e6 + np.cumsum(mig_power * 30.0)
    lay.add("nvidia_smi_power_draw_watts", host | {"uuid": nvml}, mig_power)
    lay.add("nvidia_smi_energy_joules_total", host | {"uuid": nvml}, mig_energy)
    slices = {}
    for gi, profile, sm in (("3", "3g.40gb", 0.4), ("5", "1g.10gb", 0.1)):
        lay.add("nvidia_smi_mig_info", host | {"uuid": nvml, "mig_uuid": f"MIG-{gi}0000000-0000-4000-8000-000000000000",
                                               "gpu_instance_id": gi, "compute_instance_id": "0", "profile": profile},
                np.ones(len(t)))
        gil = host | {"uuid": nvml, "gpu_instance_id": gi}
        lay.add("nvidia_smi_mig_sm_activity_ratio", gil, np.where(busy, sm, 0.0))
        lay.add("nvidia_smi_mig_graphics_activity_ratio", gil, np.where(busy, sm + 0.2, 0.0))
        lay.add("nvidia_smi_mig_memory_used_bytes", gil, np.full(len(t), 3e9))
        slices[("GPU-" + nvml, int(gi))] = {"sm": float(np.where(busy, sm, 0.0).mean()),
                                            "fraction": (3 if gi == "3" else 1) / 7}
    lay.truth = {"uuid": "GPU-" + bare, "host": "ws-01", "duty": float(util.mean()), "energy_j": counter_truth(energy),
                 "name": "NVIDIA GeForce RTX 4080 SUPER", "mig_uuid": "GPU-" + mig, "nvml_mig": slices,
                 "nvml_power_w": float(mig_power.mean()), "nvml_energy_j": counter_truth(mig_energy)}
    return lay


LAYOUTS = (slurm_mig, helm_servicemonitor, gpu_util_vm, legacy_relabel, no_hostname, time_sliced_l4, jobstats,
           nvidia_smi)


def build_all() -> dict[str, Layout]:
    return {f(i).name: f(i) for i, f in enumerate(LAYOUTS)}


def layout_families(layouts: list[Layout]) -> dict[str, list[OmSeries]]:
    """All layouts' series by metric family (for prom_helpers.write_openmetrics), each in time order."""
    families: dict[str, list[OmSeries]] = {}
    for lay in layouts:
        for s in lay.series:
            families.setdefault(s.metric, []).append(
                (s.labels, s.values.tolist(), [int(ts) for ts in s.times.tolist()]))
    return families
