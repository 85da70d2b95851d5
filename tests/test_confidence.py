"""No false certainty: a day-block bootstrap needs analysis.bootstrap_min_days (7: a week, so the weekly cycle
is in every resample); below it no interval is claimed and the confidence is at most low; days are counted as
the trial is (a trial whose first sample lands at 23:59 does not gain a day)."""

from __future__ import annotations

import datetime as dt

from tests.analysis_helpers import T0, gpu_rows, rollups

from gpuaudit.analysis import analyze_rollups
from gpuaudit.analysis.config import load_config


def _fleet(hours: int, start: dt.datetime = T0) -> list[dict]:  # type: ignore[type-arg]
    return [r for g in range(4) for r in gpu_rows("n1", f"G-{g}", hours * 12, interval_s=300, start=start,
                                                  sm=lambda i: 0.05 + 0.02 * (i // 288 % 4),  # varies by day
                                                  procs=lambda i: int(i % 5 < 4))]


def test_a_one_day_trial_claims_no_interval() -> None:
    r = analyze_rollups(rollups(_fleet(24)), load_config())
    c = r.confidence
    assert c.too_few_days and c.days == 1 and c.min_days == 7
    for iv in (c.real_utilization, c.runtime_utilization, c.cost_difference_usd):
        assert iv.low is None and iv.high is None
    assert c.resamples == 0 and c.cheapest_shares == {}
    assert r.decision.confidence.level == "low"
    assert any("fewer than the 7 a day-block bootstrap needs" in x for x in r.decision.confidence.reasons)


def test_a_week_is_resampled() -> None:
    r = analyze_rollups(rollups(_fleet(24 * 7)), load_config().replace("analysis", bootstrap_resamples=100))
    c = r.confidence
    assert not c.too_few_days and c.days == 7 and c.resamples == 100
    assert c.real_utilization.low is not None and c.real_utilization.low < c.real_utilization.high  # type: ignore[operator]


def test_days_are_counted_as_the_trial_length_is() -> None:
    """A 3.0-day trial whose first sample ends at 23:59 touches 4 UTC dates: it has 3 days of data."""
    start = T0 + dt.timedelta(hours=23, minutes=54)
    r = analyze_rollups(rollups(_fleet(72, start=start)), load_config())
    assert round(r.trial.days, 6) == 3.0
    assert r.trial.observed_days == 3
    assert r.confidence.days == 3
