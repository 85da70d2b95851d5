"""Deployment files: the systemd unit passes `systemd-analyze verify` and is hardened; the DaemonSet is
valid against the Kubernetes schema and has what the agent needs on a GPU node."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest
from tests.helpers import REPO, UNIT_BINARY, run_cli, systemd_verify

AGENTS = REPO / "agents"
UNIT = AGENTS / "gpuaudit-agent.service"
DAEMONSET = AGENTS / "daemonset.yaml"
SHARED = AGENTS / "daemonset-shared.yaml"  # every node writes into one ReadWriteMany volume


def test_systemd_unit_verifies_cleanly(tmp_path: Path) -> None:
    r = systemd_verify({UNIT.name: UNIT.read_text()}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "gpuaudit-agent.service" not in r.stderr, r.stderr  # no warning about our unit at all


def test_systemd_verify_would_catch_a_broken_unit(tmp_path: Path) -> None:
    broken = UNIT.read_text().replace("NoNewPrivileges=yes", "NoNewPrivilege=yes")
    r = systemd_verify({UNIT.name: broken}, tmp_path)
    assert "Unknown key" in r.stderr  # the check above is not vacuous


def test_systemd_unit_is_hardened() -> None:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read(UNIT)
    svc = cp["Service"]
    assert svc["User"] == "gpuaudit"
    assert svc["NoNewPrivileges"] == "yes"
    assert svc["ProtectSystem"] == "strict"
    assert svc["ReadWritePaths"] == "/var/lib/gpuaudit"
    assert svc["Restart"] == "on-failure"
    assert "--data /var/lib/gpuaudit" in svc["ExecStart"]
    assert "PrivateDevices" not in svc  # /dev/nvidia* must stay visible


def _docs(path: Path = DAEMONSET) -> list[dict]:
    yaml = pytest.importorskip("yaml")
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.mark.parametrize("manifest", [DAEMONSET, SHARED], ids=lambda p: p.name)
def test_manifests_validate_against_the_kubernetes_schema(manifest: Path) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    for doc in _docs(manifest):
        kv.validate(doc, kv.latest_version(), strict=True)  # raises ValidationError


def test_kubernetes_schema_check_is_not_vacuous() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    ds = next(d for d in _docs() if d["kind"] == "DaemonSet")
    ds["spec"]["template"]["spec"]["hostPid"] = True  # misspelt field
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, kv.latest_version(), strict=True)


def test_daemonset_has_what_the_agent_needs() -> None:
    ds = next(d for d in _docs() if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True  # attribution of host PIDs NVML reports
    assert pod["runtimeClassName"] == "nvidia"
    assert any(t["key"] == "nvidia.com/gpu" and t["operator"] == "Exists" for t in pod["tolerations"])
    (c,) = pod["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "$(NODE_NAME)" in c["args"] and c["args"][:2] == ["agent", "run"]
    assert "nvidia.com/gpu" not in c["resources"].get("limits", {})  # never takes a GPU from workloads
    assert c["resources"]["requests"] == {"cpu": "10m", "memory": "64Mi"}
    data = next(v for v in pod["volumes"] if v["name"] == "data")
    assert data["hostPath"]["path"] == "/var/lib/gpuaudit"
    mount = next(m for m in c["volumeMounts"] if m["name"] == "data")
    assert c["args"][c["args"].index("--data") + 1] == mount["mountPath"]


@pytest.mark.parametrize("manifest", [DAEMONSET, SHARED], ids=lambda p: p.name)
def test_agent_runs_as_non_root_in_a_labelled_namespace(manifest: Path) -> None:
    docs = _docs(manifest)
    ns = next(d for d in docs if d["kind"] == "Namespace")
    labels = ns["metadata"]["labels"]
    # hostPID and hostPath are beyond baseline: privileged is the only level that admits the agent.
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/audit"] == "baseline"
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    assert ds["metadata"]["namespace"] == ns["metadata"]["name"]
    pod = ds["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
    (agent,) = pod["containers"]
    assert "runAsUser" not in agent["securityContext"]  # inherits the pod's non-root user
    assert agent["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    for init in pod.get("initContainers", []):  # the only root step: hand the hostPath dir to the agent's user
        assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
        assert init["command"] == ["chown", f"{pod['securityContext']['runAsUser']}:"
                                   f"{pod['securityContext']['runAsGroup']}", agent_data_mount(agent)]


def agent_data_mount(container: dict) -> str:
    return container["args"][container["args"].index("--data") + 1]


def test_the_image_runs_as_the_manifests_user() -> None:
    dockerfile = (AGENTS / "Dockerfile").read_text()
    pod = next(d for d in _docs() if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    uid, gid = pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]
    assert f"\nUSER {uid}:{gid}\n" in dockerfile and f"--uid {uid}" in dockerfile


def test_shared_volume_example_collects_every_node_in_one_dataset() -> None:
    docs = _docs(SHARED)
    pvc = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    claim = pvc["metadata"]["name"]
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (agent,) = pod["containers"]
    data = next(v for v in pod["volumes"] if v["name"] == "data")
    assert data["persistentVolumeClaim"]["claimName"] == claim
    assert next(m for m in agent["volumeMounts"] if m["name"] == "data")["mountPath"] == agent_data_mount(agent)
    assert "$(NODE_NAME)" in agent["args"]  # partitions per node: nodes never write the same file
    job = next(d for d in docs if d["kind"] == "CronJob")
    jpod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    assert next(v for v in jpod["volumes"] if v["name"] == "data")["persistentVolumeClaim"]["claimName"] == claim
    (compact,) = jpod["containers"]
    assert compact["args"][0] == "compact" and agent_data_mount(compact) == "/data"
    # The rest of the agent's pod is the same as the local-data DaemonSet's.
    local = next(d for d in _docs() if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    for key in ("runtimeClassName", "hostPID", "nodeSelector", "tolerations", "priorityClassName"):
        assert pod[key] == local[key], key
    assert agent["args"] == local["containers"][0]["args"] and agent["env"] == local["containers"][0]["env"]


def test_systemd_install_path_is_the_one_agents_readme_creates() -> None:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read(UNIT)
    assert cp["Service"]["ExecStart"].split()[0] == UNIT_BINARY
    readme = (AGENTS / "README.md").read_text()
    venv = str(Path(UNIT_BINARY).parents[1])
    # PEP 668 systems (Debian 12+, Ubuntu 24.04): a venv, never pip into the system Python.
    assert f"sudo python3 -m venv {venv}\n" in readme
    assert f"sudo {venv}/bin/pip install 'gpuaudit[agent]'" in readme
    assert "\npip install gpuaudit" not in readme and "sudo pip install" not in readme


def test_upload_variant_in_agents_readme_is_a_valid_daemonset_the_agent_accepts() -> None:
    import re

    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    yaml = pytest.importorskip("yaml")
    block = re.search(r"```yaml\n(# upload variant.*?)```", (AGENTS / "README.md").read_text(), re.S)
    assert block, "agents/README.md lost its upload variant"
    patch = yaml.safe_load(block.group(1))
    ds = next(d for d in _docs() if d["kind"] == "DaemonSet")
    (agent,) = ds["spec"]["template"]["spec"]["containers"]
    agent.update(patch)
    kv.validate(ds, kv.latest_version(), strict=True)
    args = patch["args"]
    assert args[:2] == ["agent", "run"] and args[args.index("--upload") + 1].startswith("s3://")
    r = run_cli("agent", "run", "--help")
    assert r.returncode == 0
    flags = {a for a in args if a.startswith("--")}
    assert flags <= set(re.findall(r"--[a-z-]+", r.stdout)), flags  # every option exists on `agent run`
