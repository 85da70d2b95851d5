"""`import prometheus` on real deployments' layouts (tests/import_layouts.py), backfilled into one real
Prometheus: each GPU's SM activity / engine-active / duty cycle within 0.01 of the truth, the true node
names, every pod and job step attributed, energy within 1 % of the counters' truth, MIG power once (issue 18)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from tests.helpers import require_binary, run_cli
from tests.import_layouts import MIB, Layout, build_all, layout_families
from tests.prom_helpers import PromServer, served, write_openmetrics

from gpuaudit import schema, store
from gpuaudit.importer.promclient import transport
from gpuaudit.importer.prometheus import ImportResult, import_prometheus, summary
from gpuaudit.importer.prometheus.mapping import build_mapping

pytestmark = pytest.mark.prometheus
HOW = "install Prometheus (it ships promtool): apt-get install --no-install-recommends prometheus"
STEP = 300


@pytest.fixture(scope="module")
def layouts() -> dict[str, Layout]:
    return build_all()


@pytest.fixture(scope="module")
def prom(layouts: dict[str, Layout], tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromServer]:
    prometheus, promtool = require_binary("prometheus", HOW), require_binary("promtool", HOW)
    work = tmp_path_factory.mktemp("layouts")
    om = work / "layouts.om.txt"
    write_openmetrics(om, layout_families(list(layouts.values())))
    yield from served(prometheus, promtool, om, work)


_CACHE: dict[tuple[Any, ...], tuple[Path, ImportResult]] = {}


@pytest.fixture(scope="module")
def imported(prom: PromServer, layouts: dict[str, Layout], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """imported(layout name, step, --label overrides...) -> (dataset root, result); each import done once."""
    _CACHE.clear()

    def run(name: str, step_s: int = STEP, labels: tuple[str, ...] = (), exporter: str | None = None
            ) -> tuple[Path, ImportResult]:
        key = (name, step_s, labels, exporter)
        if key not in _CACHE:
            lay = layouts[name]
            root = tmp_path_factory.mktemp(name) / "data"
            mapping = build_mapping(None, list(labels), exporter=exporter)
            _CACHE[key] = root, import_prometheus(root, transport(prom.url, retries=0), mapping, lay.start, lay.end,
                                                  step_s)
        return _CACHE[key]

    return run


def _q(root: Path, sql: str) -> pl.DataFrame:
    with store.open_dataset(root) as ds:
        return ds.query(sql)


def _per_gpu(root: Path) -> dict[tuple[str, int | None], dict[str, Any]]:
    df = _q(root, """SELECT gpu_uuid, mig_instance, any_value(host) AS host, count(DISTINCT host) AS hosts,
                            avg(sm_active) AS sm, avg(gr_engine_active) AS engine, avg(duty_cycle) AS duty,
                            sum(energy_j) AS energy_j, any_value(gpu_fraction) AS fraction,
                            list(DISTINCT source) AS sources, any_value(gpu_name) AS name,
                            any_value(gpu_index) AS idx, count(*) AS n
                     FROM samples GROUP BY ALL""")
    return {(r["gpu_uuid"], r["mig_instance"]): r for r in df.iter_rows(named=True)}


def _steps_with(t: np.ndarray, mask: np.ndarray, step_s: int = STEP) -> set[int]:
    """End times of the steps (ts-step, ts] holding at least one sample where mask is true."""
    return {int((x // step_s + 1) * step_s) for x in t[mask]}


# ----------------------------------------------------------------------------------------- 1 engine-active


def test_engine_active_is_stored_apart_from_sm_activity(imported: Any, layouts: dict[str, Layout]) -> None:
    """Defect: dcgm-exporter's default counters enable GR_ENGINE_ACTIVE, not SM_ACTIVE, and the import stored
    engine-active as sm_active: real utilization was engine-active time."""
    root, result = imported("helm_servicemonitor")
    truth = layouts["helm_servicemonitor"].truth
    got = _per_gpu(root)
    for uuid, want in truth["gpus"].items():
        g = got[(uuid, None)]
        assert g["sm"] is None, g
        assert g["engine"] == pytest.approx(want["engine"], abs=0.01)
        assert g["duty"] == pytest.approx(want["duty"], abs=0.01)
        assert g["sources"] == ["prometheus-dcgm-engine"]
    _, notes = summary(result)
    assert any("engine-active, not SM activity" in n and schema.DCGM_SM_ACTIVE_CSV_LINE in n for n in notes), notes


def test_engine_active_is_an_upper_bound_in_the_analysis_and_the_report(imported: Any,
                                                                        layouts: dict[str, Layout]) -> None:
    """Defect: the analysis counted engine-active time as real utilization and the report called it SM activity."""
    from gpuaudit.analysis import analyze
    from gpuaudit.report.sections import build_report

    root, _ = imported("helm_servicemonitor")
    truth = layouts["helm_servicemonitor"].truth
    r = analyze(root)
    u = r.utilization
    assert u.real_is_upper_bound
    engine = np.mean([g["engine"] for g in truth["gpus"].values()])
    assert u.real_utilization.value == pytest.approx(engine, abs=0.01)  # engine-active, not the duty cycle
    report = build_report(r, version="test")
    text = " ".join(n for s in report.sections for n in s.notes)
    assert "engine-active, not SM activity" in text and schema.DCGM_SM_ACTIVE_CSV_LINE in text
    assert not r.data_quality.stopped_reporting  # the exporter rollout and the reboot: one GPU, one host


# ----------------------------------------------------------------------------------------- 2 host identity


def test_a_gpu_is_its_uuid_on_its_node(imported: Any, layouts: dict[str, Layout]) -> None:
    """Defect: Hostname = the exporter pod (and instance = its IP) changes at every exporter restart: one node
    became two hosts and analyze warned that GPUs stopped reporting."""
    from gpuaudit.analysis import analyze

    root, result = imported("legacy_relabel")
    truth = layouts["legacy_relabel"].truth
    got = _per_gpu(root)
    g = got[(truth["uuid"], None)]
    assert (g["host"], g["hosts"]) == ("gpu-node-7", 1)  # kubernetes_node wins over Hostname=exporter pod
    assert g["duty"] == pytest.approx(truth["duty"], abs=0.01)
    assert g["engine"] == pytest.approx(truth["engine"], abs=0.01)
    assert result.hosts == 1
    assert not analyze(root).data_quality.stopped_reporting
    root, result = imported("helm_servicemonitor")
    assert {r["host"] for r in _per_gpu(root).values()} == {"gpu-node-1"} and result.hosts == 1


def test_pod_ip_hosts_are_one_host_and_flagged_with_the_label_to_use(imported: Any,
                                                                     layouts: dict[str, Layout]) -> None:
    """Defect: without Hostname, instance (the exporter pod's IP) was the host: two hosts per GPU, unflagged."""
    truth = layouts["no_hostname"].truth
    root, result = imported("no_hostname")
    got = _per_gpu(root)
    n21, n22 = sorted(truth["hosts"])
    assert got[(n21, None)]["host"] == "gpu-node-21"  # the `node` label a relabeling put there
    assert got[(n22, None)]["hosts"] == 1 and got[(n22, None)]["host"] == truth["ips"][n22][1]  # latest IP
    for uuid, want in truth["gpus"].items():
        assert got[(uuid, None)]["duty"] == pytest.approx(want["duty"], abs=0.01)
    _, notes = summary(result)
    assert any(n22 in n and "2 host values" in n for n in notes), notes
    assert any("looks like a pod IP" in n and "--label host=node_name" in n for n in notes), notes
    root, _ = imported("no_hostname", labels=("host=node_name,node,instance",))
    assert _per_gpu(root)[(n22, None)]["host"] == "gpu-node-22"


# ----------------------------------------------------------------------------------------- 3 #78 relabel


def test_workload_labels_survive_the_dcgm_exporter_78_relabel(imported: Any, layouts: dict[str, Layout]) -> None:
    """Defect: pod_name (overwritten with the exporter pod) chose the label style, so the workload in
    pod/container + exported_namespace was dropped: 0 pod-steps attributed."""
    root, result = imported("legacy_relabel")
    truth = layouts["legacy_relabel"].truth
    procs = _q(root, "SELECT DISTINCT k8s_pod, k8s_namespace, container FROM processes")
    assert procs.rows() == [truth["workload"]]
    held = _q(root, "SELECT count(*) AS n FROM samples WHERE n_processes > 0")["n"][0]
    assert result.held_steps == result.held_attributed == held > 0
    lines, _ = summary(result)
    assert any(f"held steps: {held} of {held} got a pod or job" in line for line in lines), lines
    assert any("exporter-pod label sets skipped" in line for line in lines), lines


def test_every_workload_step_is_attributed_under_a_servicemonitor(imported: Any, layouts: dict[str, Layout]) -> None:
    root, _ = imported("helm_servicemonitor")
    lay = layouts["helm_servicemonitor"]
    for uuid, (pod, ns, container, _) in lay.truth["held"].items():
        got = set(_q(root, f"SELECT epoch(ts)::BIGINT AS t FROM processes WHERE gpu_uuid = '{uuid}' AND k8s_pod = "
                           f"'{pod}' AND k8s_namespace = '{ns}' AND container = '{container}'")["t"])
        t, used = lay.truth["fb"][uuid]
        assert got == _steps_with(t, used > 10000)


# ----------------------------------------------------------------------------------------- 4 time-slicing


def test_time_sliced_device_series_are_the_gpu_and_pod_series_its_processes(imported: Any,
                                                                           layouts: dict[str, Layout]) -> None:
    """Defect: the device-level series and one series per pod (its own share) were averaged: duty -34 %,
    memory -33 % on a shared L4."""
    root, result = imported("time_sliced_l4")
    truth = layouts["time_sliced_l4"].truth
    g = _per_gpu(root)[(truth["uuid"], None)]
    assert g["duty"] == pytest.approx(truth["duty"], abs=0.01)
    assert g["engine"] == pytest.approx(truth["engine"], abs=0.01)
    assert g["host"] == "gpu-node-l4"
    t, used = truth["last_used"]
    rows = _q(root, "SELECT epoch(ts)::BIGINT AS t, mem_used_bytes FROM samples")
    last = {int((x // STEP + 1) * STEP): u for x, u in zip(t.tolist(), used.tolist(), strict=True)}
    assert all(m == last[ts] * MIB for ts, m in rows.iter_rows())
    procs = _q(root, "SELECT k8s_pod, avg(sm_util) AS sm, max(mem_used_bytes) AS mem, count(*) AS n, "
                     "list(DISTINCT pod_uid) AS uids FROM processes GROUP BY k8s_pod")
    by = {r["k8s_pod"]: r for r in procs.iter_rows(named=True)}
    assert set(by) == {"sd-inference-0", "whisper-1"}
    for pod, (on, util, mem) in truth["pods"].items():
        assert by[pod]["n"] == len(_steps_with(t, on))
        assert by[pod]["mem"] == mem.max() * MIB
        assert 0 < by[pod]["sm"] <= util.max() / 100 + 1e-6
    # One process row per pod and step, with the UID its share series carry (the other series carry none).
    assert {p: r["uids"] for p, r in by.items()} == {"sd-inference-0": ["6f1c1a2e-0000-4000-8000-00000000000a"],
                                                    "whisper-1": ["6f1c1a2e-0000-4000-8000-00000000000b"]}
    assert result.time_sliced == [truth["uuid"]]


# ----------------------------------------------------------------------------------------- 5 MIG flex


def test_mig_flex_power_and_energy_count_once(imported: Any, layouts: dict[str, Layout]) -> None:
    """Defect: every GPU-instance series carries the whole GPU's power and energy counter: fleet_summary counted
    the GPU's energy once per slice, analyze weighted it by fraction; an instance without GPU_I_PROFILE counted
    as a whole GPU."""
    root, result = imported("slurm_mig")
    truth = layouts["slurm_mig"].truth
    got = _per_gpu(root)
    assert set(got) == set(truth["gpus"])  # instance 8 (3g or 4g: not guessed) not imported
    for key, want in truth["gpus"].items():
        assert got[key]["fraction"] == pytest.approx(want["fraction"])
        assert got[key]["sm"] == pytest.approx(want["sm"], abs=0.01)
        assert got[key]["host"] == "gpu-a17"
    m1, m2 = truth["energy_j"]
    per_gpu = _q(root, "SELECT gpu_uuid, sum(energy_j) AS e FROM samples GROUP BY 1")
    energy = dict(per_gpu.iter_rows())
    assert energy[m1] == pytest.approx(truth["energy_j"][m1], rel=0.01)
    assert energy[m2] == pytest.approx(truth["energy_j"][m2], rel=0.01)  # instance 7 alone gets the GPU's
    power = _q(root, "SELECT gpu_uuid, epoch(ts) AS t, sum(power_w) AS w FROM samples GROUP BY 1, 2")
    for uuid, want in truth["power_w"].items():
        assert power.filter(pl.col("gpu_uuid") == uuid)["w"].mean() == pytest.approx(want, rel=0.01)
    r = run_cli("sql", "-d", str(root), "--file", "fleet_summary", "--format", "json")
    assert r.returncode == 0, r.stderr
    kwh = json.loads(r.stdout)[0]["energy_kwh"]
    assert kwh * 3.6e6 == pytest.approx(sum(truth["energy_j"].values()), rel=0.01)
    assert list(result.refused) == [f"{m2} MIG 8 on gpu-a17"]
    assert "fits more than one profile" in result.refused[f"{m2} MIG 8 on gpu-a17"]
    assert result.derived == {f"{m2} MIG 7": "1g from 10 GB of memory"}
    for key, (job, times) in truth["jobs"].items():  # every step with a sample under the job, and only those
        got = _q(root, f"SELECT epoch(ts)::BIGINT AS t FROM processes WHERE gpu_uuid = '{key[0]}' "
                       f"AND mig_instance = {key[1]} AND job_id = '{job}'")["t"]
        assert set(got) == _steps_with(times, np.ones(len(times), bool))


# ----------------------------------------------------------------------------------------- 6 energy


@pytest.mark.parametrize("step_s", [60, 300])
def test_energy_from_counter_differences_whatever_the_step(imported: Any, layouts: dict[str, Layout],
                                                           step_s: int) -> None:
    """Defect: with a 60 s scrape and a 60 s step increase() saw one sample per window: energy NULL; a scrape gap
    lost the energy its counter spans. Here also an exporter rollout and a node reboot (counter reset)."""
    root, result = imported("helm_servicemonitor", step_s=step_s)
    truth = layouts["helm_servicemonitor"].truth
    got = _per_gpu(root)
    for uuid, want in truth["energy_j"].items():
        assert got[(uuid, None)]["energy_j"] == pytest.approx(want, rel=0.01)
    assert result.energy_from_counter == 2 and result.energy_from_power == 0


def test_energy_of_vms_and_1x_names(imported: Any, layouts: dict[str, Layout]) -> None:
    """The 1.x compatibility names (dcgm_gpu_utilization, dcgm_total_energy_consumption, ...) and lowercase
    dcgm_fi_* names are found too."""
    root, _ = imported("gpu_util_vm")
    truth = layouts["gpu_util_vm"].truth
    got = _per_gpu(root)
    assert len(got) == 3
    for uuid, want in truth["gpus"].items():
        g = got[(uuid, None)]
        assert g["duty"] == pytest.approx(want["duty"], abs=0.01) and g["sm"] is None and g["engine"] is None
        assert g["sources"] == ["prometheus-dcgm-util"]
        assert g["energy_j"] == pytest.approx(truth["energy_j"][uuid], rel=0.01)
        assert g["host"] == truth["hosts"][uuid]


# ----------------------------------------------------------------------------------------- 7 presets


def test_jobstats_preset(imported: Any, layouts: dict[str, Layout]) -> None:
    """Princeton jobstats' exporter: nvidia_gpu_* series, power in mW, GPM fractions, jobid/userid labels, MIG
    devices under their own MIG- uuid without utilization (named, never dropped silently)."""
    root, result = imported("jobstats")
    truth = layouts["jobstats"].truth
    assert (result.exporter, result.exporter_detected) == ("jobstats", True)
    h = truth["h100"]
    got = _per_gpu(root)
    assert set(got) == {(h["uuid"], None)}
    g = got[(h["uuid"], None)]
    assert g["sm"] == pytest.approx(h["sm"], abs=0.01)
    assert g["engine"] == pytest.approx(h["engine"], abs=0.01)
    assert g["duty"] == pytest.approx(h["duty"], abs=0.01)
    assert g["sources"] == ["prometheus-jobstats"] and g["host"] == truth["host"] and g["idx"] == 0
    power = _q(root, "SELECT avg(power_w) AS w FROM samples")["w"][0]
    assert power == pytest.approx(h["power_w"], rel=0.01)  # mW -> W
    procs = _q(root, "SELECT DISTINCT job_id, \"user\" FROM processes")
    assert procs.rows() == [(h["job"], h["user"])]
    lines, notes = summary(result)
    assert any("exporter jobstats" in line and "detected" in line for line in lines), lines
    assert any(truth["mig_parent"] in n and "no utilization series" in n for n in notes), notes


def test_nvidia_smi_preset(imported: Any, layouts: dict[str, Layout]) -> None:
    """utkuozdemir/nvidia_gpu_exporter: uuid without GPU-, name and index from nvidia_smi_gpu_info, energy in J;
    the MIG GPU has series but no utilization series (named in a note)."""
    root, result = imported("nvidia_smi")
    truth = layouts["nvidia_smi"].truth
    assert (result.exporter, result.exporter_detected) == ("nvidia-smi", True)
    got = _per_gpu(root)
    assert set(got) == {(truth["uuid"], None), *truth["nvml_mig"]}
    g = got[(truth["uuid"], None)]
    assert g["duty"] == pytest.approx(truth["duty"], abs=0.01)
    assert (g["name"], g["idx"], g["host"]) == (truth["name"], 0, truth["host"])
    assert g["energy_j"] == pytest.approx(truth["energy_j"], rel=0.01)
    assert g["sources"] == ["prometheus-nvidia-smi-util"]
    # The NVML backend's MIG activity: profile from nvidia_smi_mig_info, the GPU's power and energy split once.
    for key, want in truth["nvml_mig"].items():
        assert got[key]["fraction"] == pytest.approx(want["fraction"])
        assert got[key]["sm"] == pytest.approx(want["sm"], abs=0.01)
        assert got[key]["sources"] == ["prometheus-nvidia-smi"] and got[key]["idx"] == 2
    mig_uuid = next(iter(truth["nvml_mig"]))[0]
    energy = sum(got[k]["energy_j"] for k in truth["nvml_mig"])
    assert energy == pytest.approx(truth["nvml_energy_j"], rel=0.01)
    power = _q(root, f"SELECT sum(power_w) AS w FROM samples WHERE gpu_uuid = '{mig_uuid}' GROUP BY ts")["w"]
    assert power.mean() == pytest.approx(truth["nvml_power_w"], rel=0.01)
    _, notes = summary(result)
    assert any(truth["mig_uuid"] in n and "no utilization series" in n for n in notes), notes


def test_exporter_preset_given_and_cli_summary(prom: PromServer, layouts: dict[str, Layout], tmp_path: Path) -> None:
    lay = layouts["legacy_relabel"]
    r = run_cli("import", "prometheus", "--url", prom.url, "--start", lay.start.isoformat(), "--end",
                lay.end.isoformat(), "--step", "5m", "--exporter", "dcgm", "-q", "--data", str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr
    assert "layout: exporter dcgm (NVIDIA dcgm-exporter, given with --exporter)" in r.stdout
    assert "hosts from kubernetes_node" in r.stdout and "pods from pod" in r.stdout
    assert "engine-active, not SM activity" in r.stderr
    r = run_cli("import", "prometheus", "--url", prom.url, "--start", lay.start.isoformat(), "--end",
                lay.end.isoformat(), "--exporter", "bogus", "--data", str(tmp_path / "e"))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "gpuaudit: error: bad --exporter 'bogus': use one of dcgm, jobstats, nvidia-smi, gpuaudit (or leave it "
        "out to detect it)"]


# ----------------------------------------------------------------------------------------- 8 last values


def test_last_value_is_the_last_series_last_value(imported: Any, layouts: dict[str, Layout]) -> None:
    """Defect: memory (a last-value metric) was averaged across series when a pod label changed mid-step."""
    root, _ = imported("helm_servicemonitor")
    truth = layouts["helm_servicemonitor"].truth
    rows = _q(root, "SELECT gpu_uuid, epoch(ts)::BIGINT AS t, mem_used_bytes AS m FROM samples")
    for uuid, (t, used) in truth["fb"].items():
        last = {int((x // STEP + 1) * STEP): u for x, u in zip(t.tolist(), used.tolist(), strict=True)}
        mine = rows.filter(pl.col("gpu_uuid") == uuid)
        assert mine.height == len(last)
        bad = [(ts, m, last[ts] * MIB) for _, ts, m in mine.iter_rows() if m != round(last[ts] * MIB)]
        assert not bad, bad[:3]


def test_data_quality_says_when_energy_was_estimated_from_power(imported: Any) -> None:
    """jobstats' exporter has no energy counter: the import summary and the data-quality section say that
    energy is power x time there; a layout with counters says nothing of the kind."""
    from gpuaudit.analysis import analyze

    root, result = imported("jobstats")
    lines, _ = summary(result)
    assert "energy: estimated from power on 1 GPUs (no energy counter)" in lines
    assert any("energy was estimated from power" in w and "100%" in w for w in analyze(root).data_quality.warnings)
    root, _ = imported("gpu_util_vm")
    assert not any("energy was estimated" in w for w in analyze(root).data_quality.warnings)
