"""Deployment files: the systemd unit passes `systemd-analyze verify` and is hardened; the DaemonSet is
valid against the Kubernetes schema and has what the agent needs on a GPU node."""

from __future__ import annotations

import configparser
import subprocess
from pathlib import Path

import pytest
from tests.helpers import REPO, require_binary

AGENTS = REPO / "agents"
UNIT = AGENTS / "gpuaudit-agent.service"
DAEMONSET = AGENTS / "daemonset.yaml"


def _verify(unit_text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """systemd-analyze verify checks that ExecStart's binary exists, so point it at this checkout's."""
    systemd_analyze = require_binary("systemd-analyze", "install systemd (apt-get install systemd)")
    gpuaudit = REPO / ".venv" / "bin" / "gpuaudit"
    if not gpuaudit.exists():
        pytest.skip("no .venv/bin/gpuaudit console script (run `make test` to create the venv)")
    unit = tmp_path / "gpuaudit-agent.service"
    unit.write_text(unit_text.replace("/usr/local/bin/gpuaudit", str(gpuaudit)))
    return subprocess.run([systemd_analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)


def test_systemd_unit_verifies_cleanly(tmp_path: Path) -> None:
    r = _verify(UNIT.read_text(), tmp_path)
    assert r.returncode == 0, r.stderr
    assert "gpuaudit-agent.service" not in r.stderr, r.stderr  # no warning about our unit at all


def test_systemd_verify_would_catch_a_broken_unit(tmp_path: Path) -> None:
    broken = UNIT.read_text().replace("NoNewPrivileges=yes", "NoNewPrivilege=yes")
    r = _verify(broken, tmp_path)
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


def _docs() -> list[dict]:
    yaml = pytest.importorskip("yaml")
    return [d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d]


def test_daemonset_validates_against_the_kubernetes_schema() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    for doc in _docs():
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
