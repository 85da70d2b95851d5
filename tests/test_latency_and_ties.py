"""Latency-sensitive work does not burst (every plan that rents is excluded, as data residency excludes
renting), and a plan that beats staying by less than the cost model's own uncertainty is a tie: "keep what
you have; the alternatives are within $X"."""

from __future__ import annotations

from tests.analysis_helpers import gpu_rows, rollups

from gpuaudit.analysis import analyze_rollups
from gpuaudit.analysis.config import load_config
from gpuaudit.analysis.overrides import Overrides
from gpuaudit.analysis.scenarios import is_cloud_used


def _busy_fleet(part_time: float) -> list[dict]:  # type: ignore[type-arg]
    """7 GPUs held all the time at 90 % SM activity, an eighth held `part_time` of the time: real utilization
    about 80-85 %, and owning 7 while bursting the eighth costs about what owning 8 does."""
    on = round(part_time * 100)
    rows = [r for g in range(7) for r in gpu_rows("n1", f"G-{g}", 48 * 12, interval_s=300, sm=0.9, procs=1)]
    return rows + gpu_rows("n1", "G-7", 48 * 12, interval_s=300, sm=lambda i: 0.9 if i % 100 < on else 0.0,
                           procs=lambda i: int(i % 100 < on))


def _cfg(instance_usd_per_hour: float = 55.04):  # type: ignore[no-untyped-def]
    return load_config().replace("cloud", egress_gb_per_week=0.0, managed_services_usd_per_month=0.0,
                                 instance_usd_per_hour=instance_usd_per_hour).replace(
        "analysis", bootstrap_resamples=200)


def test_latency_sensitive_work_does_not_burst() -> None:
    """At ~82 % real utilization and --latency-sensitive the cheapest plan rented the work (all cloud, or a
    hybrid bursting it): now every plan that rents is not allowed and the recommendation owns everything."""
    roll = rollups(_busy_fleet(0.3))
    free = analyze_rollups(roll, _cfg())
    assert is_cloud_used({s.id: s for s in free.costs.scenarios}[free.costs.cheapest])  # renting wins on price
    r = analyze_rollups(roll, _cfg(), overrides=Overrides(latency_sensitive=True))
    by_id = {s.id: s for s in r.costs.scenarios}
    for s in r.costs.scenarios:
        assert s.allowed == (not is_cloud_used(s)), s.id
    assert not is_cloud_used(by_id[r.costs.cheapest])
    assert r.decision.recommendation == "on-prem"
    assert r.break_even.verdict == "on-prem"
    assert "cloud" not in r.decision.headline.split(":")[-1].split(";")[0]


def test_a_difference_inside_the_models_uncertainty_is_a_tie() -> None:
    """Hybrid beat staying on-prem by $551 of $761,879 (0.07 %) and was recommended: now that is a tie,
    'keep what you have; the alternatives are within $X', X at least decision.tie_fraction of staying."""
    r = analyze_rollups(rollups(_busy_fleet(0.2)), _cfg(90.0))
    by_id = {s.id: s for s in r.costs.scenarios}
    stay, best = by_id["stay-as-is"].total.value, by_id[r.costs.cheapest].total.value
    assert r.costs.cheapest == "hybrid" and 0 < stay - best < 0.01 * stay  # the case: a 0.07 % saving
    d = r.decision
    assert d.tie and d.recommended_scenario == "stay-as-is" and d.recommendation == "on-prem"
    assert d.tie_usd >= 0.01 * stay
    assert "keep what you have; " in d.headline and " within $" in d.headline
    assert f"${d.tie_usd:,.0f}" in d.headline


def test_a_saving_beyond_the_uncertainty_is_no_tie() -> None:
    """The same fleet with the eighth GPU held 10 % of the time: hybrid saves ~1.7 %, more than the tolerance."""
    r = analyze_rollups(rollups(_busy_fleet(0.1)), _cfg(90.0))
    by_id = {s.id: s for s in r.costs.scenarios}
    stay = by_id["stay-as-is"].total.value
    assert r.costs.cheapest == "hybrid" and stay - by_id["hybrid"].total.value > r.decision.tie_usd
    assert not r.decision.tie and r.decision.recommended_scenario == "hybrid"
    assert r.decision.recommendation == "hybrid"


def _bursty_fleet() -> list[dict]:  # type: ignore[type-arg]
    """2 GPUs held all the time, 6 more held 30 % of the time (peak 8): unconstrained, the hybrid owns about 2
    and bursts the rest."""
    rows = [r for g in range(2) for r in gpu_rows("n1", f"B-{g}", 48 * 12, interval_s=300, sm=0.9, procs=1)]
    for g in range(2, 8):
        rows += gpu_rows("n1", f"B-{g}", 48 * 12, interval_s=300, sm=lambda i: 0.9 if i % 10 < 3 else 0.0,
                         procs=lambda i: int(i % 10 < 3))
    return rows


def test_a_stated_latency_sensitive_share_stays_on_owned_gpus() -> None:
    """Latency-sensitive work was all or nothing (--latency-sensitive): a fleet whose half is latency-bound could
    only forbid renting altogether. With a stated share, every plan owns at least that share of demand's peak or
    is not allowed, and the hybrid bursts only the rest."""
    roll = rollups(_bursty_fleet())
    cfg = _cfg()
    free = analyze_rollups(roll, cfg)
    free_by = {s.id: s for s in free.costs.scenarios}
    assert free_by["hybrid"].owned_gpus < 4 and free_by["all-cloud"].allowed  # the case: the floor binds
    r = analyze_rollups(roll, cfg.replace("decision", latency_sensitive_share=0.5))
    by_id = {s.id: s for s in r.costs.scenarios}
    floor = 4  # ceil(0.5 × a peak of 8 GPUs held)
    assert not by_id["all-cloud"].allowed and not by_id["all-cloud-if-packed"].allowed
    hybrid = by_id["hybrid"]
    assert hybrid.allowed and hybrid.owned_gpus >= floor and is_cloud_used(hybrid)  # the rest still bursts
    for s in r.costs.scenarios:
        if s.allowed and is_cloud_used(s):
            assert s.owned_gpus >= floor, s.id
    assert r.decision.inputs.latency_sensitive_share == 0.5 and r.decision.inputs.latency_sensitive
    assert r.break_even.verdict == "on-prem"  # renting everything is not a choice
    assert "latency-sensitive" in hybrid.description and f"{floor}" in hybrid.description
    # all or nothing is the share 1: the flag and the share agree
    flag = analyze_rollups(roll, cfg, overrides=Overrides(latency_sensitive=True))
    whole = analyze_rollups(roll, cfg.replace("decision", latency_sensitive_share=1.0))
    assert [(s.id, s.allowed, s.owned_gpus) for s in flag.costs.scenarios] == [
        (s.id, s.allowed, s.owned_gpus) for s in whole.costs.scenarios]
    assert flag.decision.inputs.latency_sensitive_share == 1.0


def test_the_latency_sensitive_share_is_said_beside_the_decision() -> None:
    """A stated share changes which plans are allowed: the decision's caveats say so, in the share's words."""
    r = analyze_rollups(rollups(_bursty_fleet()), _cfg().replace("decision", latency_sensitive_share=0.4))
    assert any("40 % of demand is latency-sensitive" in c for c in r.decision.caveats), r.decision.caveats
    assert not any("latency" in c for c in analyze_rollups(rollups(_bursty_fleet()), _cfg()).decision.caveats)
    # a share is never rounded into a different claim (0 % beside a plan it rules out, 100 % where renting is fine)
    tiny = analyze_rollups(rollups(_bursty_fleet()), _cfg().replace("decision", latency_sensitive_share=0.001))
    assert any("0.1 % of demand is latency-sensitive" in c for c in tiny.decision.caveats), tiny.decision.caveats


def test_the_tie_sentence_names_the_plans_within_the_tolerance_and_those_not() -> None:
    """Issue 26.11: "keep what you have; the alternatives are within $4,009" while all cloud was $979k dearer: the
    sentence names which plans are within the tolerance and which are not."""
    r = analyze_rollups(rollups(_busy_fleet(0.2)), _cfg(90.0))
    d = r.decision
    assert d.tie
    stay = {s.id: s for s in r.costs.scenarios}["stay-as-is"].total.value
    head, _, tail = d.headline.partition(" within ")
    near_part = head.rsplit(";", 1)[-1]
    far_part = tail.partition("not within it:")[2]
    assert far_part, d.headline
    for s in r.costs.scenarios:
        if s.what_if or not s.allowed or s.id == "stay-as-is":
            continue
        near = abs(s.total.value - stay) <= d.tie_usd
        assert s.label.lower() in (near_part if near else far_part), (s.id, d.headline)


def test_cost_components_table_spells_a_zero_one_way() -> None:
    """Issue 26.12: the all-on-prem row showed "—" for a component where stay-as-is and hybrid showed $0 for the
    same thing: a component a plan does not have is $0 there too, one spelling."""
    from gpuaudit.report.sections import build_report

    r = analyze_rollups(rollups(_busy_fleet(0.2)), _cfg(90.0))
    rep = build_report(r, version="test")
    tables = [t for s in rep.sections for t in s.tables if t.caption.startswith("Where each total comes from")]
    assert tables
    for row in tables[0].rows:
        assert "—" not in row[1:], row
