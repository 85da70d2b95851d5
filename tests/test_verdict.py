"""One consistent decision: a like-for-like break-even, one verdict everywhere, honest bounds when SM activity
was not measured, what-if plans kept out of "cheapest", sunk capital, coverage gaps, and the hybrid's
cross-check."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from tests.analysis_helpers import T0, ends, gpu_rows, proc_rows, rollups, write
from tests.helpers import START

from gpuaudit import schema
from gpuaudit.analysis import analyze, analyze_rollups
from gpuaudit.analysis.config import load_config
from gpuaudit.analysis.overrides import Overrides
from gpuaudit.report.sections import build_report
from gpuaudit.sim import bulk as sim


def _scenarios(r):  # type: ignore[no-untyped-def]
    return {s.id: s for s in r.costs.scenarios}


def _rents(s) -> bool:  # type: ignore[no-untyped-def]
    return any(abs(v) > 1e-9 for k, v in s.components.items()
               if k in ("cloud_compute", "cloud_reserved", "cloud_flexible", "egress", "managed_services"))


@pytest.fixture(scope="module")
def steady32(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("steady32")
    sim.simulate(root, "steady-training", 32, 30, 600, seed=0, start=START)
    return root


def test_break_even_verdict_follows_what_the_cloud_bills(steady32: Path) -> None:
    """steady-training, 32 GPUs: the verdict said "cloud" (u* compared with real utilization S/W) while
    staying on-prem was the cheapest scenario. The cloud bills held hours: the verdict must be the cheaper of
    renting and owning."""
    r = analyze(steady32)
    s = _scenarios(r)
    owning = s["stay-as-is"].total.value
    renting = s["all-cloud"].total.value
    assert r.break_even.verdict == ("cloud" if renting < owning else "on-prem")
    assert r.break_even.verdict == "on-prem" and r.costs.cheapest == "stay-as-is"
    u = r.break_even.break_even_billed_utilization.value
    assert u is not None and (r.break_even.measured_billed < u) == (r.break_even.verdict == "cloud")
    assert r.break_even.measured_billed == pytest.approx(r.utilization.runtime_utilization.value, abs=0.01)


def _steady_rows(n_gpus: int, hours: int = 48, sm: float = 0.95) -> list[dict]:  # type: ignore[type-arg]
    return [r for g in range(n_gpus) for r in gpu_rows("n1", f"GPU-{g}", hours * 12, interval_s=300, sm=sm, procs=1)]


def test_headline_says_when_the_costs_disagree_with_the_rule(tmp_path: Path) -> None:
    """The tree said "on-prem may pay" while the tool's own costs had all-cloud cheaper: the headline must say
    so, with the amount, and not read high confidence."""
    cfg_path = tmp_path / "dear-staff.toml"
    cfg_path.write_text("[on_prem]\nstaff_usd_per_month = 90000\n")
    r = analyze_rollups(rollups(_steady_rows(8)), load_config(cfg_path), overrides=Overrides(current="cloud"))
    assert r.decision.branch.value == "on-prem"  # the rule: > 70 % real
    assert r.costs.cheapest == "all-cloud" or r.costs.cheapest == "stay-as-is"
    cheaper = _scenarios(r)[r.costs.cheapest]
    assert not cheaper.owned_gpus
    h = r.decision.headline
    assert "cheaper" in h and "$" in h and "rule" in h
    assert r.decision.recommendation == "cloud" and not r.decision.agrees_with_costs
    assert r.decision.confidence.level == "low"
    report = build_report(r, version="test")
    assert not report.verdict.confidence.startswith("high")


def test_go_hybrid_is_not_said_when_owning_nothing_is_cheapest() -> None:
    """mixed: "go hybrid" while N* = 0: the headline must say the cost model rents everything."""
    rows = [r for g in range(8) for r in gpu_rows("n1", f"GPU-{g}", 48 * 12, interval_s=300,
                                                     sm=lambda i, g=g: 0.5 if (i // 12 + g) % 2 else 0.1,
                                                     procs=lambda i, g=g: 1 if (i // 12 + g) % 3 else 0)]
    cfg = load_config().replace("on_prem", staff_usd_per_month=200000.0)
    r = analyze_rollups(rollups(rows), cfg, overrides=Overrides(current="cloud"))
    assert r.decision.branch.value == "hybrid"
    assert r.hybrid.n_star == 0
    # a cloud fleet renting only its held hours must release idle instances: a behaviour change (issue 17), so
    # the cheapest plan that rents everything is staying in the cloud
    assert "cheaper" in r.decision.headline and "stay as is (cloud)" in r.decision.headline
    assert r.decision.recommendation == "cloud"


def test_data_residency_never_picks_a_scenario_that_rents() -> None:
    rows = [r for g in range(4) for r in gpu_rows("n1", f"GPU-{g}", 48 * 12, interval_s=300, sm=0.05,
                                                     procs=lambda i: int(i % 4 == 0))]
    r = analyze_rollups(rollups(rows), load_config(), overrides=Overrides(data_residency=True))
    cheapest = _scenarios(r)[r.costs.cheapest]
    assert not _rents(cheapest)
    assert r.decision.recommendation == "on-prem"
    free = analyze_rollups(rollups(rows), load_config())
    assert _rents(_scenarios(free)[free.costs.cheapest])  # without residency renting is cheapest here


def _blanked(rows: list[dict]) -> list[dict]:  # type: ignore[type-arg]
    """The same fleet as an A100/L40S node reports it: duty cycle only (source nvml, no SM activity)."""
    return [{**r, "sm_active": None, "source": schema.SOURCE_NVML} for r in rows]


def test_upper_bound_utilization_reports_the_range_of_branches() -> None:
    """phantom data with SM activity blanked read "<= 42.7 %, go hybrid, confidence high" (truth 27 %:
    cloud). With duty cycle standing in, real utilization is only an upper bound: report every possible
    branch, the phantom gap as a lower bound, and never high confidence."""
    rows = [r for g in range(4) for r in gpu_rows("n1", f"GPU-{g}", 72 * 12, interval_s=300, sm=0.27, duty=0.45,
                                                     procs=lambda i: int(i % 5 != 0))]
    r = analyze_rollups(rollups(_blanked(rows)), load_config())
    assert r.utilization.real_is_upper_bound
    assert r.utilization.real_utilization.value == pytest.approx(0.45, abs=1e-6)
    report = build_report(r, version="test")
    assert not report.verdict.confidence.startswith("high")
    gap = next(f for f in report.verdict.figures if f.label.startswith("Phantom gap"))
    assert gap.text.startswith("≥")
    assert "≤" not in gap.text
    assert not r.decision.determined
    assert set(r.decision.possible_branches) == {"cloud", "hybrid"}
    assert r.decision.confidence.level == "low"
    assert r.utilization.phantom_gap.lower_bound and not r.utilization.phantom_gap.upper_bound


def test_behaviour_change_plans_never_count_as_cheapest() -> None:
    """"Right-sized cloud" assumed 30-50 % of held hours vanish, only in the cloud, and won "cheapest"."""
    rows = [r for g in range(8) for r in gpu_rows("n1", f"GPU-{g}", 48 * 12, interval_s=300,
                                                     sm=lambda i: 0.02 if i % 2 else 0.3, procs=1)]
    r = analyze_rollups(rollups(rows), load_config())
    s = _scenarios(r)
    assert "all-cloud-right-sized" not in s
    assert not s[r.costs.cheapest].what_if
    plans = {k for k, v in s.items() if v.what_if}
    assert plans == {"all-cloud-if-packed", "all-on-prem-if-packed", "hybrid-if-packed"}  # both sides
    assert s["all-on-prem-if-packed"].owned_gpus < s["all-on-prem"].owned_gpus
    assert s["all-cloud-if-packed"].total.value < s["all-cloud"].total.value


def test_staying_counts_only_avoidable_costs() -> None:
    """Stay-as-is charged the already-bought hardware and networking again."""
    r = analyze_rollups(rollups(_steady_rows(8, sm=0.5)), load_config())
    stay = _scenarios(r)["stay-as-is"]
    assert stay.components["hardware"] == 0 and stay.components["networking"] == 0
    assert stay.components["residual_value"] < 0  # what the fleet is still worth at the end
    assert stay.components["owned_value_kept"] > -stay.components["residual_value"]  # it loses value meanwhile
    cloud = _scenarios(r)["all-cloud"]
    assert cloud.components["owned_value_kept"] == 0  # leaving the fleet sells it now: nothing tied up
    assert all((s.total.value or 0) > 0 for s in r.costs.scenarios)  # costs, never income from an old fleet
    assert r.costs.owned_gpus == 8


def test_coverage_gaps_scale_by_fleet_size() -> None:
    """Missing nodes biased costs toward the cloud: GPU-hours not observed were treated as never used."""
    full = [r for g in range(4) for r in gpu_rows("n1", f"GPU-{g}", 48 * 12, interval_s=300, sm=0.5,
                                                     procs=lambda i: int(i % 2 == 0))]
    gappy = [r for r in full if r["gpu_uuid"] in ("GPU-0", "GPU-1") or r["ts"] <= T0 + dt.timedelta(hours=12)]
    a = analyze_rollups(rollups(full), load_config(), overrides=Overrides(current="cloud"))
    b = analyze_rollups(rollups(gappy), load_config(), overrides=Overrides(current="cloud"))
    assert b.data_quality.coverage.value < 0.7
    ca, cb = _scenarios(a)["all-cloud"].total.value, _scenarios(b)["all-cloud"].total.value
    assert cb == pytest.approx(ca, rel=0.03)
    # a whole node without an agent: tell the fleet size
    c = analyze_rollups(rollups([r for r in full if r["gpu_uuid"] in ("GPU-0", "GPU-1")]), load_config(),
                        overrides=Overrides(current="cloud", fleet_gpus=4))
    assert _scenarios(c)["all-cloud"].total.value == pytest.approx(ca, rel=0.03)


def test_hybrid_cross_check_compares_like_questions() -> None:
    """`hybrid.agrees` compared N* (which includes fixed costs) with the fractile (which does not): with
    staff dear enough that owning nothing wins, they always "disagreed". Compare the fractile with the best
    N ≥ 1, and state the fixed-cost hurdle."""
    cfg = load_config().replace("on_prem", staff_usd_per_month=400000.0)
    r = analyze_rollups(rollups(_steady_rows(8)), cfg, overrides=Overrides(current="cloud"))
    h = r.hybrid
    assert h.n_star == 0
    assert h.agrees
    assert h.n_owning == 8 and h.critical_fractile_n == 8
    assert h.hurdle_gpus.value is not None and h.hurdle_gpus.value > 8  # owning pays only above ~K busy GPUs


def test_processes_do_not_matter_to_the_costs(tmp_path: Path) -> None:
    """Costs come from the samples' held time, not from how many process rows there are."""
    rows = gpu_rows("n1", "GPU-a", 48 * 12, interval_s=300, sm=0.5, procs=1)
    a = analyze(write(tmp_path / "a", rows))
    b = analyze(write(tmp_path / "b", rows, proc_rows("n1", "GPU-a", ends(rows))))
    assert _scenarios(a)["all-cloud"].total.value == pytest.approx(_scenarios(b)["all-cloud"].total.value)


def test_sensitivity_caption_uses_the_configured_fraction() -> None:
    """The caption said ±30 % whatever analysis.sensitivity_fraction was."""
    cfg = load_config().replace("analysis", sensitivity_fraction=0.2)
    r = analyze_rollups(rollups(_steady_rows(2, sm=0.5)), cfg)
    section = next(s for s in build_report(r, version="test").sections if s.key == "sensitivity")
    caption = section.charts[0].caption
    assert "20%" in caption and "30" not in caption


def test_staying_as_is_is_never_headed_as_a_move() -> None:
    """Review of issue 26: with 160 of 200 GPUs owned the heading said "Go hybrid: keep your 160 GPUs, rent the
    rest flexibly" while the headline below it said "keep what you have": staying as is (owning part, renting the
    rest) was the recommended plan, and a hybrid it already is. The heading of a stay-as-is recommendation says to
    keep what you have; the disagreement warning names the plan and its branch once ("hybrid (hybrid)")."""
    from tests.test_latency_and_ties import _busy_fleet, _cfg

    r = analyze_rollups(rollups(_busy_fleet(0.2)), _cfg(90.0).replace("on_prem", owned_gpus=7))
    d = r.decision
    assert d.recommended_scenario == "stay-as-is" and d.recommendation == "hybrid"  # the case
    heading = build_report(r, version="test").verdict.headline
    assert heading.startswith("Keep what you have: keep your 7 GPUs, rent the rest flexibly"), heading
    assert "Go hybrid" not in heading
    for w in r.warnings:
        assert "hybrid (hybrid)" not in w and "(cloud)" not in w, w


def test_disagreement_warning_names_the_cheapest_plan_by_its_label() -> None:
    """"the cheapest scenario at your prices is hybrid (hybrid)": the plan id and its branch, the same word twice.
    The warning names the plan as the cost table does, and its branch only where that says more."""
    from tests.test_latency_and_ties import _busy_fleet, _cfg

    r = analyze_rollups(rollups(_busy_fleet(0.1)), _cfg(90.0))
    assert r.costs.cheapest == "hybrid" and not r.decision.agrees_with_costs  # the rule says on-prem
    w = next(x for x in r.warnings if x.startswith("the decision tree says"))
    assert w == "the decision tree says on-prem but the cheapest plan at your prices is hybrid", w
    r2 = analyze_rollups(rollups(_busy_fleet(0.2)), _cfg(55.04))
    w2 = next(x for x in r2.warnings if x.startswith("the decision tree says"))
    assert w2 == "the decision tree says on-prem but the cheapest plan at your prices is all cloud", w2
