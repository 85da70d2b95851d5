"""One rule for "behaviour change": a plan reachable only by changing how the fleet is used (releasing idle
cloud instances, packing the work) is never counted as cheapest, and a fleet that owns nothing is never told
that owned GPUs burn cash idle."""

from __future__ import annotations

from tests.analysis_helpers import gpu_rows, rollups

from gpuaudit.analysis import analyze_rollups
from gpuaudit.analysis.config import load_config
from gpuaudit.analysis.overrides import Overrides
from gpuaudit.report.sections import build_report


def _rows() -> list[dict]:  # type: ignore[type-arg]
    """8 rented GPUs reporting all the time, held 2 samples of every 3, at 15 % SM activity."""
    return [r for g in range(8) for r in gpu_rows("n1", f"G-{g}", 48 * 12, interval_s=300, sm=0.15,
                                                  procs=lambda i: int(i % 3 < 2))]


def test_a_cloud_fleet_is_not_told_to_move_to_the_cloud() -> None:
    r = analyze_rollups(rollups(_rows()), load_config(), overrides=Overrides(current="cloud"))
    s = {x.id: x for x in r.costs.scenarios}
    # renting only the held hours (2/3 of the instance-hours) is the plan that releases idle instances
    assert s["all-cloud"].cloud_gpu_hours < s["stay-as-is"].cloud_gpu_hours
    assert s["all-cloud"].what_if and "releasing idle instances" in s["all-cloud"].label
    assert r.costs.cheapest != "all-cloud" and r.decision.recommended_scenario != "all-cloud"
    assert "move to the cloud" not in r.decision.headline.lower()
    assert "owned gpus burn cash idle" not in r.decision.rule.description.lower()
    verdict = build_report(r, version="test").verdict
    assert "move to the cloud" not in verdict.headline.lower()


def test_an_on_prem_fleet_still_compares_moving_to_the_cloud() -> None:
    """On-prem, all cloud is the plan being weighed, not a behaviour change: it stays eligible."""
    r = analyze_rollups(rollups(_rows()), load_config())
    s = {x.id: x for x in r.costs.scenarios}
    assert not s["all-cloud"].what_if and r.costs.cheapest == "all-cloud"
