"""Hybrid sizing: how many GPUs to own when the demand above them bursts to the cloud.

Over the fleet demand series d_t (GPUs, one value per bucket; a typical stretch of the horizon), owning N GPUs
costs
    total(0) = all-cloud: renting all of d (the configured mix, reservations billed 24/7)
    total(N) = owned cost(N) + flexible cloud cost of mean_t max(d_t − N, 0) GPUs,  N ≥ 1
(bursts above an owned base are bought flexibly: owning the base is what a reservation does in the cloud).
N* minimizes total over 0..ceil(peak); `n_owning` is the best N ≥ 1 (the hybrid scenario). Up to DENSE_MAX GPUs
every N is priced; above, a grid of about GRID_POINTS counts is refined around its minimum down to every N in a
window of DENSE_MAX, so time and memory stay bounded whatever the fleet size or growth (see _search_grid).

Two cross-checks that leave fixed costs out, so they answer a different question than N*:
- the critical fractile (newsvendor): own the k-th GPU when demand reaches k at least c_own(k) / c_cloud of
  the time; it should land within a node of `n_owning`;
- the fixed-cost hurdle: owning pays only when the GPUs held around the clock (the hours the cloud would bill)
  save more than the fixed costs (base staff, a new build's network): about fixed ÷ ((c_cloud − c_own) ×
  horizon hours) GPUs held around the clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuaudit.analysis import costs
from gpuaudit.analysis.config import Config

DENSE_MAX = 4096  # price every N up to this many GPUs (exact; covers any fleet of normal size)
_GRID_POINTS = 1024  # above it: counts per refinement level (linear and geometric spacing each)
_NEIGHBOURS = 8  # grid points either side of the best that the next level covers


@dataclass(frozen=True)
class Sizing:
    n_star: int  # over 0..ceil(peak); 0 = renting everything is cheapest
    n_owning: int  # best N >= 1
    critical_fractile_n: int
    u: float  # cloud flexible $/GPU-h ÷ owned marginal $/GPU-h (a new GPU)
    fixed_usd: float  # fixed costs of owning anything (PV)
    hurdle_gpus: float | None  # GPUs held around the clock needed to cover fixed_usd; None = never
    agrees: bool
    tolerance: int
    candidates: np.ndarray  # N = 0..ceil(peak), or the refined grid above DENSE_MAX (sorted, from 0)
    owned_usd: np.ndarray
    cloud_usd: np.ndarray
    overflow_gpu_hours: np.ndarray  # horizon GPU-hours rented at each N
    min_owned: int = 0  # no N below it could be chosen (the latency floor)

    @property
    def total_usd(self) -> np.ndarray:
        return self.owned_usd + self.cloud_usd


def overflow_mean(demand: np.ndarray, candidates: np.ndarray, unit: int = 1) -> np.ndarray:
    """mean_t of the GPUs billed for max(d_t − N, 0), for every N (sorted demand + suffix sums for GPU
    billing; whole instances otherwise)."""
    d = costs.ascending(demand)
    if d.size == 0:
        return np.zeros(len(candidates))
    cand = np.asarray(candidates, dtype=float)
    if unit <= 1:
        suffix = np.concatenate([np.cumsum(d[::-1])[::-1], [0.0]])
        idx = np.searchsorted(d, cand, side="right")
        return (suffix[idx] - cand * (len(d) - idx)) / d.size
    return np.array([costs.billable(d - n, unit).mean() for n in cand])


def _share_at_least(demand: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Share of buckets with demand ≥ each level."""
    d = costs.ascending(demand)
    if d.size == 0:
        return np.zeros(len(levels))
    return (d.size - np.searchsorted(d, np.asarray(levels, dtype=float) - 1e-9, side="left")) / d.size


def critical_fractile_n(demand: np.ndarray, cloud_rate: float, own_rate: np.ndarray | float, *,
                        keep_rate: float | None = None, existing: int = 0) -> int:
    """Largest N such that for every k ≤ N, demand ≥ k at least own_rate(k) / cloud_rate of the time
    (`own_rate` per level k = 1..ceil(peak), or one rate for all; with `keep_rate`, levels k ≤ `existing` use it).
    With scalar rates the answer is found by bisection (the share of time at ≥ k falls with k), so a fleet of
    millions costs a few dozen probes, not an array per GPU."""
    d = costs.ascending(demand)
    if d.size == 0 or cloud_rate <= 0:
        return 0
    top = math.ceil(float(d[-1]) - 1e-9)
    if top < 1:
        return 0
    if np.ndim(own_rate) > 0:  # one rate per level: the caller sized the array already
        levels = np.arange(1, top + 1, dtype=float)
        own = np.broadcast_to(np.asarray(own_rate, dtype=float), levels.shape)
        ok = _share_at_least(d, levels) * cloud_rate >= own - 1e-12
        bad = np.flatnonzero(~ok)
        return int(bad[0]) if bad.size else int(levels.size)

    def first_bad(lo: int, hi: int, rate: float) -> int | None:
        """Smallest k in lo..hi where owning the k-th GPU does not pay (the same test as the array form)."""
        def ok(k: int) -> bool:
            return bool(_share_at_least(d, np.array([float(k)]))[0] * cloud_rate >= rate - 1e-12)

        if lo > hi or ok(hi):
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if ok(mid):
                lo = mid + 1
            else:
                hi = mid
        return lo

    new_rate = float(own_rate)
    pieces = [(1, top, new_rate)]
    if keep_rate is not None and existing > 0:
        pieces = [(1, min(existing, top), float(keep_rate)), (existing + 1, top, new_rate)]
    for lo, hi, rate in pieces:
        k = first_bad(lo, hi, rate)
        if k is not None:
            return k - 1
    return top


def _search_grid(top: int, existing: int, total_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Counts to price for a peak of `top` GPUs: all of 0..top up to DENSE_MAX. Above, a linear and a geometric
    grid (plus the kink at the GPUs owned already), refined around the best N ≥ 1: each level spreads
    GRID_POINTS over the NEIGHBOURS grid points either side of it, until that window is at most DENSE_MAX wide;
    then every N within DENSE_MAX / 2 of the best is priced. The cost is a convex trend (owned cost grows
    linearly, the rented overflow falls convexly) plus small steps (a node's staff and space, whole cloud
    instances): the wide windows keep a step from hiding the minimum behind a grid point's phase."""
    if top <= DENSE_MAX:
        return np.arange(0, top + 1, dtype=float)
    first = np.concatenate([
        np.arange(0, 257, dtype=float), np.geomspace(256.0, float(top), _GRID_POINTS),
        np.linspace(0.0, float(top), _GRID_POINTS),
        np.array([existing - 1, existing, existing + 1, float(top)], dtype=float),
    ])
    cand = np.unique(np.clip(np.rint(first), 0.0, float(top)))
    tot = total_of(cand)

    def add(points: np.ndarray) -> None:
        nonlocal cand, tot
        new = np.setdiff1d(np.clip(np.rint(points), 1.0, float(top)), cand)
        if new.size:
            cand, tot = np.concatenate([cand, new]), np.concatenate([tot, total_of(new)])
            order = np.argsort(cand, kind="stable")
            cand, tot = cand[order], tot[order]

    for _ in range(64):  # each level narrows the window ~60-fold: a handful of levels reach any float peak
        i = int(np.argmin(tot[1:])) + 1
        lo, hi = cand[max(i - _NEIGHBOURS, 1)], cand[min(i + _NEIGHBOURS, cand.size - 1)]
        if hi - lo <= DENSE_MAX:
            best = cand[i]
            add(np.arange(best - DENSE_MAX // 2, best + DENSE_MAX // 2 + 1))
            break
        before = cand.size
        add(np.linspace(lo, hi, _GRID_POINTS))
        if cand.size == before:  # no integer left between the grid points (a peak beyond float precision)
            break
    return cand


def size(cfg: Config, tl: costs.Timeline, demand: np.ndarray, all_cloud_usd: float,
         power: costs.PowerModel | float, existing: int, existing_age_years: float, *, min_owned: int = 0) -> Sizing:
    """N* over the demand series (GPUs per bucket, already scaled to the fleet and the horizon's growth).
    `all_cloud_usd` is the total at N = 0. `min_owned`: no N below it may be chosen (the latency-sensitive
    share's peak, which must run on owned GPUs); the curve still prices them."""
    d = costs.ascending(demand)  # every figure below is of the demand's distribution, none of its order
    pm = power if isinstance(power, costs.PowerModel) else costs.PowerModel(power, power, power)
    peak = float(d.max()) if d.size else 0.0
    prices = costs.cloud_prices(cfg)
    fixed_cloud = sum(costs.cloud_fixed(cfg, tl).values())

    month = costs.HOURS_PER_MONTH * tl.annuity
    level = costs.best_reservation(d, prices) if prices.unit <= 1 else 0.0  # L*: reserve up to it, owned or not

    def reserve(n: np.ndarray) -> np.ndarray:
        """The bursts' reservation above N owned GPUs: what is cheaper reserved (costs.best_reservation). With
        per-GPU billing it is max(L* − N, 0), L* the best reservation of the whole demand (the cost is convex in
        N + K); whole instances are solved per N."""
        if prices.unit <= 1:
            return np.maximum(level - n, 0.0)
        return np.array([costs.best_reservation(costs.billable(d - x, prices.unit), prices) for x in n])

    def price(n: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean GPUs rented above N, owned cost, cloud cost) for each count N."""
        over = overflow_mean(d, n, prices.unit)
        k = reserve(n)
        above = overflow_mean(d, n + k, prices.unit) if prices.unit <= 1 else np.array(
            [float(np.maximum(costs.billable(d - x, prices.unit) - kk, 0.0).mean()) for x, kk in zip(n, k,
                                                                                                      strict=True)])
        owned = costs.owned_total(costs.owned_cost(cfg, tl, n, pm.watts(d, n), existing, existing_age_years))
        rent = (k * prices.reserved + above * prices.flexible) * month + np.where(over > 1e-12, fixed_cloud, 0.0)
        return over, owned, np.where(n > 0, rent, 0.0)  # the formula of costs.cloud_bill(cfg, tl, K, above)

    def total_of(n: np.ndarray) -> np.ndarray:
        _, owned, cloud = price(n)
        return owned + cloud

    candidates = _search_grid(math.ceil(peak - 1e-9), existing, total_of)
    if min_owned > 0 and candidates.size and candidates[-1] > DENSE_MAX:  # a grid: price every N just above the floor
        near = np.arange(min_owned, min(min_owned + DENSE_MAX // 2, candidates[-1]) + 1, dtype=float)
        candidates = np.union1d(candidates, near)
    over, owned, cloud = price(candidates)
    total = owned + cloud
    total[0] = all_cloud_usd  # renting everything: the all-cloud scenario (owned(0) is in it already)
    cloud[0] = all_cloud_usd - owned[0]
    top = int(candidates[-1]) if candidates.size else 0
    floor = min(max(min_owned, 0), top)
    choosable = np.where(candidates >= floor, total, np.inf)
    n_star = int(candidates[np.argmin(choosable)])  # argmin takes the smallest N on ties
    n_owning = int(candidates[np.argmin(choosable[1:]) + 1]) if candidates.size > 1 else 0

    hours = tl.months * costs.HOURS_PER_MONTH
    # Both sides in the same unit: the cloud's list $/GPU-h and the owned cost levelized to a constant $/h whose
    # present value over the horizon equals the owned cost's (PV ÷ PV of one hour a month).
    cloud_rate = prices.flexible
    watts = pm.average_w  # the cross-checks price one more GPU at the fleet's average power
    own_new = costs.owned_marginal_per_hour(cfg, tl, watts)
    own_keep = costs.owned_marginal_per_hour(cfg, tl, watts, keep=True, existing_age_years=existing_age_years)
    # the cross-check answers the same constrained question: no fewer GPUs than the floor
    fractile = max(critical_fractile_n(d, cloud_rate, own_new, keep_rate=own_keep, existing=existing), floor)
    u = cloud_rate / own_new if own_new > 0 else math.inf
    fixed = costs.owned_fixed(cfg, tl, existing)
    saving = (cloud_rate - (own_keep if existing > 0 else own_new)) * tl.annuity * costs.HOURS_PER_MONTH
    hurdle = fixed / saving if saving > 0 else None
    o = cfg.on_prem
    per_node = o.staff_usd_per_node_per_month > 0 or costs.space_per_node(cfg) > 0
    # One node when owning is bought by the node, but never so loose that any answer on a small fleet agrees.
    tolerance = max(1, min(o.gpus_per_node if per_node else 1, round(0.1 * peak)))
    return Sizing(
        n_star=n_star, n_owning=n_owning, critical_fractile_n=fractile, u=u, fixed_usd=fixed, hurdle_gpus=hurdle,
        agrees=abs(n_owning - fractile) <= tolerance, tolerance=tolerance, candidates=candidates,
        owned_usd=owned, cloud_usd=cloud, overflow_gpu_hours=over * hours, min_owned=floor,
    )
