"""The simulator's ground truth uses the analyzer's decision tree and thresholds (analysis/decision.py and the
default preset), not a copy of its own (it once had one, spelled `onprem_above`)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gpuaudit import store
from gpuaudit.analysis.config import load_config
from gpuaudit.sim import bulk, workload


def test_decision_branch_follows_the_given_thresholds_and_the_default_preset() -> None:
    d = load_config().decision
    assert workload.decision_branch(d.cloud_below - 0.001) == "cloud"
    assert workload.decision_branch(d.cloud_below) == "hybrid"
    assert workload.decision_branch(d.on_prem_above) == "hybrid"
    assert workload.decision_branch(d.on_prem_above + 0.001) == "on-prem"
    assert workload.decision_branch(0.5, cloud_below=0.6, on_prem_above=0.8) == "cloud"
    assert workload.decision_branch(0.5, cloud_below=0.1, on_prem_above=0.4) == "on-prem"


def test_the_sim_package_holds_no_threshold_of_its_own() -> None:
    src = Path(workload.__file__).parent
    for path in src.glob("*.py"):
        text = path.read_text()
        assert "onprem_above" not in text and "CLOUD_BELOW" not in text, path.name


def test_simulation_sidecar_records_the_analyzers_thresholds(tmp_path: Path) -> None:
    summary = bulk.simulate(tmp_path / "d", "phantom", gpus=8, days=0.05,
                            interval_s=600, start=datetime(2026, 9, 7, tzinfo=UTC))
    meta = store.read_json(tmp_path / "d", bulk.SIDECAR)
    d = load_config().decision
    assert meta["thresholds"] == {"cloud_below": d.cloud_below, "on_prem_above": d.on_prem_above}
    assert meta["branch"] == summary.branch == workload.decision_branch(meta["real_util"])
