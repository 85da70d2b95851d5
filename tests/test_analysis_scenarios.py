"""End to end: `gpuaudit analyze --json` (a subprocess, as a user runs it, for one of them) on each simulated
scenario lands on the scenario's documented ground truth and branch, and on the exact figures the simulator
generated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers import SIZES, run_cli, scenario_dataset

from gpuaudit.sim import bulk as sim
from gpuaudit.sim.workload import SCENARIOS
from gpuaudit.store import read_json


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:  # type: ignore[type-arg]
    from gpuaudit.analysis import analyze

    out = {}
    for name in SIZES:
        root, _ = scenario_dataset(tmp_path_factory, name)  # the simulator's tests read the same datasets
        if name == "phantom":  # one as a user runs it; the others in this process (the same code, faster)
            proc = run_cli("analyze", "--data", str(root), "--json")
            assert proc.returncode == 0, proc.stderr
            out[name] = root, json.loads(proc.stdout)
        else:
            out[name] = root, json.loads(json.dumps(analyze(root).to_dict()))
    return out


@pytest.mark.parametrize("name", list(SIZES))
def test_scenario_lands_on_ground_truth_and_branch(results: dict, name: str) -> None:  # type: ignore[type-arg]
    root, r = results[name]
    truth, tol = SCENARIOS[name].truth, SCENARIOS[name].tolerance
    u = r["utilization"]
    assert abs(u["runtime_utilization"]["value"] - truth.runtime_util) <= tol
    assert abs(u["real_utilization"]["value"] - truth.real_util) <= tol
    side = read_json(root, sim.SIDECAR)
    assert u["runtime_utilization"]["value"] == pytest.approx(side["runtime_util"], abs=1e-5)
    assert u["real_utilization"]["value"] == pytest.approx(side["real_util"], abs=1e-5)
    assert r["decision"]["branch"] == truth.branch == side["branch"]
    assert r["trial"]["gpus"] == SIZES[name][0]
    assert r["trial"]["provisional"] is True  # 7-14 days < 90
    assert r["confidence"]["resamples"] == 1000
    low, high = r["confidence"]["real_utilization"]["low"], r["confidence"]["real_utilization"]["high"]
    assert low <= u["real_utilization"]["value"] <= high


def test_phantom_shows_the_phantom_gap(results: dict) -> None:  # type: ignore[type-arg]
    u = results["phantom"][1]["utilization"]
    assert u["phantom_gap"]["value"] > 0.25  # runtime-hour accounting ~60 %, real ~23 %
    assert u["idle_held_gpu_hours"]["value"] > 0
    assert results["phantom"][1]["breakdowns"]["per_user"]["rows"]


def test_mixed_fleet_sizes_a_hybrid(results: dict) -> None:  # type: ignore[type-arg]
    r = results["mixed"][1]
    h = r["hybrid"]
    assert 0 < h["n_star"] <= h["peak_demand"]["value"] + 1
    assert h["agrees"] is True
    assert r["decision"]["rule"]["id"] == "mid-utilization"


def test_steady_training_is_on_prem_check_egress(results: dict) -> None:  # type: ignore[type-arg]
    d = results["steady-training"][1]["decision"]
    assert d["branch"] == "on-prem" and d["rule"]["id"] == "high-utilization"
    assert any("egress" in c for c in d["caveats"])
