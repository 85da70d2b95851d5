"""The plans the cost model prices, as a registry of small builders: stay as is, all cloud, all on-prem,
hybrid, and the "if behaviour changes" what-ifs. Each builder reads the `Context` (the config, the fleet, the
fleet-scaled demand) and the plans built before it, and returns one priced `Built` plan; `scenarios.cost_block`
runs the registry in order and adds what is common to every plan (power per GPU, what is allowed, cash).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from gpuaudit.analysis import costs
from gpuaudit.analysis.config import Config
from gpuaudit.analysis.economics import CostScenario
from gpuaudit.analysis.figure import Figure
from gpuaudit.analysis.fleet import Fleet, Measured, fleet_series, in_use_series, latency_floor
from gpuaudit.analysis.hybrid import Sizing, size
from gpuaudit.analysis.result import Deployment
from gpuaudit.util import fmt

SCENARIO_ORDER = ("stay-as-is", "all-cloud", "all-on-prem", "hybrid")
OWNING = ("stay-as-is", "all-on-prem", "hybrid")  # scenarios that own GPUs (stay-as-is only when on-prem)
_CLOUD_PARTS = ("cloud_reserved", "cloud_flexible", "egress", "managed_services")


def _gpus(n: int) -> str:
    return f"{n:,} GPU" + ("" if n == 1 else "s")


def _floor_note(m: Measured, floor: int) -> str:
    if m.latency_share <= 0 or floor <= 0:
        return ""
    return (f" (at least {_gpus(floor)}: the latency-sensitive {fmt.share(m.latency_share)} of demand peaks there and "
            "never bursts)")


def _sum(parts: dict[str, float]) -> float:
    return float(sum(parts.values()))


def _first(parts: dict[str, np.ndarray]) -> dict[str, float]:
    return {k: float(np.atleast_1d(v)[0]) for k, v in parts.items()}


def is_cloud_used(s: CostScenario) -> bool:
    return any(abs(s.components.get(k, 0.0)) > 1e-9 for k in _CLOUD_PARTS)


def _scenario(sid: str, label: str, description: str, mean_cloud_gpus: float, owned: int, parts: dict[str, float],
              formula: str, tl: costs.Timeline, *, what_if: bool = False, allowed: bool = True) -> CostScenario:
    total = _sum(parts)
    return CostScenario(
        id=sid, label=label, description=description,
        cloud_gpu_hours=mean_cloud_gpus * costs.HOURS_PER_MONTH * tl.months, owned_gpus=owned,
        total=Figure(total, "USD", formula, "cost model (config) × the fleet-scaled demand series",
                     f"Present value of '{label}' over {tl.months} months."),
        components={k: float(v) for k, v in parts.items()}, monthly_usd=total / tl.months if tl.months else 0.0,
        what_if=what_if, allowed=allowed,
    )


def _cloud_of(cfg: Config, tl: costs.Timeline, series: np.ndarray, prices: costs.CloudPrices
              ) -> tuple[dict[str, float], float, float]:
    """(bill, reservation K, mean GPUs billed) for renting `series` (GPUs per bucket, billed whole instances
    with instance billing): the reservation is what is cheaper reserved (costs.best_reservation), the rest is
    bought flexibly. The same rule for every plan that rents: all cloud, staying in the cloud, a hybrid's
    bursts, the demand above the GPUs owned today."""
    billed = costs.billable(series, prices.unit)
    k = costs.best_reservation(billed, prices)
    bill = costs.cloud_bill(cfg, tl, k, float(np.maximum(billed - k, 0.0).mean()) if billed.size else 0.0)
    return bill, k, float(billed.mean()) if billed.size else 0.0


def allowed(m: Measured, s: CostScenario, floor: int) -> bool:
    """Data that must stay rents nothing; latency-sensitive work runs on owned GPUs: a plan that rents is allowed
    only while it owns at least the latency floor of the demand it serves (all of it, at a share of 1)."""
    if not is_cloud_used(s):
        return True
    if m.data_residency:
        return False
    return m.latency_share <= 0 or (m.latency_share < 1 and s.owned_gpus >= floor)



def packed_demand(cfg: Config, m: Measured, fl: Fleet, held: np.ndarray, growth_factor: float = 1.0) -> np.ndarray:
    """The work packed to analysis.consolidation_target, the one packed demand the "if behaviour changes" plans
    and the consolidation lever are sized and priced on: per bucket the fleet-scaled SM-weighted demand ÷ the
    target, never more than the GPUs held (`held`, fleet-scaled: it is their work). Without an SM series (older
    callers): held demand × min(S ÷ target, R) ÷ R."""
    target = cfg.analysis.consolidation_target
    in_use = in_use_series(m, fl)
    if in_use is None or in_use.shape != held.shape:
        return held * (min(m.s / target, m.r) / m.r if m.r > 0 else 1.0)
    return np.minimum(in_use * growth_factor / target, held)


@dataclass(frozen=True)
class Context:
    """What every plan builder reads: the settings, what was measured, the fleet and its demand."""

    cfg: Config
    m: Measured
    tl: costs.Timeline
    fl: Fleet
    prices: costs.CloudPrices
    power: costs.PowerModel
    held: np.ndarray  # the fleet-scaled billed demand (times the growth): every plan serves it
    growth_factor: float

    def own(self, n: float, series: np.ndarray | None = None) -> dict[str, float]:
        """Owning n GPUs that serve `series` (the demand by default): each plan's power is what the GPUs it keeps
        draw at the load they carry."""
        w = self.power.watts(self.held_ascending if series is None else series, float(n))
        return _first(costs.owned_cost(self.cfg, self.tl, float(n), w, self.fl.existing, self.fl.age_years))

    def rent(self, series: np.ndarray) -> tuple[dict[str, float], float, float]:
        return _cloud_of(self.cfg, self.tl, series, self.prices)

    @cached_property
    def held_ascending(self) -> np.ndarray:
        """`held` sorted once for the plans' power figures (a distribution: the order is `held`'s own business)."""
        return costs.ascending(self.held)

    @cached_property
    def floor(self) -> int:
        """The latency floor of the measured demand: what a plan that rents must own."""
        return latency_floor(self.m.latency_share, self.held)

    @cached_property
    def packed(self) -> np.ndarray:
        return packed_demand(self.cfg, self.m, self.fl, self.held, self.growth_factor)

    @cached_property
    def pack(self) -> float:
        """Packed ÷ held demand over the trial: what the packing leaves of the hours billed, on average."""
        total = float(self.held.sum())
        return float(self.packed.sum()) / total if total > 0 else 1.0


@dataclass(frozen=True)
class Built:
    """One priced plan, with what the cost bootstrap and the report need of its choices."""

    scenario: CostScenario
    reserved_gpus: float = 0.0  # GPUs it reserves 24/7
    floor: int | None = None  # the latency floor its renting must own (None: the measured demand's)
    sizing: Sizing | None = None  # the hybrid's search


_Builder = Callable[[Context, Mapping[str, Built]], Built]


def _stay_as_is(c: Context, _built: Mapping[str, Built]) -> Built:
    cfg, m, fl, tl = c.cfg, c.m, c.fl, c.tl
    if m.current is Deployment.ON_PREM:
        bill, k, over = c.rent(c.held - fl.existing)
        return Built(_scenario(
            "stay-as-is", "Stay as is (on-prem)",
            f"Keep the {fl.existing} GPUs owned today (their purchase is sunk: only running costs and the value "
            "they lose count); rent demand above them.",
            over, fl.existing, {**c.own(fl.existing), **bill},
            "owned cost(GPUs owned today) + cloud cost(demand above them)", tl), k)
    # The instances that ran, scaled to the fleet like the demand they carry: a GPU that did not report is
    # taken to run like those that did (so held demand never exceeds what is rented).
    running = fleet_series(m, fl, m.reporting, m.elastic_reporting)[0] * c.growth_factor
    bill, k, mean_billed = _cloud_of(cfg, tl, running, c.prices)
    kept = f"; keep the {fl.existing} GPUs owned today as they are" if fl.existing else ""
    return Built(_scenario(
        "stay-as-is", "Stay as is (cloud)",
        "Keep renting the fleet's instances for all the time they ran (GPUs reporting, scaled to the fleet), "
        f"with the configured mix{kept}.", mean_billed, fl.existing, {**c.own(fl.existing), **bill},
        "cloud cost(GPUs running, fleet-scaled) + owned cost(GPUs owned today)", tl), k)


def all_cloud(c: Context, built: Mapping[str, Built]) -> Built:
    tl, fl = c.tl, c.fl
    bill, k, mean_billed = c.rent(c.held)
    parts = {**c.own(0), **bill}
    sold = f"; sell the {fl.existing} owned GPUs now" if fl.existing else ""
    # One rule for "behaviour change": a plan that needs the team to hold GPUs differently from today is shown,
    # never counted as cheapest. A cloud fleet renting only the held hours must release the instances it keeps
    # running idle: that is a change of behaviour (autoscaling), not a move to the cloud it is already in.
    stay = built.get("stay-as-is")
    releases = (c.m.current is Deployment.CLOUD and stay is not None
                and mean_billed < stay.scenario.cloud_gpu_hours / (costs.HOURS_PER_MONTH * tl.months) * (1 - 1e-6))
    reserving = f"reserving {k:,.1f} GPUs 24/7, the rest flexibly" if k > 0 else "flexibly"
    if releases:
        return Built(_scenario("all-cloud", "All cloud, releasing idle instances",
                               f"Rent only the GPU-hours jobs hold ({reserving}): release instances no job holds "
                               f"(autoscaling){sold}. A change of behaviour: never counted as cheapest.",
                               mean_billed, 0, parts, "cloud cost(held demand) (owned GPUs sold today)", tl,
                               what_if=True), k)
    return Built(_scenario("all-cloud", "All cloud", f"Rent the GPU-hours jobs hold ({reserving}){sold}.",
                           mean_billed, 0, parts, "cloud cost(held demand) (owned GPUs sold today)", tl), k)


def _peak(series: np.ndarray) -> int:
    return max(1, math.ceil(float(series.max()) - 1e-9)) if series.size else 1


def _all_on_prem(c: Context, _built: Mapping[str, Built]) -> Built:
    n = _peak(c.held)
    return Built(_scenario("all-on-prem", "All on-prem", f"Own enough GPUs for peak demand ({n}).", 0.0, n,
                           c.own(n), "owned cost(ceil(peak demand))", c.tl))


def hybrid(c: Context, built: Mapping[str, Built]) -> Built:
    m, fl = c.m, c.fl
    rent_all = _sum(built["all-cloud"].scenario.components)
    sizing = size(c.cfg, c.tl, c.held, rent_all, c.power, fl.existing, fl.age_years, min_owned=c.floor)
    n = max(1, sizing.n_owning)
    bill, k, over = c.rent(c.held - n)
    note = " (no demand above them: the same as all on-prem)" if over <= 1e-12 else ""
    how = f"reserving {k:,.1f} GPUs 24/7, the rest flexibly" if k > 0 else "flexibly"
    return Built(_scenario("hybrid", "Hybrid", f"Own {_gpus(n)} for the steady base{_floor_note(m, c.floor)}, rent "
                           f"demand above them {how}{note}.", over, n, {**c.own(n), **bill},
                           "owned cost(N) + cloud cost(max(demand − N, 0)), N = best N ≥ 1", c.tl), k,
                 sizing=sizing)


_PACKED = "packed demand (per bucket SM-weighted demand ÷ target, at most the GPUs held)"


def _packed_words(c: Context) -> str:
    return (f"the work packed to {c.cfg.analysis.consolidation_target:.0%} SM activity (held demand × "
            f"{c.pack:.2f} on average)")


def _all_cloud_if_packed(c: Context, _built: Mapping[str, Built]) -> Built:
    bill, _k, mean = c.rent(c.packed)
    return Built(_scenario("all-cloud-if-packed", "All cloud, if behaviour changes",
                           f"Rent only {_packed_words(c)}.", mean, 0, {**c.own(0), **bill},
                           f"cloud cost({_PACKED})", c.tl, what_if=True),
                 floor=latency_floor(c.m.latency_share, c.packed))


def _all_on_prem_if_packed(c: Context, _built: Mapping[str, Built]) -> Built:
    n = _peak(c.packed)
    return Built(_scenario("all-on-prem-if-packed", "All on-prem, if behaviour changes",
                           f"Own enough GPUs for the peak of {_packed_words(c)}: the work fits on {n:,}.", 0.0, n,
                           c.own(n, c.packed), f"owned cost(ceil(peak {_PACKED}))", c.tl, what_if=True),
                 floor=0)


def _hybrid_if_packed(c: Context, built: Mapping[str, Built]) -> Built:
    fl = c.fl
    floor = latency_floor(c.m.latency_share, c.packed)
    rent_all = _sum(built["all-cloud-if-packed"].scenario.components)
    n = max(1, size(c.cfg, c.tl, c.packed, rent_all, c.power, fl.existing, fl.age_years, min_owned=floor).n_owning)
    bill, _k, over = c.rent(c.packed - n)
    return Built(_scenario("hybrid-if-packed", "Hybrid, if behaviour changes",
                           f"Own {_gpus(n)}{_floor_note(c.m, floor)}, rent {_packed_words(c)} above them.",
                           over, n, {**c.own(n, c.packed), **bill},
                           f"owned cost(N) + cloud cost(max({_PACKED} − N, 0))",
                           c.tl, what_if=True), floor=floor)


# The registry, in report order: the plans, then the "if behaviour changes" what-ifs (never counted as cheapest).
PLANS: tuple[tuple[str, _Builder], ...] = (
    ("stay-as-is", _stay_as_is), ("all-cloud", all_cloud), ("all-on-prem", _all_on_prem), ("hybrid", hybrid))
WHAT_IFS: tuple[tuple[str, _Builder], ...] = (
    ("all-cloud-if-packed", _all_cloud_if_packed), ("all-on-prem-if-packed", _all_on_prem_if_packed),
    ("hybrid-if-packed", _hybrid_if_packed))


def build(c: Context, *, what_if: bool = True) -> dict[str, Built]:
    """Every plan of the registry, in order (the what-ifs too unless `what_if` is False)."""
    built: dict[str, Built] = {}
    for sid, builder in (*PLANS, *(WHAT_IFS if what_if else ())):
        built[sid] = builder(c, built)
    return built
