"""Block bootstrap over whole UTC days: how sure are the utilization figures and the decision?

Days (not samples) are resampled with replacement because samples within a day are strongly
correlated (a job holds a GPU for hours); resampling days keeps that structure. Seeded: the same data
and seed always give the same intervals.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import polars as pl

from gpuaudit.analysis.decision import branch_for
from gpuaudit.analysis.result import Confidence, DecisionInputs, Interval
from gpuaudit.analysis.utilization import day_index

_METHOD = "block bootstrap over whole UTC days"


def daily(gpu_hours: pl.DataFrame, start_s: float | None = None, days: float | None = None) -> pl.DataFrame:
    """W, R, S seconds per trial day (utilization.day_index: counted as the trial's length is; UTC days when
    no trial start is given)."""
    day = (pl.col("hour_s") // 86400 if start_s is None or days is None
           else day_index(pl.col("hour_s"), start_s, days))
    return (
        gpu_hours.with_columns(day.alias("day"))
        .group_by("day")
        .agg(pl.col("observed_s", "held_s", "real_s").sum())
        .sort("day")
    )


def no_interval_reason(c: Confidence) -> str:
    """Why no day-resamples were drawn: too few whole days for the minimum, or none asked for."""
    if c.too_few_days:
        return f"too few days ({c.days}, need {c.min_days})"
    if c.days == 0:
        return "no whole UTC day observed"
    return "analysis.bootstrap_resamples = 0"


def resample_index(n_days: int, resamples: int, seed: int) -> np.ndarray:
    """The days drawn by each resample (resamples × n_days): the utilization and the cost bootstraps share it."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n_days, size=(resamples, n_days))


def _interval(point: float, draws: np.ndarray, level: float) -> Interval:
    draws = draws[np.isfinite(draws)]
    if draws.size == 0:
        return Interval(point, point, point)
    tail = (1.0 - level) / 2 * 100
    lo, hi = (float(v) for v in np.percentile(draws, [tail, 100 - tail]))
    return Interval(point, lo, hi)


def real_interval(days: pl.DataFrame, resamples: int, seed: int, level: float, min_days: int = 0) -> Interval:
    """The day-resample interval of real utilization alone (S / W over the days drawn), as `bootstrap` draws
    it; no bounds (None) without resamples or with fewer days than `min_days`."""
    w = days["observed_s"].to_numpy().astype(float)
    s = days["real_s"].fill_null(0).to_numpy().astype(float)
    point = float(s.sum() / w.sum()) if w.sum() > 0 else 0.0
    if resamples == 0 or len(w) == 0 or len(w) < min_days:
        return Interval(point, None, None)
    idx = resample_index(len(w), resamples, seed)
    ws = w[idx].sum(axis=1)
    ws[ws <= 0] = np.nan
    return _interval(point, s[idx].sum(axis=1) / ws, level)


@dataclass(frozen=True)
class CostSample:
    """Scenario totals per resample (from scenarios.cost_draws, drawn with the same `resample_index`)."""

    ids: list[str]
    draws: np.ndarray  # resamples × scenarios
    point: np.ndarray  # the point estimate's totals
    allowed: np.ndarray  # may be the cheapest (data residency forbids renting ones)
    owning: np.ndarray  # owning scenarios to compare all-cloud with
    cheapest: str


def bootstrap(days: pl.DataFrame, inputs: DecisionInputs, resamples: int, seed: int, level: float,
              costs: CostSample | None = None, min_days: int = 0) -> Confidence:
    """Utilization intervals and the tree's flip share; with `costs`, also the interval of all-cloud − the
    cheapest owning scenario and how often each scenario is the cheapest."""
    w = days["observed_s"].to_numpy().astype(float)
    r = days["held_s"].to_numpy().astype(float)
    s = days["real_s"].fill_null(0).to_numpy().astype(float)
    point_real, point_runtime = float(s.sum() / w.sum()), float(r.sum() / w.sum())
    base = branch_for(point_real, inputs)
    n = len(w)
    diff_point, cheap_point = 0.0, ""
    if costs is not None:
        cheap_point = costs.cheapest
        diff_point = float(_cloud_minus_own(costs.point[None, :], costs.ids, costs.owning)[0])
    few = 0 < n < min_days
    if resamples == 0 or n == 0 or few:
        # No resamples (or too few days to resample), no interval: the bounds are unknown, not equal to the point.
        return Confidence(_METHOD, 0, seed, level, n, Interval(point_real, None, None),
                          Interval(point_runtime, None, None), 0.0, {}, Interval(diff_point, None, None), {}, 0.0,
                          min_days=min_days, too_few_days=few)
    idx = resample_index(n, resamples, seed)
    ws = w[idx].sum(axis=1)
    ws[ws <= 0] = np.nan  # a resample of only empty days says nothing
    real = s[idx].sum(axis=1) / ws
    runtime = r[idx].sum(axis=1) / ws
    finite = real[np.isfinite(real)]
    counts = Counter(str(branch_for(float(x), inputs)) for x in finite)
    total = max(1, len(finite))
    diff = Interval(diff_point, diff_point, diff_point)
    shares: dict[str, float] = {}
    cheap_flip = 0.0
    if costs is not None:
        ok = np.all(np.isfinite(costs.draws), axis=1)
        draws = costs.draws[ok]
        diff = _interval(diff_point, _cloud_minus_own(draws, costs.ids, costs.owning), level)
        masked = np.where(costs.allowed[None, :], np.round(draws, 2), np.inf)
        winners = Counter(costs.ids[int(i)] for i in np.argmin(masked, axis=1))
        n_ok = max(1, int(ok.sum()))
        shares = {k: v / n_ok for k, v in sorted(winners.items())}
        cheap_flip = 1.0 - shares.get(cheap_point, 0.0)
    return Confidence(
        method=_METHOD, resamples=resamples, seed=seed, level=level, days=n,
        real_utilization=_interval(point_real, real, level),
        runtime_utilization=_interval(point_runtime, runtime, level),
        flip_share=1.0 - counts.get(str(base), 0) / total,
        branches={b: c / total for b, c in sorted(counts.items())},
        cost_difference_usd=diff, cheapest_shares=shares, cheapest_flip_share=cheap_flip, min_days=min_days,
    )


def _cloud_minus_own(totals: np.ndarray, ids: list[str], owning: np.ndarray) -> np.ndarray:
    """all-cloud − the cheapest owning scenario, per row (`owning` marks the owning columns)."""
    cloud = totals[:, ids.index("all-cloud")]
    own = np.where(owning[None, :], totals, np.inf).min(axis=1)
    return cloud - own
