"""Block bootstrap over whole UTC days: how sure are the utilization figures and the decision?

Days (not samples) are resampled with replacement because samples within a day are strongly
correlated (a job holds a GPU for hours); resampling days keeps that structure. Seeded: the same data
and seed always give the same intervals.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import polars as pl

from gpuaudit.analysis.decision import branch_for
from gpuaudit.analysis.result import Confidence, DecisionInputs, Interval

METHOD = "block bootstrap over whole UTC days"


def daily(gpu_hours: pl.DataFrame) -> pl.DataFrame:
    """W, R, S seconds per UTC day."""
    return (
        gpu_hours.with_columns((pl.col("hour_s") // 86400).alias("day"))
        .group_by("day")
        .agg(pl.col("observed_s", "held_s", "real_s").sum())
        .sort("day")
    )


def bootstrap(days: pl.DataFrame, inputs: DecisionInputs, resamples: int, seed: int, level: float) -> Confidence:
    w = days["observed_s"].to_numpy().astype(float)
    r = days["held_s"].to_numpy().astype(float)
    s = days["real_s"].fill_null(0).to_numpy().astype(float)
    point_real, point_runtime = float(s.sum() / w.sum()), float(r.sum() / w.sum())
    base = branch_for(point_real, inputs)
    n = len(w)
    if resamples == 0 or n == 0:
        return Confidence(METHOD, 0, seed, level, n, Interval(point_real, point_real, point_real),
                          Interval(point_runtime, point_runtime, point_runtime), 0.0, {str(base): 1.0})
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    ws = w[idx].sum(axis=1)
    ws[ws <= 0] = np.nan  # a resample of only empty days says nothing
    real = s[idx].sum(axis=1) / ws
    runtime = r[idx].sum(axis=1) / ws
    real, runtime = real[np.isfinite(real)], runtime[np.isfinite(runtime)]
    tail = (1.0 - level) / 2 * 100
    counts = Counter(str(branch_for(float(x), inputs)) for x in real)
    total = max(1, len(real))
    return Confidence(
        method=METHOD, resamples=resamples, seed=seed, level=level, days=n,
        real_utilization=Interval(point_real, *(float(v) for v in np.percentile(real, [tail, 100 - tail]))),
        runtime_utilization=Interval(point_runtime, *(float(v) for v in np.percentile(runtime, [tail, 100 - tail]))),
        flip_share=1.0 - counts.get(str(base), 0) / total,
        branches={b: c / total for b, c in sorted(counts.items())},
    )
