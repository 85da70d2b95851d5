"""The decision tree (rules as data), its boundaries and flags, and the day-block bootstrap."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.analysis_helpers import T0, gpu_rows, rollups, write

from gpuaudit.analysis import analyze, analyze_rollups, load_config
from gpuaudit.analysis.confidence import bootstrap, daily
from gpuaudit.analysis.decision import RULES, Op, branch_for, evaluate
from gpuaudit.analysis.overrides import Overrides
from gpuaudit.analysis.result import Branch, DecisionInputs, Deployment


def _inputs(u: float, *, latency: bool = False, residency: bool = False) -> DecisionInputs:
    return DecisionInputs(real_utilization=u, latency_sensitive=latency, data_residency=residency,
                          egress_gb_per_week=500.0, current=Deployment.ON_PREM, cloud_below=0.30, on_prem_above=0.70)


@pytest.mark.parametrize(
    ("u", "latency", "branch", "rule"),
    [
        (0.0, False, Branch.CLOUD, "low-utilization"),
        (0.299, False, Branch.CLOUD, "low-utilization"),
        (0.30, False, Branch.HYBRID, "mid-utilization"),
        (0.50, True, Branch.HYBRID, "mid-utilization"),
        (0.70, False, Branch.HYBRID, "mid-utilization"),
        (0.701, False, Branch.ON_PREM, "high-utilization"),
        (0.701, True, Branch.ON_PREM, "high-utilization-latency"),
        (1.0, True, Branch.ON_PREM, "high-utilization-latency"),
    ],
)
def test_boundaries(u: float, latency: bool, branch: Branch, rule: str) -> None:
    _, fired = evaluate(_inputs(u, latency=latency))
    assert fired.branch is branch and fired.id == rule
    assert all(c.holds for c in fired.conditions)


def test_residency_overrides_everything() -> None:
    for u in (0.0, 0.5, 0.95):
        _, fired = evaluate(_inputs(u, residency=True))
        assert fired.branch is Branch.ON_PREM and fired.id == "data-residency"


def test_not_latency_sensitive_high_says_check_egress() -> None:
    rule, fired = evaluate(_inputs(0.9))
    assert "egress" in rule.caveat and "egress" in fired.description


def test_fired_rule_names_its_figures() -> None:
    _, fired = evaluate(_inputs(0.25))
    (c,) = fired.conditions
    assert (c.fact, c.op, c.threshold, c.actual, c.holds) == ("real_utilization", "<", 0.3, 0.25, True)


def test_thresholds_are_configurable() -> None:
    inputs = dataclasses.replace(_inputs(0.35), cloud_below=0.40, on_prem_above=0.60)
    assert evaluate(inputs)[1].branch is Branch.CLOUD
    assert evaluate(dataclasses.replace(inputs, real_utilization=0.61))[1].branch is Branch.ON_PREM


def test_rules_are_typed_data() -> None:
    for rule in RULES:
        for c in rule.conditions:
            assert isinstance(c.op, Op) and callable(c.op.fn)


@given(u=st.floats(0, 1), latency=st.booleans(), residency=st.booleans())
def test_every_input_gets_exactly_the_first_matching_rule(u: float, latency: bool, residency: bool) -> None:
    _, fired = evaluate(_inputs(u, latency=latency, residency=residency))
    expected = ("on-prem" if residency else "cloud" if u < 0.3 else "hybrid" if u <= 0.7 else "on-prem")
    assert fired.branch.value == expected


@given(u=st.floats(0, 1.5), latency=st.booleans(), residency=st.booleans())
def test_branch_for_agrees_with_evaluate(u: float, latency: bool, residency: bool) -> None:
    inputs = _inputs(0.5, latency=latency, residency=residency)
    assert branch_for(u, inputs) is evaluate(dataclasses.replace(inputs, real_utilization=u))[1].branch


def _one_gpu(sm: float) -> list[dict]:  # type: ignore[type-arg]
    return gpu_rows("n1", "GPU-a", 120, sm=sm, procs=1)


@pytest.mark.parametrize(("sm", "branch"), [(0.299, "cloud"), (0.30, "hybrid"), (0.70, "hybrid"), (0.701, "on-prem")])
def test_boundaries_on_stored_data(sm: float, branch: str) -> None:
    """Values are cast to the contract's float32 (0.3 → 0.30000001): the branch must not move."""
    r = analyze_rollups(rollups(_one_gpu(sm)), load_config())
    assert r.decision.branch.value == branch


@pytest.mark.parametrize(("latency", "residency", "rule"), [(True, False, "high-utilization-latency"),
                                                           (False, False, "high-utilization"),
                                                           (False, True, "data-residency")])
def test_flags_reach_the_decision(latency: bool, residency: bool, rule: str) -> None:
    r = analyze_rollups(rollups(_one_gpu(0.9)), load_config(),
                        overrides=Overrides(latency_sensitive=latency, data_residency=residency))
    assert r.decision.rule.id == rule and r.decision.branch is Branch.ON_PREM
    assert r.decision.inputs.latency_sensitive is latency and r.decision.inputs.data_residency is residency


def test_provisional_and_reevaluation_date() -> None:
    r = analyze_rollups(rollups(_one_gpu(0.5)), load_config())
    assert r.decision.provisional and any("provisional" in c for c in r.decision.caveats)
    assert r.decision.reevaluate_on == dt.date(2026, 9, 2)


def _days(utils: list[float]) -> list[dict]:  # type: ignore[type-arg]
    """One GPU, one day per entry at hourly samples with SM activity utils[d]."""
    rows = []
    for d, u in enumerate(utils):
        rows += gpu_rows("n1", "GPU-a", 24, interval_s=3600, sm=u, procs=1, start=T0 + dt.timedelta(days=d))
    return rows


def test_trial_of_90_days_is_not_provisional(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = analyze(write(tmp_path, _days([0.5] * 91)), load_config())
    assert not r.trial.provisional and not r.decision.provisional
    assert r.trial.observed_days == 91


def test_bootstrap_is_deterministic_and_brackets_the_point() -> None:
    roll = rollups(_days([0.1, 0.2, 0.3, 0.4, 0.5, 0.2, 0.25, 0.15, 0.35, 0.3]))
    days = daily(roll.gpu_hours)
    assert days.height == 10
    a = bootstrap(days, _inputs(0.275), 500, 7, 0.9)
    b = bootstrap(days, _inputs(0.275), 500, 7, 0.9)
    c = bootstrap(days, _inputs(0.275), 500, 8, 0.9)
    assert a == b and a != c
    assert a.real_utilization.point == pytest.approx(0.275, rel=1e-6)
    assert 0.1 < a.real_utilization.low < 0.275 < a.real_utilization.high < 0.5
    # Near the 30 % threshold a good share of resamples lands on the other side.
    assert 0.1 < a.flip_share < 0.9
    assert sum(a.branches.values()) == pytest.approx(1.0)
    assert a.method.startswith("block bootstrap over whole UTC days")


def test_bootstrap_of_identical_days_has_no_spread() -> None:
    days = daily(rollups(_days([0.5] * 5)).gpu_hours)
    c = bootstrap(days, _inputs(0.5), 200, 0, 0.9)
    assert c.real_utilization.low == pytest.approx(0.5, rel=1e-6) == c.real_utilization.high
    assert c.flip_share == 0.0


def test_more_real_use_never_lowers_real_utilization_on_a_fixed_example() -> None:
    base = gpu_rows("n1", "GPU-a", 60, sm=0.2, procs=1) + gpu_rows("n1", "GPU-b", 60, sm=0.0)
    more = gpu_rows("n1", "GPU-a", 60, sm=0.2, procs=1) + gpu_rows("n1", "GPU-b", 60, sm=0.1)
    a = analyze_rollups(rollups(base), load_config()).utilization.real_utilization.value
    b = analyze_rollups(rollups(more), load_config()).utilization.real_utilization.value
    assert b > a


@given(
    sm=st.lists(st.floats(0, 1), min_size=60, max_size=60),
    extra=st.lists(st.floats(0, 1), min_size=60, max_size=60),
)
@settings(max_examples=25, deadline=None)
def test_more_real_use_never_lowers_real_utilization(sm: list[float], extra: list[float]) -> None:
    more = [min(1.0, s + e) for s, e in zip(sm, extra, strict=True)]
    a = rollups(gpu_rows("n1", "GPU-a", 60, sm=lambda i: sm[i], procs=1) + gpu_rows("n1", "GPU-b", 60, sm=0.3))
    b = rollups(gpu_rows("n1", "GPU-a", 60, sm=lambda i: more[i], procs=1) + gpu_rows("n1", "GPU-b", 60, sm=0.3))
    cfg = load_config().replace("analysis", bootstrap_resamples=0, growth_rates=(0.0,))
    ua = analyze_rollups(a, cfg).utilization.real_utilization.value
    ub = analyze_rollups(b, cfg).utilization.real_utilization.value
    assert ub >= ua - 1e-7  # float32 storage rounds each value
