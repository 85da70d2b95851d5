"""What the trial measured, as the cost model needs it, and the fleet it is scaled to.

Demand is measured per 300 s bucket on the GPUs that reported; it is scaled to the whole fleet bucket by bucket
(× fleet capacity ÷ GPUs reporting), so nodes without data count like the nodes with data rather than as idle
(buckets where nothing reported are left out). The scaled series is a typical stretch of the horizon: every
month of the horizon is assumed to look like it (times the demand growth, if any).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuaudit.analysis.config import Config
from gpuaudit.analysis.result import Deployment
from gpuaudit.errors import GpuauditError


@dataclass(frozen=True)
class Measured:
    """What the trial measured, as the cost model needs it (series: one value per demand bucket)."""

    w: float  # observed GPU-hours
    r: float  # runtime (held) GPU-hours
    s: float  # real GPU-hours (an upper bound where duty cycle stood in)
    s_lower: float  # real GPU-hours counting duty-cycle-only time as 0
    gpus_seen: int  # physical GPUs seen (distinct gpu_uuid)
    gpu_equivalents: float  # Σ gpu_fraction of the GPUs and MIG slices seen
    held: np.ndarray  # GPUs held by a process
    reporting: np.ndarray  # GPUs (equivalents) reporting
    day: np.ndarray  # UTC day of each bucket (for the bootstrap)
    dt_hours: float
    measured_w: float | None
    current: Deployment
    data_residency: bool = False
    latency_share: float = 0.0  # of demand, the latency-sensitive share: it runs on owned GPUs, never bursts
    idle_w: float | None = None  # measured power of a GPU no job holds / a held one (utilization.power_by_load)
    held_w: float | None = None
    # GPUs that report only while held (elastic): their part of `held` and `reporting` per bucket, how many
    # there were and their Σ gpu_fraction (zero when none)
    elastic_held: np.ndarray | None = None
    elastic_reporting: np.ndarray | None = None
    elastic_gpus: int = 0
    elastic_equivalents: float = 0.0
    in_use: np.ndarray | None = None  # SM-weighted GPUs in use per bucket (Σ sm_active × gpu_fraction)


@dataclass(frozen=True)
class Fleet:
    capacity: float  # GPU equivalents of the whole fleet: demand is scaled to it
    gpus: int  # physical GPUs of the whole fleet
    existing: int  # GPUs owned today
    age_years: float  # their age
    elastic: float = 0.0  # of `capacity`, the elastic GPUs: their demand counts as measured, never scaled

    @property
    def steady(self) -> float:
        """The GPU equivalents whose measured demand is scaled up for the time they did not report."""
        return max(self.capacity - self.elastic, 0.0)


def _elastic_capacity(m: Measured) -> float:
    """Elastic GPUs in the fleet (only a rented fleet has them: the pipeline passes none on-prem): an instance
    exists only while it runs, so the fleet holds their peak of concurrent GPUs; a new UUID per launch must not
    multiply it."""
    if not m.elastic_equivalents or m.elastic_reporting is None or not m.elastic_reporting.size:
        return 0.0
    return float(m.elastic_reporting.max())


def _stated(cfg: Config, dotted: str, value: int) -> str:
    """How the user stated a setting, for an error line: `--fleet-gpus 4`, or `key = value (in FILE)`."""
    origin = cfg.sources.get(dotted, "default")
    if origin.startswith("--"):
        return f"{origin} {value:,}"
    return f"{dotted} = {value:,}" + ("" if origin in ("default", cfg.preset) else f" (in {origin})")


def _check_stated(cfg: Config, configured: int, physical: int, owned: int, gpus: int) -> None:
    """A stated fleet holds at least the GPUs that reported, and the GPUs owned today are part of the fleet:
    anything else prices a fleet that is not the one measured, so it is refused."""
    if configured and configured < physical:
        raise GpuauditError(f"{_stated(cfg, 'analysis.fleet_gpus', configured)} is fewer than the {physical:,} GPUs "
                            "seen in the data: the fleet holds at least every GPU that reported (give the whole "
                            "fleet, or leave it out to use the GPUs seen)")
    if owned > gpus:
        raise GpuauditError(f"{_stated(cfg, 'on_prem.owned_gpus', owned)} is more than the fleet's {gpus:,} GPUs: "
                            "the GPUs owned are part of the fleet; lower owned_gpus, or give the whole fleet with "
                            "--fleet-gpus (analysis.fleet_gpus) if some GPUs had no agent")


def fleet(cfg: Config, m: Measured) -> Fleet:
    configured = cfg.analysis.fleet_gpus
    elastic = _elastic_capacity(m)
    steady_seen = max(m.gpu_equivalents - m.elastic_equivalents, 0.0)
    seen = steady_seen + elastic
    physical = m.gpus_seen - m.elastic_gpus + math.ceil(elastic - 1e-6) if m.elastic_gpus else m.gpus_seen
    gpus = configured or max(1, physical)
    capacity = float(configured) if configured else max(seen, 1e-9)
    owned = cfg.on_prem.owned_gpus
    _check_stated(cfg, configured, physical, owned, gpus)
    existing = owned if owned >= 0 else (gpus if m.current is Deployment.ON_PREM else 0)
    return Fleet(capacity, gpus, existing, cfg.on_prem.owned_age_years, min(elastic, capacity))


def latency_floor(share: float, series: np.ndarray) -> int:
    """The GPUs a plan serving `series` must own for its latency-sensitive `share` (which never bursts): the
    share's peak, whole GPUs; 0 when no work is latency-sensitive."""
    if share <= 0 or not series.size:
        return 0
    return max(1, math.ceil(float(series.max()) * share - 1e-9))


def _to_fleet(series: np.ndarray, reporting: np.ndarray, capacity: float) -> np.ndarray:
    """Scale a per-bucket series measured on the GPUs that reported to the whole fleet; buckets where nothing
    reported are dropped (unknown, not idle)."""
    ok = reporting > 1e-9
    return np.asarray(series, dtype=float)[ok] * (capacity / reporting[ok])


def fleet_series(m: Measured, fl: Fleet, series: np.ndarray, elastic_part: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(the series scaled to the fleet, which buckets are kept). The steady GPUs' part is scaled × their
    capacity ÷ the steady GPUs reporting (buckets where none reported are unknown: dropped); the elastic
    GPUs' part counts as measured: a GPU that reports only while held did not exist while it was absent."""
    x = np.asarray(series, dtype=float)
    if fl.elastic <= 0 or elastic_part is None or m.elastic_reporting is None:
        ok = m.reporting > 1e-9
        return _to_fleet(x, m.reporting, fl.capacity), ok
    steady_rep = np.maximum(m.reporting - m.elastic_reporting, 0.0)
    steady = np.maximum(x - elastic_part, 0.0)
    if fl.steady <= 1e-9:  # every GPU elastic: nothing to scale, no bucket unknown
        return np.asarray(elastic_part, dtype=float).copy(), np.ones(x.shape, dtype=bool)
    ok = steady_rep > 1e-9
    return steady[ok] * (fl.steady / steady_rep[ok]) + elastic_part[ok], ok


def _coverage_weights(m: Measured, fl: Fleet) -> np.ndarray:
    """Per kept bucket (fleet_series' buckets), the share of the scaled GPUs that reported in it: the weight of
    the bucket in a fleet-wide mean, so that a bucket a tenth covered (a trial's partial first and last buckets,
    a GPU that joined late) counts a tenth, not as much as a full one. Every bucket 1 when all GPUs are elastic
    (nothing is scaled)."""
    if fl.elastic <= 0 or m.elastic_reporting is None:
        rep = m.reporting
        return rep[rep > 1e-9] / fl.capacity if fl.capacity > 0 else np.zeros(0)
    if fl.steady <= 1e-9:
        return np.ones(m.reporting.shape)
    rep = np.maximum(m.reporting - m.elastic_reporting, 0.0)
    return rep[rep > 1e-9] / fl.steady


def fleet_mean(m: Measured, fl: Fleet, scaled: np.ndarray) -> float:
    """The coverage-weighted mean of a fleet-scaled series ÷ the fleet's GPUs: without elastic GPUs exactly
    Σ series ÷ Σ GPUs reporting (billed ÷ W for the billed demand: the billed-hour utilization, never below believed
    A / W or held-hour R / W), on the fleet's capacity with them. The plain mean of the scaled buckets was not: a
    trial's partial first and last buckets, scaled up to the fleet, weighed as much as full ones (issue 26.3)."""
    wt = _coverage_weights(m, fl)
    if not scaled.size or wt.shape != scaled.shape or wt.sum() <= 0 or fl.capacity <= 0:
        return 0.0
    return float((scaled * wt).sum() / (wt.sum() * fl.capacity))


def in_use_series(m: Measured, fl: Fleet) -> np.ndarray | None:
    """The SM-weighted demand scaled to the fleet bucket by bucket as held demand is (the elastic GPUs' share of
    it in proportion to their share of the held GPUs); None when the measurement carries no such series."""
    if m.in_use is None:
        return None
    elastic = None
    if m.elastic_held is not None:
        elastic = np.where(m.held > 1e-12, m.in_use * m.elastic_held / np.maximum(m.held, 1e-12), 0.0)
    return fleet_series(m, fl, m.in_use, elastic)[0]
