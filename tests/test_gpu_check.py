"""benchmarks/gpu_check.sh, the prepared check for a GPU machine without network, run end to end against the fake
NVML (`--simulate`): agent status, the selftest, an agent run while the load holds, one JSON of results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from tests.helpers import REPO
from tests.test_package import lean_venv, wheel  # noqa: F401  (fixtures: the wheel installed without extras)

SCRIPT = REPO / "benchmarks" / "gpu_check.sh"
WHEELS = REPO / "benchmarks" / "wheels"


def run_check(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str],
                                                                                      dict, float]:
    """The script with `env` (default: this environment), a 3 s agent run, its JSON."""
    out = tmp_path / "result" / "gpu_check.json"
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(SCRIPT), "--simulate", "--out", str(out), *args], capture_output=True, text=True,
                       env={**(os.environ if env is None else env), "GPU_CHECK_RUN_S": "3", "TMPDIR": str(tmp_path)},
                       timeout=300)
    elapsed = time.monotonic() - t0
    assert out.exists(), r.stderr
    return r, json.loads(out.read_text()), elapsed


def _assert_result(r: subprocess.CompletedProcess[str], result: dict, elapsed: float) -> None:
    assert r.returncode == 0, (r.stderr, result)
    assert result["verdict"] == "pass" and result["simulated"] is True
    assert result["exit_codes"] == {"status": 3, "selftest": 0, "hold": 0, "agent_run": 0}  # 3: no agent running
    assert result["driver_version"] == "550.54.15" and result["nvml_error"] is None and result["gpm"] is True
    steps = result["selftest"]["steps"]
    assert [(s["k"], s["d"]) for s in steps] == [(k, d) for k in (132, 66, 1) for d in (1.0, 0.5, 0.25)]
    assert all(abs(s["measured_sm_active"] - s["expected_sm_active"]) <= 0.05 and s["passed"] for s in steps)
    run = result["agent_run"]
    assert run["ok"] and run["rows"] == 3 and run["seconds"] == 3.0
    assert len(json.dumps(result)) < 20_000  # one small file
    assert elapsed < 300


def test_gpu_check_without_wheels_says_how_to_build_them(tmp_path: Path) -> None:
    r = subprocess.run(["bash", str(SCRIPT), "--simulate", "--out", str(tmp_path / "x.json")], capture_output=True,
                       text=True, env={**os.environ, "GPU_CHECK_WHEELS": str(tmp_path / "none")}, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"gpu_check: error: no gpuaudit wheel in {tmp_path / 'none'}: build them first "
        "(bash benchmarks/build_gpu_check_wheels.sh)"]


@pytest.mark.slow
@pytest.mark.skipif(not list(WHEELS.glob("gpuaudit-*.whl")) or not list(
    WHEELS.glob(f"duckdb-*-cp{sys.version_info[0]}{sys.version_info[1]}-*.whl")),
    reason="no wheels in benchmarks/wheels for this Python: bash benchmarks/build_gpu_check_wheels.sh")
def test_gpu_check_installs_the_agent_offline_from_the_carried_wheels(tmp_path: Path) -> None:
    """What a GPU machine without network does: a fresh venv, pip from its own wheel, --no-index."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only what the venv installed runs
    env["PATH"] = f"{Path(sysconfig.get_paths()['scripts'])}:{env.get('PATH', '')}"  # python3 of this version
    r, result, elapsed = run_check(tmp_path, env={**env, "PIP_INDEX_URL": "http://127.0.0.1:9/none"})
    _assert_result(r, result, elapsed)
    assert "installing the agent" in r.stderr


def test_gpu_check_runs_end_to_end_in_the_agent_only_install(lean_venv: Path, tmp_path: Path) -> None:  # noqa: F811
    """The whole script against the fake NVML, with the wheel installed without extras (no polars, numpy):
    agent status, the selftest, the agent run while the load holds, the JSON and its RESULTS.md section."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r, result, elapsed = run_check(tmp_path, "--python", str(lean_venv / "bin" / "python"), env=env)
    _assert_result(r, result, elapsed)
    # The RESULTS.md section a GPU run records: device, driver, GPM, every step's expected vs measured.
    md = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check_summary.py"), "--markdown",
                         str(tmp_path / "result" / "gpu_check.json")],
                        capture_output=True, text=True, check=True).stdout
    assert md.startswith("## GPU check (benchmarks/gpu_check.sh)\n\n- verdict: **pass** (simulated)")
    assert "driver 550.54.15, 132 SMs" in md and "GPM yes" in md
    assert md.count("\n| 132 | ") == 3 and "| 66 | 1.0 | 0.500 | 0.500 |" in md
