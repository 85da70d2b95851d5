"""Hybrid sizing: how many GPUs to own when the demand above them bursts to the cloud.

Over the fleet demand series d_t (GPUs, one value per bucket; a typical stretch of the horizon), owning N GPUs
costs
    total(0) = all-cloud: renting all of d (the configured mix, reservations billed 24/7)
    total(N) = owned cost(N) + flexible cloud cost of mean_t max(d_t − N, 0) GPUs,  N ≥ 1
(bursts above an owned base are bought flexibly: owning the base is what a reservation does in the cloud).
N* minimizes total over 0..ceil(peak); `n_owning` is the best N ≥ 1 (the hybrid scenario).

Two cross-checks that leave fixed costs out, so they answer a different question than N*:
- the critical fractile (newsvendor): own the k-th GPU when demand reaches k at least c_own(k) / c_cloud of
  the time; it should land within a node of `n_owning`;
- the fixed-cost hurdle: owning pays only when the GPUs kept busy around the clock save more than the fixed
  costs (base staff, a new build's network): about fixed ÷ ((c_cloud − c_own) × horizon hours) busy GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuaudit.analysis import costs
from gpuaudit.analysis.config import Config


@dataclass(frozen=True)
class Sizing:
    n_star: int  # over 0..ceil(peak); 0 = renting everything is cheapest
    n_owning: int  # best N >= 1
    critical_fractile_n: int
    u: float  # cloud flexible $/GPU-h ÷ owned marginal $/GPU-h (a new GPU)
    fixed_usd: float  # fixed costs of owning anything (PV)
    hurdle_gpus: float | None  # GPUs busy around the clock needed to cover fixed_usd; None = never
    agrees: bool
    tolerance: int
    candidates: np.ndarray  # N = 0..ceil(peak)
    owned_usd: np.ndarray
    cloud_usd: np.ndarray
    overflow_gpu_hours: np.ndarray  # horizon GPU-hours rented at each N

    @property
    def total_usd(self) -> np.ndarray:
        return self.owned_usd + self.cloud_usd


def overflow_mean(demand: np.ndarray, candidates: np.ndarray, unit: int = 1) -> np.ndarray:
    """mean_t of the GPUs billed for max(d_t − N, 0), for every N (sorted demand + suffix sums for GPU
    billing; whole instances otherwise)."""
    d = np.sort(np.asarray(demand, dtype=float))
    if d.size == 0:
        return np.zeros(len(candidates))
    cand = np.asarray(candidates, dtype=float)
    if unit <= 1:
        suffix = np.concatenate([np.cumsum(d[::-1])[::-1], [0.0]])
        idx = np.searchsorted(d, cand, side="right")
        return (suffix[idx] - cand * (len(d) - idx)) / d.size
    return np.array([costs.billable(d - n, unit).mean() for n in cand])


def overflow_hours(demand: np.ndarray, candidates: np.ndarray, dt_hours: float) -> np.ndarray:
    """Σ_t max(d_t − N, 0) × dt for every N in candidates (trial GPU-hours above N)."""
    d = np.asarray(demand, dtype=float)
    return overflow_mean(d, candidates) * d.size * dt_hours


def share_at_least(demand: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Share of buckets with demand ≥ each level."""
    d = np.sort(np.asarray(demand, dtype=float))
    if d.size == 0:
        return np.zeros(len(levels))
    return (d.size - np.searchsorted(d, np.asarray(levels, dtype=float) - 1e-9, side="left")) / d.size


def critical_fractile_n(demand: np.ndarray, cloud_rate: float, own_rate: np.ndarray | float) -> int:
    """Largest N such that for every k ≤ N, demand ≥ k at least own_rate(k) / cloud_rate of the time
    (`own_rate` per level k = 1..ceil(peak), or one rate for all)."""
    d = np.asarray(demand, dtype=float)
    if d.size == 0 or cloud_rate <= 0:
        return 0
    levels = np.arange(1, math.ceil(float(d.max()) - 1e-9) + 1, dtype=float)
    if levels.size == 0:
        return 0
    own = np.broadcast_to(np.asarray(own_rate, dtype=float), levels.shape)
    ok = share_at_least(d, levels) * cloud_rate >= own - 1e-12
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if bad.size else int(levels.size)


def size(cfg: Config, tl: costs.Timeline, demand: np.ndarray, all_cloud_usd: float, watts: float,
         existing: int, existing_age_years: float) -> Sizing:
    """N* over the demand series (GPUs per bucket, already scaled to the fleet and the horizon's growth).
    `all_cloud_usd` is the total at N = 0."""
    d = np.asarray(demand, dtype=float)
    peak = float(d.max()) if d.size else 0.0
    candidates = np.arange(0, math.ceil(peak - 1e-9) + 1, dtype=float)
    prices = costs.cloud_prices(cfg)
    over = overflow_mean(d, candidates, prices.unit)
    owned = costs.owned_total(costs.owned_cost(cfg, tl, candidates, watts, existing, existing_age_years))
    fixed_cloud = sum(costs.cloud_fixed(cfg, tl).values())
    flex = over * costs.HOURS_PER_MONTH * prices.flexible * tl.annuity + np.where(over > 1e-12, fixed_cloud, 0.0)
    cloud = np.where(candidates > 0, flex, 0.0)  # same formula as costs.cloud_bill(cfg, tl, 0, over)
    total = owned + cloud
    total[0] = all_cloud_usd  # renting everything: the all-cloud scenario (owned(0) is in it already)
    cloud[0] = all_cloud_usd - owned[0]
    n_star = int(np.argmin(total))  # argmin takes the smallest N on ties
    n_owning = int(np.argmin(total[1:]) + 1) if candidates.size > 1 else 0

    hours = tl.months * costs.HOURS_PER_MONTH
    # Both sides in the same unit: the cloud's list $/GPU-h and the owned cost levelized to a constant $/h whose
    # present value over the horizon equals the owned cost's (PV ÷ PV of one hour a month).
    cloud_rate = prices.flexible
    own_new = costs.owned_marginal_per_hour(cfg, tl, watts)
    own_keep = costs.owned_marginal_per_hour(cfg, tl, watts, keep=True, existing_age_years=existing_age_years)
    levels = np.arange(1, candidates.size, dtype=float)
    own_rate = np.where(levels <= existing, own_keep, own_new)
    fractile = critical_fractile_n(d, cloud_rate, own_rate)
    u = cloud_rate / own_new if own_new > 0 else math.inf
    fixed = costs.owned_fixed(cfg, tl, existing)
    saving = (cloud_rate - (own_keep if existing > 0 else own_new)) * tl.annuity * costs.HOURS_PER_MONTH
    hurdle = fixed / saving if saving > 0 else None
    o = cfg.on_prem
    per_node = o.staff_usd_per_node_per_month > 0 or o.space_usd_per_node_per_month > 0
    tolerance = o.gpus_per_node if per_node else 1
    return Sizing(
        n_star=n_star, n_owning=n_owning, critical_fractile_n=fractile, u=u, fixed_usd=fixed, hurdle_gpus=hurdle,
        agrees=abs(n_owning - fractile) <= tolerance, tolerance=tolerance, candidates=candidates,
        owned_usd=owned, cloud_usd=cloud, overflow_gpu_hours=over * hours,
    )
