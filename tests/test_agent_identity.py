"""One status file per host, and an agent that cannot start leaves nothing behind. The real CLI on the
simulated NVML (and, for the failure, this machine's real lack of one)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import run_cli

from gpuaudit.agent.instance import host_key, lock_path
from gpuaudit.agent.runner import status_name


def test_status_file_names_are_one_per_host() -> None:
    """Defect: hosts "n 1" and "n_1" shared agent-status-n_1.json (the locks were already distinct)."""
    hosts = ["n 1", "n_1", "n/1", "n%201", "n\x001", "", "%", "host", "x" * 300, "x" * 299 + "y", "ü"]
    names = [status_name(h) for h in hosts]
    assert len(set(names)) == len(hosts), names
    assert all(len(n) < 255 and "/" not in n and "\0" not in n for n in names)
    # the same key as the lock's: one identity per host
    for h in hosts:
        assert lock_path(Path("/d"), h).name == f".agent-{host_key(h)}.lock"
    assert status_name("gpu-node-01.example.com") == "agent-status-gpu-node-01.example.com.json"  # unchanged


def test_agent_status_does_not_report_another_hosts_agent(tmp_path: Path) -> None:
    """Defect: `agent status --host "n 1"` read the status file of host "n_1" and reported its agent."""
    r = run_cli("agent", "run", "--once", "--interval", "0.2", "--simulate", "static", "--simulate-gpus", "1",
                "--data", str(tmp_path), "--host", "n_1")
    assert r.returncode == 0, r.stderr
    st = run_cli("agent", "status", "--simulate", "static", "--simulate-gpus", "1", "--data", str(tmp_path),
                 "--host", "n 1")
    assert st.returncode == 3, st.stdout
    assert "no status file yet" in st.stdout, st.stdout
    assert "pid" not in st.stdout.split("agent:", 1)[1], st.stdout


def test_agent_run_without_nvml_leaves_no_data_directory(tmp_path: Path) -> None:
    """Defect: a failed `agent run` on a machine without NVML left a data directory holding a lock file."""
    data = tmp_path / "data"
    for extra in ([], ["--simulate", "static", "--simulate-hardware", "library-missing"]):
        r = run_cli("agent", "run", "--once", "--data", str(data), *extra)
        assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
        assert "NVML" in r.stderr or "nvml" in r.stderr, r.stderr
        assert not data.exists(), sorted(p.name for p in data.rglob("*"))
