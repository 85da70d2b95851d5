"""The tornado plots a quantity that moves the right way with each input: the recommended plan's cost and its
margin over the runner-up (a dearer spot price never looks better for renting)."""

from __future__ import annotations

import pytest
from tests.analysis_helpers import rollups
from tests.test_latency_and_ties import _busy_fleet, _cfg

from gpuaudit.analysis import analyze_rollups
from gpuaudit.analysis.scenarios import is_cloud_used
from gpuaudit.report import charts
from gpuaudit.report.sections import build_report


def _totals(roll, cfg, key: str, value: float) -> dict[str, float]:  # type: ignore[no-untyped-def]
    section, name = key.split(".")
    moved = analyze_rollups(roll, cfg.replace(section, **{name: value}))
    return {s.id: float(s.total.value) for s in moved.costs.scenarios if s.allowed and not s.what_if}


def test_the_recommended_plans_margin_moves_the_right_way() -> None:
    roll = rollups(_busy_fleet(0.1))
    cfg = _cfg(90.0)
    r = analyze_rollups(roll, cfg)
    plan = r.costs.cheapest
    by_id = {s.id: s for s in r.costs.scenarios}
    assert plan == "hybrid" and is_cloud_used(by_id[plan])  # the recommended plan rents its bursts
    rows = {row["key"]: row for row in r.sensitivity.tornado.rows}
    for key in ("cloud.instance_usd_per_hour", "cloud.spot_multiplier"):
        row = rows[key]
        assert row["plan"] == plan
        # a dearer cloud makes the plan that rents dearer and its lead over the plans that rent less smaller; a
        # cheaper one makes it cheaper, but all cloud cheaper still (the margin is over the best other plan)
        assert row["high_plan_usd"] > row["base_plan_usd"] > row["low_plan_usd"]
        assert row["high_margin_usd"] < row["base_margin_usd"]
        assert row["low_margin_usd"] == pytest.approx(
            min(v for k, v in _totals(roll, cfg, key, row["low_value"]).items() if k != plan) - row["low_plan_usd"],
            rel=1e-9)
    # the margin is the runner-up's cost − the plan's, at the moved input (rerun independently)
    row = rows["cloud.spot_multiplier"]
    totals = _totals(roll, cfg, "cloud.spot_multiplier", row["high_value"])
    assert row["high_plan_usd"] == pytest.approx(totals[plan], rel=1e-9)
    assert row["high_margin_usd"] == pytest.approx(min(v for k, v in totals.items() if k != plan) - totals[plan],
                                                   rel=1e-9)
    assert r.sensitivity.tornado.rows[0]["swing_usd"] == pytest.approx(
        abs(r.sensitivity.tornado.rows[0]["high_margin_usd"] - r.sensitivity.tornado.rows[0]["low_margin_usd"]))
    chart = next(c for s in build_report(r, version="t").sections for c in s.charts if c.name == "sensitivity")
    assert "than the next cheapest different plan" in chart.caption
    assert "margin over the next cheapest plan" in charts.draw(chart.spec)
