"""What rules renting out (data residency, a latency-sensitive share) holds in every answer, not only in which
plans are allowed: the consolidation lever, the headline, the tornado, the confidence, the payback, the
assumptions and the hybrid's cross-checks."""

from __future__ import annotations

import pytest
from tests.analysis_helpers import gpu_rows, rollups
from tests.test_latency_and_ties import _bursty_fleet, _busy_fleet, _cfg

from gpuaudit.analysis import analyze_rollups
from gpuaudit.analysis.config import load_config
from gpuaudit.analysis.overrides import Overrides
from gpuaudit.analysis.plans import is_cloud_used
from gpuaudit.report import charts
from gpuaudit.report.sections import build_report


@pytest.fixture(scope="module")
def bursty():  # type: ignore[no-untyped-def]
    return rollups(_bursty_fleet())


@pytest.mark.parametrize("kw", [{"latency_sensitive_share": 0.3}, {"latency_sensitive": True},
                                {"data_residency": True}], ids=["share", "latency", "residency"])
def test_the_consolidation_lever_never_rents_what_may_not_be_rented(bursty, kw) -> None:  # type: ignore[no-untyped-def]
    """A cloud fleet with a latency share (or residency) was told 'rent the work at 70 % utilization: $477k less
    than the recommended plan', which owns GPUs precisely because renting that work is not allowed."""
    r = analyze_rollups(bursty, _cfg(), Overrides(current="cloud", **kw))
    c = r.consolidation
    assert not c.plan.startswith("rent the work"), c.plan
    if kw.get("latency_sensitive_share"):
        assert "for the latency-sensitive work" in c.plan  # the floor owned, the rest rented
    else:
        assert c.plan.startswith(f"own {c.fits_on_gpus:,} GPUs")


def test_the_work_never_fits_on_more_gpus_than_the_fleet_has() -> None:
    """8 GPUs at 90 % SM activity 'fit on 11 GPUs' (0.9 × 8 ÷ 0.7 target): a plan bigger than the fleet."""
    rows = [r for g in range(8) for r in gpu_rows("n1", f"F-{g}", 48 * 12, interval_s=300, sm=0.9, procs=1)]
    r = analyze_rollups(rollups(rows), _cfg())
    assert r.consolidation.fits_on_gpus <= 8


def test_a_cloud_fleet_whose_staying_is_ruled_out_is_told_so(bursty) -> None:  # type: ignore[no-untyped-def]
    """'At your prices hybrid is the cheapest option, $246k more than staying as is': staying was excluded by the
    latency share without a word. The headline names what rules it out and the price of it."""
    r = analyze_rollups(bursty, _cfg(), overrides=Overrides(current="cloud", latency_sensitive_share=0.3))
    by_id = {s.id: s for s in r.costs.scenarios}
    assert not by_id["stay-as-is"].allowed
    h = r.decision.headline
    assert "staying as is is not allowed (30 % of demand is latency-sensitive and must run on owned GPUs)" in h, h
    assert "cheapest allowed option" in h and "more than staying as is" in h


def test_a_rule_whose_branch_is_ruled_out_is_not_compared_with_itself(bursty) -> None:  # type: ignore[no-untyped-def]
    """At low real utilization the rule says cloud; with a latency share no plan may rent it all, and the
    headline read 'all on-prem is $0 cheaper over 36 months than all on-prem'."""
    rows = [r for g in range(8) for r in gpu_rows("n1", f"L-{g}", 48 * 12, interval_s=300,
                                                  sm=lambda i: 0.9 if i % 10 < 1 else 0.0, procs=1)]
    r = analyze_rollups(rollups(rows), _cfg(), overrides=Overrides(latency_sensitive_share=1.0))
    d = r.decision
    assert d.rule.id == "low-utilization"
    assert "$0 cheaper" not in d.headline and "than all on-prem" not in d.headline, d.headline
    assert ("all work is latency-sensitive and must run on owned GPUs, which rules out the plans it points to"
            in d.headline)
    assert d.agrees_with_costs
    report = build_report(r, version="t")
    demand = next(s for s in report.sections if s.key == "demand")
    assert "Renting all of it is not allowed here (all work is latency-sensitive" in demand.lead


def test_the_tornado_margin_is_over_a_different_plan() -> None:
    """8 GPUs held all the time, owning wins: staying and all on-prem own the same 8 GPUs, so the 'margin over
    the runner-up' was 0 at every input and the tornado flat. The runner-up is the cheapest different plan."""
    rows = [r for g in range(8) for r in gpu_rows("n1", f"F-{g}", 48 * 12, interval_s=300, sm=0.9, procs=1)]
    r = analyze_rollups(rollups(rows), _cfg(90.0))
    rows_ = {x["key"]: x for x in r.sensitivity.tornado.rows}
    hw = rows_["on_prem.hardware_usd_per_gpu"]
    assert hw["swing_usd"] > 1000 and hw["low_margin_usd"] > hw["high_margin_usd"]  # dearer hardware, less margin
    cloud = rows_["cloud.instance_usd_per_hour"]
    assert cloud["high_margin_usd"] > cloud["low_margin_usd"]  # a dearer cloud widens owning's lead


def test_without_a_different_allowed_plan_the_tornado_moves_the_plans_cost(bursty) -> None:  # type: ignore[no-untyped-def]
    """All work latency-sensitive on a fleet owning its peak: every allowed plan owns the same GPUs. No margin
    exists; the rows carry None and swing by the plan's own cost, and the chart says it shows the cost."""
    rows = [r for g in range(8) for r in gpu_rows("n1", f"F-{g}", 48 * 12, interval_s=300, sm=0.9, procs=1)]
    r = analyze_rollups(rollups(rows), _cfg(), overrides=Overrides(latency_sensitive=True))
    rows_ = {x["key"]: x for x in r.sensitivity.tornado.rows}
    hw = rows_["on_prem.hardware_usd_per_gpu"]
    assert hw["base_margin_usd"] is None and hw["swing_usd"] == pytest.approx(
        abs(hw["high_plan_usd"] - hw["low_plan_usd"])) and hw["swing_usd"] > 0
    chart = next(c for s in build_report(r, version="t").sections for c in s.charts if c.name == "sensitivity")
    assert "no runner-up" in chart.caption and "cost over the horizon" in charts.draw(chart.spec)


def test_after_a_tie_the_tornado_is_about_staying() -> None:
    """The tie keeps what you have, yet the tornado was about the hybrid (the cheapest) and its caption called
    the hybrid 'the recommended plan'."""
    r = analyze_rollups(rollups(_busy_fleet(0.2)), _cfg(90.0))
    assert r.decision.tie and r.decision.recommended_scenario == "stay-as-is"
    assert {x["plan"] for x in r.sensitivity.tornado.rows} == {"stay-as-is"}
    # its margin is below $0 (the hybrid is cheaper inside the tolerance): the caption says why it is kept
    chart = next(c for s in build_report(r, version="t").sections for c in s.charts if c.name == "sensitivity")
    assert "kept on a tie" in chart.caption


def test_the_interval_of_a_plan_nobody_may_choose_does_not_lower_confidence(bursty) -> None:  # type: ignore[no-untyped-def]
    """With renting all ruled out, 'the 90 % interval of all-cloud − owning includes zero' still capped the
    confidence."""
    def busy(g: int):  # type: ignore[no-untyped-def]  # GPU g busy on days where (day + g) % 3 != 0
        return lambda i: int(((i // 288) + g) % 3 != 0 or g < 4)

    rows = [r for g in range(8) for r in gpu_rows("n1", f"G-{g}", 14 * 288, interval_s=300,
                                                  sm=lambda i, g=g: 0.8 * busy(g)(i), procs=busy(g))]
    roll = rollups(rows)
    cfg = load_config().replace("cloud", instance_usd_per_hour=74.0).replace("analysis", bootstrap_resamples=300)
    free = analyze_rollups(roll, cfg)  # the case: renting allowed, the interval includes zero and is said
    assert any("all-cloud − owning" in why for why in free.decision.confidence.reasons)
    r = analyze_rollups(roll, cfg, overrides=Overrides(latency_sensitive_share=0.3))
    assert not {s.id: s for s in r.costs.scenarios}["all-cloud"].allowed
    d = r.confidence.cost_difference_usd
    assert d.low is not None and d.high is not None and d.low < 0 < d.high
    assert not any("all-cloud − owning" in why for why in r.decision.confidence.reasons)


def test_a_cloud_fleets_purchase_pays_back_against_todays_bill(bursty) -> None:  # type: ignore[no-untyped-def]
    """Payback was measured against all cloud, which for a cloud fleet is releasing idle instances (a change of
    behaviour) or not allowed: against today's bill (staying) it differs."""
    r = analyze_rollups(bursty, _cfg(), overrides=Overrides(current="cloud"))
    assert r.costs.payback_against == "stay-as-is"
    assert analyze_rollups(bursty, _cfg()).costs.payback_against == "all-cloud"
    cash = next(t for s in build_report(r, version="t").sections for t in s.tables
                if t.columns and t.columns[0] == "scenario" and "capex" in t.columns)
    assert "payback vs stay as is (cloud)" in cash.columns


def test_the_assumptions_credit_the_option_actually_given(bursty) -> None:  # type: ignore[no-untyped-def]
    """With only --latency-sensitive-share 0.3 the list said input.latency_sensitive came from --latency-sensitive
    (all work), which the user never passed."""
    r = analyze_rollups(bursty, _cfg(), overrides=Overrides(latency_sensitive_share=0.3))
    a = {x.key: x for x in r.assumptions}
    assert a["decision.latency_sensitive_share"].value == 0.3
    assert a["decision.latency_sensitive_share"].source == "--latency-sensitive-share"
    assert a["input.latency_sensitive"].source != "--latency-sensitive"


def test_the_hybrids_cross_check_answers_the_constrained_question(bursty) -> None:  # type: ignore[no-untyped-def]
    """At a share of 0.5 the hybrid owns the floor (4) and the critical fractile (no floor) said 2: 'disagrees'.
    The fractile answers the same question: no fewer than the floor."""
    r = analyze_rollups(bursty, _cfg(), overrides=Overrides(latency_sensitive_share=0.5))
    h = r.hybrid
    assert h.min_owned_gpus == 4 and h.n_owning >= 4 and h.critical_fractile_n >= 4 and h.agrees


def test_staying_in_the_cloud_rents_the_instances_that_run(bursty) -> None:  # type: ignore[no-untyped-def]
    """'Stay in the cloud: rent what jobs hold flexibly (on average 4 GPUs)': staying rents the instances that
    run; renting only what jobs hold is the separate behaviour-change plan."""
    rows = [r for g in range(4) for r in gpu_rows("n1", f"C-{g}", 48 * 12, interval_s=300, sm=0.1,
                                                  procs=lambda i: int(i % 3 == 0))]
    r = analyze_rollups(rollups(rows), _cfg(), overrides=Overrides(current="cloud"))
    assert r.decision.recommended_scenario == "stay-as-is"
    assert "the instances that run today" in r.decision.action and "what jobs hold" not in r.decision.action


def test_the_lever_resizes_the_recommended_hybrid_on_the_packed_work() -> None:
    """The demo's lever 'own 56 GPUs' (the packed work's peak, owned) cost $132k more than the recommended
    hybrid (40 owned, bursting the rest), so the biggest lever was hidden: the consolidated plan had another
    shape than the recommended one. Now it is the recommended plan's shape on the packed work: a hybrid is
    re-sized, and the saving is consolidation's alone."""
    rows = [r for g in range(2) for r in gpu_rows("n1", f"B-{g}", 48 * 12, interval_s=300, sm=0.3, procs=1)]
    for g in range(2, 8):
        rows += gpu_rows("n1", f"B-{g}", 48 * 12, interval_s=300, sm=lambda i: 0.3 if i % 10 < 3 else 0.0,
                         procs=lambda i: int(i % 10 < 3))
    r = analyze_rollups(rollups(rows), _cfg(), overrides=Overrides(latency_sensitive_share=0.3))
    rec = {s.id: s for s in r.costs.scenarios}[r.decision.recommended_scenario]
    assert rec.id == "hybrid" and is_cloud_used(rec) and rec.owned_gpus > 0  # the case: a hybrid recommended
    c = r.consolidation
    assert c.plan.startswith("own ") and "rent the work above them" in c.plan
    assert c.fits_on_gpus == 4  # 2 × 0.3 + 6 × 0.3 = 2.4 GPUs of work at its peak ÷ 0.7 → 4
    assert c.saving_usd > r.decision.tie_usd and c.saving_usd == pytest.approx(c.recommended_usd - c.plan_usd)


def test_packed_work_never_needs_more_gpus_than_were_held() -> None:
    """At 90 % SM activity the work 'packed' at a 70 % target needed more GPUs than held it (0.9 ÷ 0.7): the
    lever then priced more GPUs than today. The packed work is at most the GPUs held, bucket by bucket."""
    r = analyze_rollups(rollups(_bursty_fleet()), _cfg())
    assert r.consolidation.fits_on_gpus == 8 and r.consolidation.saving_usd <= r.decision.tie_usd


def _cloud_fleet(always: int, part: int, share_of_time: int) -> list[dict]:  # type: ignore[type-arg]
    rows = [x for g in range(always) for x in gpu_rows("n0", f"S-{g}", 2 * 288, interval_s=300, sm=0.9, procs=1)]
    for g in range(always, always + part):
        rows += gpu_rows("n0", f"S-{g}", 2 * 288, interval_s=300, sm=lambda i: 0.9 if i % 10 < share_of_time else 0.0,
                         procs=lambda i: int(i % 10 < share_of_time))
    return rows


def test_every_headline_says_staying_is_ruled_out_once() -> None:
    """Second review: with --latency-sensitive on a cloud fleet whose rule's plan comes out as all on-prem, the
    headline ('… the same as all on-prem') never said staying was ruled out nor what the answer costs more than
    today; and where the rule's branch was ruled out the constraint was said twice, beside 'no plan may rent
    it' although the recommended hybrid rents."""
    r = analyze_rollups(rollups(_cloud_fleet(2, 6, 3)), load_config(),
                        overrides=Overrides(current="cloud", latency_sensitive=True))
    h = r.decision.headline
    assert "the same as all on-prem" in h and "staying as is is not allowed (all work is latency-sensitive" in h, h
    assert "more than staying as is" in h
    r = analyze_rollups(rollups(_cloud_fleet(1, 7, 1)), load_config(),
                        overrides=Overrides(current="cloud", latency_sensitive_share=0.3))
    h = r.decision.headline
    assert h.count("30 % of demand is latency-sensitive") == 1 and "no plan may rent" not in h, h
    assert "rules out the plans it points to" in h and "cheapest allowed option" in h


def test_payback_against_a_plan_nobody_may_choose_is_none() -> None:
    """An owned fleet of 8 that buys 8 more under data residency showed 'payback 32.6 months vs all cloud',
    a plan residency forbids. Without a renting plan allowed, no payback is claimed."""
    rows = [x for g in range(16) for x in gpu_rows(f"n{g // 8}", f"R-{g}", 2 * 288, interval_s=300, sm=0.9,
                                                    procs=1)]
    cfg = load_config().replace("on_prem", owned_gpus=8)
    free = analyze_rollups(rollups(rows), cfg)
    assert free.costs.payback_against == "all-cloud"
    assert any(s.payback_months is not None for s in free.costs.scenarios)  # the case: a payback exists
    r = analyze_rollups(rollups(rows), cfg, overrides=Overrides(data_residency=True))
    assert r.costs.payback_against == "" and all(s.payback_months is None for s in r.costs.scenarios)


def test_an_input_that_flips_the_answer_is_never_drawn_flat() -> None:
    """64 GPUs held at 20 % with a latency share of 0.5 and a $30 instance: at the configured inputs no allowed
    plan differs from staying, so the margin had no base and the swing fell back to the plan's own cost — the
    cloud price, which makes the hybrid $145k cheaper at −30 %, was drawn flat beside a confidence reason saying
    it changes the answer. An end without a runner-up counts 0."""
    rows = [x for g in range(64) for x in gpu_rows(f"n{g // 8}", f"A-{g}", 2 * 288, interval_s=300, sm=0.2,
                                                    procs=1)]
    cfg = load_config().replace("cloud", egress_gb_per_week=0.0, instance_usd_per_hour=30.0)
    r = analyze_rollups(rollups(rows), cfg, overrides=Overrides(latency_sensitive_share=0.5))
    x = {row["key"]: row for row in r.sensitivity.tornado.rows}["cloud.instance_usd_per_hour"]
    assert x["base_margin_usd"] is None and x["low_margin_usd"] is not None and x["changes_cheapest"]
    assert x["swing_usd"] == pytest.approx(abs(x["low_margin_usd"])) and x["swing_usd"] > 100_000
