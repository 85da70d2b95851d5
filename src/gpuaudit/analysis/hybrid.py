"""Hybrid sizing: how many GPUs to own when the demand above them bursts to the cloud.

Over the measured demand series d_t (GPUs, one value per bucket of dt hours), owning N GPUs costs
    total(N) = on-prem cost(N) + cloud cost of Σ_t max(d_t − N, 0) × dt
(scaled from the trial to the horizon). N* is the smallest N in 0..ceil(peak) minimizing total(N).
The critical-fractile rule (newsvendor) says the same without fixed costs: own the k-th GPU when demand
reaches k at least 1/U of the time, U = cloud $/GPU-h ÷ owned marginal $/GPU-h.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuaudit.analysis.config import Config
from gpuaudit.analysis.costs import cloud_cost, on_prem_cost


@dataclass(frozen=True)
class Sizing:
    n_star: int
    critical_fractile_n: int
    u: float  # cloud effective ÷ owned marginal $/GPU-h
    candidates: np.ndarray  # N = 0..ceil(peak)
    owned_usd: np.ndarray
    cloud_usd: np.ndarray
    overflow_gpu_hours: np.ndarray  # horizon GPU-hours above N

    @property
    def total_usd(self) -> np.ndarray:
        return self.owned_usd + self.cloud_usd


def overflow_hours(demand: np.ndarray, candidates: np.ndarray, dt_hours: float) -> np.ndarray:
    """Σ_t max(d_t − N, 0) × dt for every N in candidates (sorted demand + suffix sums: O((T+K) log T))."""
    d = np.sort(np.asarray(demand, dtype=float))
    suffix = np.concatenate([np.cumsum(d[::-1])[::-1], [0.0]])  # suffix[i] = Σ d[i:]
    idx = np.searchsorted(d, candidates, side="right")
    above = len(d) - idx
    return (suffix[idx] - candidates * above) * dt_hours


def critical_fractile_n(demand: np.ndarray, u: float) -> int:
    """Largest N ≥ 0 such that demand ≥ N at least 1/u of the time (0 when owning never pays, u ≤ 1)."""
    d = np.sort(np.asarray(demand, dtype=float))
    if d.size == 0 or u <= 1.0:
        return 0
    levels = np.arange(0, math.ceil(d[-1] - 1e-9) + 1, dtype=float)
    share = (d.size - np.searchsorted(d, levels - 1e-9, side="left")) / d.size  # share of time d ≥ N
    ok = levels[share >= 1.0 / u - 1e-12]
    return int(ok.max()) if ok.size else 0


def size(cfg: Config, demand: np.ndarray, dt_hours: float, scale: float, months: float, watts: float,
         owned_marginal: float, cloud_effective: float) -> Sizing:
    """N* over the demand series. `scale` converts trial GPU-hours to horizon GPU-hours."""
    d = np.asarray(demand, dtype=float)
    peak = float(d.max()) if d.size else 0.0
    candidates = np.arange(0, math.ceil(peak - 1e-9) + 1, dtype=float)
    over = overflow_hours(d, candidates, dt_hours) * scale
    # Both sides are linear plus a fixed part paid only when used at all (checked against the
    # per-N cost functions in the tests).
    fixed_owned = sum(on_prem_cost(cfg, 1, months, watts).values()) - sum(on_prem_cost(cfg, 1, months, watts,
                                                                                  fixed=False).values())
    per_gpu = sum(on_prem_cost(cfg, 1, months, watts, fixed=False).values())
    owned = np.where(candidates > 0, candidates * per_gpu + fixed_owned, 0.0)
    rate = cloud_cost(cfg, 1.0, months, fixed=False)["cloud_compute"]
    fixed_cloud = sum(cloud_cost(cfg, 0.0, months).values())
    cloud = np.where(over > 1e-9, over * rate + fixed_cloud, 0.0)
    total = owned + cloud
    n_star = int(candidates[int(np.argmin(total))])  # argmin takes the first (smallest N) on ties
    u = cloud_effective / owned_marginal if owned_marginal > 0 else math.inf
    return Sizing(n_star, critical_fractile_n(d, u), u, candidates, owned, cloud, over)
