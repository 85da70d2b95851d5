"""Cost scenarios over the horizon, break-even, hybrid sizing, sensitivity and the cost bootstrap: pure
functions of the config and what the trial measured (`Measured`), so the sensitivity analysis can rerun them
cheaply.

Demand is measured per 300 s bucket on the GPUs that reported; it is scaled to the whole fleet bucket by bucket
(× fleet capacity ÷ GPUs reporting), so nodes without data count like the nodes with data rather than as idle
(buckets where nothing reported are left out). The scaled series is a typical stretch of the horizon: every
month of the horizon is assumed to look like it (times the demand growth, if any).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuaudit.analysis import costs
from gpuaudit.analysis.config import Config, bounds
from gpuaudit.analysis.hybrid import Sizing, size
from gpuaudit.analysis.result import (
    BreakEvenCurveColumns,
    CostScenario,
    Deployment,
    Figure,
    GrowthColumns,
    Table,
    TableColumn,
    TornadoColumns,
)
from gpuaudit.util import fmt

SCENARIO_ORDER = ("stay-as-is", "all-cloud", "all-on-prem", "hybrid")
WHAT_IF_ORDER = ("all-cloud-if-packed", "all-on-prem-if-packed", "hybrid-if-packed")
OWNING = ("stay-as-is", "all-on-prem", "hybrid")  # scenarios that own GPUs (stay-as-is only when on-prem)
_CLOUD_PARTS = ("cloud_reserved", "cloud_flexible", "egress", "managed_services")

# What the sensitivity analysis moves: (section, key, label). Each is moved by ± analysis.sensitivity_fraction on
# its own, clamped to the range the config accepts for it (config.bounds).
PARAMETERS: tuple[tuple[str, str, str], ...] = (
    ("cloud", "instance_usd_per_hour", "cloud instance $/hour"),
    ("cloud", "spot_multiplier", "spot multiplier"),
    ("cloud", "reserved_multiplier", "reserved multiplier"),
    ("cloud", "spot_share", "spot share"),
    ("cloud", "spot_interruptions_per_hour", "spot interruptions/hour"),
    ("cloud", "egress_usd_per_gb", "egress $/GB"),
    ("cloud", "egress_gb_per_week", "egress GB/week"),
    ("cloud", "managed_services_usd_per_month", "managed services $/month"),
    ("on_prem", "hardware_usd_per_gpu", "hardware $/GPU"),
    ("on_prem", "amortization_years", "amortization years"),
    ("on_prem", "salvage_fraction", "salvage fraction"),
    ("on_prem", "staff_usd_per_month", "staff $/month"),
    ("on_prem", "staff_usd_per_node_per_month", "staff $/node/month"),
    ("on_prem", "space_usd_per_node_per_month", "space $/node/month"),
    ("on_prem", "power_usd_per_kwh", "power $/kWh"),
    ("on_prem", "pue", "PUE"),
    ("on_prem", "networking_usd", "networking $"),
    ("on_prem", "maintenance_fraction_per_year", "maintenance %/year"),
    ("on_prem", "owned_age_years", "age of owned GPUs"),
    ("analysis", "discount_rate_per_year", "discount rate/year"),
)


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


def fleet(cfg: Config, m: Measured) -> Fleet:
    configured = cfg.analysis.fleet_gpus
    elastic = _elastic_capacity(m)
    steady_seen = max(m.gpu_equivalents - m.elastic_equivalents, 0.0)
    seen = steady_seen + elastic
    physical = m.gpus_seen - m.elastic_gpus + math.ceil(elastic - 1e-6) if m.elastic_gpus else m.gpus_seen
    gpus = configured or max(1, physical)
    capacity = float(configured) if configured else max(seen, 1e-9)
    owned = cfg.on_prem.owned_gpus
    existing = owned if owned >= 0 else (gpus if m.current is Deployment.ON_PREM else 0)
    return Fleet(capacity, gpus, existing, cfg.on_prem.owned_age_years, min(elastic, capacity))


def latency_floor(share: float, series: np.ndarray) -> int:
    """The GPUs a plan serving `series` must own for its latency-sensitive `share` (which never bursts): the
    share's peak, whole GPUs; 0 when no work is latency-sensitive."""
    if share <= 0 or not series.size:
        return 0
    return max(1, math.ceil(float(series.max()) * share - 1e-9))


def _allowed(m: Measured, s: CostScenario, floor: int) -> bool:
    """Data that must stay rents nothing; latency-sensitive work runs on owned GPUs: a plan that rents is allowed
    only while it owns at least the latency floor of the demand it serves (all of it, at a share of 1)."""
    if not is_cloud_used(s):
        return True
    if m.data_residency:
        return False
    return m.latency_share <= 0 or (m.latency_share < 1 and s.owned_gpus >= floor)


def to_fleet(series: np.ndarray, reporting: np.ndarray, capacity: float) -> np.ndarray:
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
        return to_fleet(x, m.reporting, fl.capacity), ok
    steady_rep = np.maximum(m.reporting - m.elastic_reporting, 0.0)
    steady = np.maximum(x - elastic_part, 0.0)
    if fl.steady <= 1e-9:  # every GPU elastic: nothing to scale, no bucket unknown
        return np.asarray(elastic_part, dtype=float).copy(), np.ones(x.shape, dtype=bool)
    ok = steady_rep > 1e-9
    return steady[ok] * (fl.steady / steady_rep[ok]) + elastic_part[ok], ok


@dataclass(frozen=True)
class Plan:
    """The choices the scenarios made, fixed while the bootstrap resamples demand."""

    reserved_gpus: float  # all-cloud reservation
    stay_reserved_gpus: float  # stay-as-is: the reservation of what it rents (in the cloud, or above the owned)
    n_on_prem: int
    n_hybrid: int
    existing: int
    hybrid_reserved_gpus: float = 0.0  # the hybrid's reservation for its bursts


@dataclass(frozen=True)
class BreakEvenCalc:
    held: float | None  # u*: the billed-hour utilization at which renting costs the same as owning the reference
    measured_billed: float  # the billed-hour utilization: mean fleet-scaled billed GPUs ÷ fleet GPUs
    own_reference: str  # what renting is compared with
    own_usd: float
    cloud_usd: float
    verdict: str  # "cloud" or "on-prem": the cheaper of all-cloud and the reference
    rent_fixed_usd: float = 0.0  # renting's part that does not scale with demand (sell owned GPUs, egress…)
    rent_variable_usd: float = 0.0  # renting's compute bill at today's demand (k = 1)


@dataclass(frozen=True)
class CostBlock:
    timeline: costs.Timeline
    prices: costs.CloudPrices
    watts: float
    power_source: str
    owned_marginal: float  # a new GPU, $/h
    fleet: Fleet
    scenarios: tuple[CostScenario, ...]
    cheapest: str
    sizing: Sizing
    break_even: BreakEvenCalc
    plan: Plan
    held: np.ndarray  # fleet-scaled held series (with growth)
    day: np.ndarray  # day of each kept bucket
    pack_factor: float
    power: costs.PowerModel | None = None  # watts per owned GPU by load (None: flat `watts`)


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


def cost_block(cfg: Config, m: Measured, growth: float = 0.0, *, what_if: bool = True) -> CostBlock:
    tl = costs.timeline(cfg)
    fl = fleet(cfg, m)
    f = tl.mean_growth(growth) if growth else 1.0
    prices = costs.cloud_prices(cfg)
    power, power_source = costs.power_model(cfg, m.measured_w, m.idle_w, m.held_w)
    watts = power.average_w
    held, ok = fleet_series(m, fl, m.held, m.elastic_held)
    held = held * f
    # Every plan, owning or renting, serves `held`: the demand the cloud bills.
    day = m.day[ok]

    def own(n: float, series: np.ndarray | None = None) -> dict[str, float]:
        """Owning n GPUs that serve `series` (held demand by default): each plan's power is what the GPUs it
        keeps draw at the load they carry."""
        w = power.watts(held if series is None else series, float(n))
        return _first(costs.owned_cost(cfg, tl, float(n), w, fl.existing, fl.age_years))

    out: list[CostScenario] = []
    # stay as is
    if m.current is Deployment.ON_PREM:
        bill, stay_k, over = _cloud_of(cfg, tl, held - fl.existing, prices)
        out.append(_scenario(
            "stay-as-is", "Stay as is (on-prem)",
            f"Keep the {fl.existing} GPUs owned today (their purchase is sunk: only running costs and the value "
            "they lose count); rent demand above them.",
            over, fl.existing, {**own(fl.existing), **bill},
            "owned cost(GPUs owned today) + cloud cost(demand above them)", tl))
    else:
        # The instances that ran, scaled to the fleet like the demand they carry: a GPU that did not report is
        # taken to run like those that did (so held demand never exceeds what is rented).
        running = fleet_series(m, fl, m.reporting, m.elastic_reporting)[0] * f
        bill, stay_k, mean_billed = _cloud_of(cfg, tl, running, prices)
        kept = f"; keep the {fl.existing} GPUs owned today as they are" if fl.existing else ""
        out.append(_scenario(
            "stay-as-is", "Stay as is (cloud)",
            "Keep renting the fleet's instances for all the time they ran (GPUs reporting, scaled to the fleet), "
            f"with the configured mix{kept}.", mean_billed, fl.existing, {**own(fl.existing), **bill},
            "cloud cost(GPUs running, fleet-scaled) + owned cost(GPUs owned today)", tl))
    # all cloud
    bill, k_all, mean_billed = _cloud_of(cfg, tl, held, prices)
    all_cloud = {**own(0), **bill}
    sold = f"; sell the {fl.existing} owned GPUs now" if fl.existing else ""
    # One rule for "behaviour change": a plan that needs the team to hold GPUs differently from today is shown,
    # never counted as cheapest. A cloud fleet renting only the held hours must release the instances it keeps
    # running idle: that is a change of behaviour (autoscaling), not a move to the cloud it is already in.
    releases = (m.current is Deployment.CLOUD and out
                and mean_billed < out[0].cloud_gpu_hours / (costs.HOURS_PER_MONTH * tl.months) * (1 - 1e-6))
    reserving = f"reserving {k_all:,.1f} GPUs 24/7, the rest flexibly" if k_all > 0 else "flexibly"
    if releases:
        out.append(_scenario("all-cloud", "All cloud, releasing idle instances",
                             f"Rent only the GPU-hours jobs hold ({reserving}): release instances no job holds "
                             f"(autoscaling){sold}. A change of behaviour: never counted as cheapest.",
                             mean_billed, 0, all_cloud, "cloud cost(held demand) (owned GPUs sold today)", tl,
                             what_if=True))
    else:
        out.append(_scenario("all-cloud", "All cloud", f"Rent the GPU-hours jobs hold ({reserving}){sold}.",
                             mean_billed, 0, all_cloud, "cloud cost(held demand) (owned GPUs sold today)", tl))
    # all on-prem
    n_peak = max(1, math.ceil(float(held.max()) - 1e-9)) if held.size else 1
    out.append(_scenario("all-on-prem", "All on-prem", f"Own enough GPUs for peak demand ({n_peak}).", 0.0, n_peak,
                         own(n_peak), "owned cost(ceil(peak demand))", tl))
    # hybrid
    floor = latency_floor(m.latency_share, held)
    sizing = size(cfg, tl, held, _sum(all_cloud), power, fl.existing, fl.age_years, min_owned=floor)
    n_h = max(1, sizing.n_owning)
    bill_h, k_h, over_h = _cloud_of(cfg, tl, held - n_h, prices)
    note = " (no demand above them: the same as all on-prem)" if over_h <= 1e-12 else ""
    how = f"reserving {k_h:,.1f} GPUs 24/7, the rest flexibly" if k_h > 0 else "flexibly"
    out.append(_scenario("hybrid", "Hybrid", f"Own {_gpus(n_h)} for the steady base{_floor_note(m, floor)}, rent "
                         f"demand above them {how}{note}.", over_h, n_h, {**own(n_h), **bill_h},
                         "owned cost(N) + cloud cost(max(demand − N, 0)), N = best N ≥ 1", tl))
    # if behaviour changes
    pack = min(m.s / cfg.cloud.right_size_target_efficiency, m.r) / m.r if m.r > 0 else 1.0
    if what_if:
        eff = cfg.cloud.right_size_target_efficiency
        held_p = held * pack
        bill_p, _kp, mean_p = _cloud_of(cfg, tl, held_p, prices)
        out.append(_scenario("all-cloud-if-packed", "All cloud, if behaviour changes",
                             f"Rent only held hours that do work: held demand × {pack:.2f} (real ÷ {eff:.0%} target "
                             "efficiency).", mean_p, 0, {**own(0), **bill_p},
                             "cloud cost(held demand × min(S / efficiency, R) / R)", tl, what_if=True))
        n_pp = max(1, math.ceil(float(held_p.max()) - 1e-9)) if held_p.size else 1
        out.append(_scenario("all-on-prem-if-packed", "All on-prem, if behaviour changes",
                             f"Own enough GPUs for the peak of held demand × {pack:.2f} ({n_pp}).", 0.0, n_pp,
                             own(n_pp, held_p),
                             "owned cost(ceil(peak demand × pack factor))", tl, what_if=True))
        floor_p = latency_floor(m.latency_share, held_p)
        sz_p = size(cfg, tl, held_p, _sum({**own(0), **bill_p}), power, fl.existing, fl.age_years,
                    min_owned=floor_p)
        n_hp = max(1, sz_p.n_owning)
        bill_hp, _khp, over_hp = _cloud_of(cfg, tl, held_p - n_hp, prices)
        out.append(_scenario("hybrid-if-packed", "Hybrid, if behaviour changes",
                             f"Own {_gpus(n_hp)}{_floor_note(m, floor_p)}, rent held demand × {pack:.2f} above them.",
                             over_hp, n_hp,
                             {**own(n_hp, held_p), **bill_hp},
                             "owned cost(N) + flexible cloud cost above N", tl, what_if=True))
    out = [_with_power(cfg, tl, s) for s in out]
    if m.data_residency or m.latency_share > 0:  # data that must stay, or latency-bound work, limit renting
        packed = latency_floor(m.latency_share, held * pack)
        floors = {"all-cloud-if-packed": packed, "all-on-prem-if-packed": 0, "hybrid-if-packed": packed}
        out = [dataclasses.replace(s, allowed=_allowed(m, s, floors.get(s.id, floor))) for s in out]
    out = _with_cash(cfg, tl, out, fl, payback_against(m.current, out))
    cheapest = cheapest_of(out)
    plan = Plan(k_all, stay_k, n_peak, n_h, fl.existing, k_h)
    reserved = {"stay-as-is": stay_k, "all-cloud": k_all, "hybrid": k_h}
    out = [dataclasses.replace(s, reserved_gpus=float(reserved.get(s.id, 0.0))) for s in out]
    be = _break_even(cfg, tl, m, fl, held, power, all_cloud)
    return CostBlock(tl, prices, watts, power_source, costs.owned_marginal_per_hour(cfg, tl, watts), fl, tuple(out),
                     cheapest, sizing, be, plan, held, day, pack, power)


def _with_power(cfg: Config, tl: costs.Timeline, s: CostScenario) -> CostScenario:
    """The scenario with the board power per owned GPU its power cost was priced at."""
    o = cfg.on_prem
    per_w = s.owned_gpus * o.pue * o.power_usd_per_kwh * costs.HOURS_PER_MONTH / 1000.0 * tl.annuity
    if s.owned_gpus <= 0 or per_w <= 0:
        return s
    return dataclasses.replace(s, power_w_per_gpu=s.components.get("power", 0.0) / per_w)


_MONTHLY = ("power", "maintenance", "staff", "space", "cloud_reserved", "cloud_flexible", "egress")


def _cash(cfg: Config, tl: costs.Timeline, s: CostScenario, owned_value: float) -> tuple[np.ndarray, float, np.ndarray]:
    """(cash per month, capex, cash per month without resale) of a scenario, from its present-value components:
    monthly items are level (PV ÷ annuity), month-0 items are paid at once (capital bought up front, managed
    services' one-off), the GPUs it sells now bring their value back in month 0 (`owned_value`: all owned GPUs at
    today's value; keeping one pays nothing), spread capital is paid in instalments over its life, resale comes
    back in the last month."""
    o, c = cfg.on_prem, s.components
    months = max(tl.months, 1)
    cash = np.zeros(months)
    level = sum(c.get(k, 0.0) for k in _MONTHLY) + c.get("managed_services", 0.0) - (
        cfg.cloud.managed_services_usd_once if is_cloud_used(s) else 0.0)
    cash += level / tl.annuity if tl.annuity else 0.0
    sold = owned_value - c.get("owned_value_kept", 0.0)  # the PV model charges keeping; cash receives selling
    cash[0] += -sold + (cfg.cloud.managed_services_usd_once if is_cloud_used(s) else 0.0)
    capex = 0.0
    for key, life in (("hardware", o.amortization_years), ("networking", o.networking_amortization_years)):
        pv = c.get(key, 0.0)
        if pv <= 0:
            continue
        if o.capex_timing == "spread" and life > 0:
            span = min(months, round(life * 12))
            per = pv / tl.annuity_for(life * 12.0)
            cash[:span] += per
            capex += per * life * 12
        else:
            cash[0] += pv
            capex += pv
    without_resale = cash.copy()
    cash[-1] += c.get("residual_value", 0.0) / tl.end if tl.end else 0.0
    return cash, capex, without_resale


def _payback(plan: np.ndarray, rent: np.ndarray) -> float | None:
    """Months until the plan's cumulative cash falls to renting's (linear within the month), or None."""
    gap = np.cumsum(plan - rent)  # > 0: the plan has spent more so far
    if gap.size == 0 or gap[-1] > 0:
        return None
    i = int(np.argmax(gap <= 0))
    before = gap[i - 1] if i > 0 else 0.0
    step = before - gap[i]
    return float(i + (before / step if step > 0 else 0.0))


def payback_against(current: Deployment, scenarios: list[CostScenario] | tuple[CostScenario, ...]) -> str:
    """The renting plan a purchase pays back against ("" for none): what the fleet pays today when it rents
    (today's bill is a fact, whatever may be chosen next: all cloud there may be a change of behaviour, or not
    allowed); renting everything when it is owned, if renting everything is allowed (under data residency or
    latency-bound work a payback against a plan nobody may choose means nothing)."""
    if current is Deployment.CLOUD:
        return "stay-as-is"
    return "all-cloud" if any(s.id == "all-cloud" and s.allowed for s in scenarios) else ""


def _with_cash(cfg: Config, tl: costs.Timeline, out: list[CostScenario], fl: Fleet, against: str
               ) -> list[CostScenario]:
    owned_value = fl.existing * cfg.on_prem.hardware_usd_per_gpu * costs.resale_value(cfg, fl.age_years)
    cash = {s.id: _cash(cfg, tl, s, owned_value) for s in out}
    rent = cash.get(against) if against else None
    done = []
    for s in out:
        flows, capex, plain = cash[s.id]
        payback = _payback(plain, rent[2]) if rent is not None and s.components.get("hardware", 0.0) > 0 else None
        done.append(dataclasses.replace(s, cash_usd_by_month=tuple(float(x) for x in flows), capex_usd=capex,
                                        payback_months=payback))
    return done


def cheapest_of(scenarios: list[CostScenario] | tuple[CostScenario, ...]) -> str:
    """The cheapest allowed scenario (what-if scenarios never count); ties go to the earlier one."""
    pool = [s for s in scenarios if s.allowed and not s.what_if]
    return min(pool, key=lambda s: (round(s.total.value or 0.0, 2), SCENARIO_ORDER.index(s.id))).id


def _break_even(cfg: Config, tl: costs.Timeline, m: Measured, fl: Fleet, held: np.ndarray,
                power: costs.PowerModel, all_cloud: dict[str, float]) -> BreakEvenCalc:
    """The billed-hour utilization u* at which renting k × today's billed demand (its bill scaled by k) costs the
    same as owning the whole fleet: keeping the GPUs owned today and buying the rest.

    Renting is linear in k: the fixed part (egress, managed services, selling the owned GPUs) plus k × the
    compute bill. Scaling the bill, not the demand, keeps instance billing from turning u* into the point where
    one more instance-hour tips the sum."""
    n_ref = fl.gpus
    ref = ("buy-the-fleet" if fl.existing == 0 else "keep-the-owned-fleet" if fl.existing == fl.gpus else
           "keep-owned-and-buy-the-rest" if fl.existing < fl.gpus else "keep-the-fleet-sell-the-rest")
    watts = power.watts(held, float(n_ref))
    own_ref = float(costs.owned_total(costs.owned_cost(cfg, tl, float(n_ref), watts, fl.existing,
                                                       fl.age_years))[0])
    own_zero = float(costs.owned_total(costs.owned_cost(cfg, tl, 0.0, watts, fl.existing, fl.age_years))[0])
    # the billed-hour utilization (utilization.billed_utilization): fleet-scaled, as the plans are costed
    measured = float(held.mean()) / fl.capacity if held.size else 0.0
    all_cloud_usd = _sum(all_cloud)
    # data residency forbids renting: owning is the only answer, whatever u* says
    verdict = ("cloud" if all_cloud_usd < own_ref and not (m.data_residency or m.latency_share > 0)
               else "on-prem")
    variable = all_cloud["cloud_reserved"] + all_cloud["cloud_flexible"]  # the all-cloud scenario's compute bill
    fixed = own_zero + _sum(costs.cloud_fixed(cfg, tl))
    if measured <= 0 or variable <= 1e-9:
        return BreakEvenCalc(None, measured, ref, own_ref, all_cloud_usd, verdict, fixed, variable)
    k = (own_ref - fixed) / variable
    return BreakEvenCalc(max(k, 0.0) * measured, measured, ref, own_ref, all_cloud_usd, verdict, fixed, variable)


BREAK_EVEN_GRID = tuple(i / 100 for i in range(0, 101, 2))  # held-hour utilizations the curve is drawn at


def break_even_curve(b: BreakEvenCalc, fleet_gpus: int, horizon_months: int) -> Table:
    """Renting and owning per fleet GPU-year (present value) against held-hour utilization: renting k × today's
    held demand costs fixed + k × compute, owning the fleet costs the same at any utilization, and the two meet
    at u*. No rows when there is no finite break-even (nothing measured, or nothing to rent)."""
    c = BreakEvenCurveColumns
    rows: tuple[dict[str, float], ...] = ()
    if b.held is not None and math.isfinite(b.held) and b.own_usd and fleet_gpus:
        years = horizon_months / 12
        owned = b.own_usd / fleet_gpus / years
        per = fleet_gpus * years
        rows = tuple(
            {c.BILLED_UTILIZATION: x,
             c.CLOUD_USD_PER_GPU_YEAR: (b.rent_fixed_usd + b.rent_variable_usd * x / b.measured_billed) / per
             if b.measured_billed > 0 else b.rent_fixed_usd / per,
             c.OWNED_USD_PER_GPU_YEAR: owned}
            for x in BREAK_EVEN_GRID
        )
    cols = (
        TableColumn(c.BILLED_UTILIZATION, "fraction", "share of the fleet's hours held by jobs"),
        TableColumn(c.CLOUD_USD_PER_GPU_YEAR, "USD", "renting: (fixed part + compute bill × this utilization ÷ "
                    "the measured one) ÷ fleet GPUs ÷ years"),
        TableColumn(c.OWNED_USD_PER_GPU_YEAR, "USD", f"owning ({b.own_reference}): its total ÷ fleet GPUs ÷ years"),
    )
    return Table("break_even_curve", "Renting and owning per fleet GPU-year (present value) by held-hour "
                 "utilization.", cols, rows, "cost model × fleet-scaled demand")


def total_of(block: CostBlock, sid: str) -> float:
    return float(next(s.total.value for s in block.scenarios if s.id == sid) or 0.0)


def best_owning(block: CostBlock) -> CostScenario:
    """The cheapest allowed scenario that owns GPUs (stay-as-is counts only when today's fleet is owned)."""
    pool = [s for s in block.scenarios if s.id in OWNING and s.allowed and not s.what_if and s.owned_gpus > 0]
    return min(pool, key=lambda s: (s.total.value or 0.0, SCENARIO_ORDER.index(s.id)))


def cloud_minus_own(block: CostBlock) -> float:
    return total_of(block, "all-cloud") - float(best_owning(block).total.value or 0.0)


def _moved(cfg: Config, section: str, key: str, value: float, lo: float, hi: float) -> tuple[Config, float]:
    value = min(max(value, lo), hi)
    if section == "cloud" and key == "spot_share":  # the shares must still add up to at most 1
        value = min(value, 1.0 - cfg.cloud.reserved_share - cfg.cloud.capacity_block_share)
    return cfg.replace(section, **{key: value}), value


def _within(u: float | None) -> float | None:
    """A break-even above 100 % held is "never" (renting wins even fully held), as everywhere else."""
    return None if u is None or u > 1.0 else u


def same_plan(a: CostScenario, b: CostScenario) -> bool:
    """Two scenarios that own the same GPUs and rent the same GPU-hours are one plan under two names (staying
    with 8 owned GPUs, and all on-prem at a peak of 8)."""
    hours = max(abs(a.cloud_gpu_hours), abs(b.cloud_gpu_hours), 1.0)
    return a.owned_gpus == b.owned_gpus and abs(a.cloud_gpu_hours - b.cloud_gpu_hours) <= 1e-6 * hours


def margin(block: CostBlock, plan: str) -> tuple[float, float | None]:
    """(the cost of `plan`, the cheapest different allowed plan's cost − it) in `block`: a margin above 0 means
    `plan` is still the cheapest. Both move the right way with each input: a dearer cloud raises a plan that
    rents. The same plan under another name is no runner-up (its margin would be 0 whatever the input); None
    when no allowed plan differs from it."""
    own = total_of(block, plan)
    me = next(s for s in block.scenarios if s.id == plan)
    others = [float(s.total.value or 0.0) for s in block.scenarios
              if s.allowed and not s.what_if and s.id != plan and not same_plan(s, me)]
    return own, (min(others) - own if others else None)


def tornado(cfg: Config, m: Measured, fraction: float, base: CostBlock | None = None, plan: str | None = None
            ) -> Table:
    """Each input ±fraction on its own. `plan`: the recommended plan (default: the cheapest; after a tie,
    staying as is), whose cost and margin over the cheapest different allowed plan the rows carry."""
    T = TornadoColumns
    base = base or cost_block(cfg, m, what_if=False)
    base_diff = cloud_minus_own(base)
    plan = plan or base.cheapest
    base_plan, base_margin = margin(base, plan)
    rows: list[dict[str, Any]] = []
    for section, key, label in PARAMETERS:
        lo, hi = bounds(section, key)
        value = float(getattr(getattr(cfg, section), key))
        if value == 0:
            continue  # a share of nothing moves nothing
        ends: dict[str, tuple[CostBlock, float]] = {}
        for side, mult in (("low", 1 - fraction), ("high", 1 + fraction)):
            moved, used = _moved(cfg, section, key, value * mult, lo, hi)
            ends[side] = (cost_block(moved, m, what_if=False), used)
        (lb, lv), (hb, hv) = ends["low"], ends["high"]
        lo_diff, hi_diff = cloud_minus_own(lb), cloud_minus_own(hb)
        (lo_plan, lo_margin), (hi_plan, hi_margin) = margin(lb, plan), margin(hb, plan)
        rows.append({
            T.PARAMETER: label, T.KEY: f"{section}.{key}", T.BASE_VALUE: value, T.LOW_VALUE: lv, T.HIGH_VALUE: hv,
            T.BASE_DIFF_USD: base_diff, T.LOW_DIFF_USD: lo_diff, T.HIGH_DIFF_USD: hi_diff,
            T.PLAN: plan, T.BASE_PLAN_USD: base_plan, T.LOW_PLAN_USD: lo_plan, T.HIGH_PLAN_USD: hi_plan,
            T.BASE_MARGIN_USD: base_margin, T.LOW_MARGIN_USD: lo_margin, T.HIGH_MARGIN_USD: hi_margin,
            # An end without a different allowed plan has no runner-up: 0 there (nothing else competes); without
            # one at either end the margin says nothing and the swing is the plan's own cost's.
            T.SWING_USD: abs((hi_margin or 0.0) - (lo_margin or 0.0)) if not (hi_margin is None and lo_margin is None)
            else abs(hi_plan - lo_plan),
            T.CHEAPEST_LOW: lb.cheapest, T.CHEAPEST_HIGH: hb.cheapest,
            T.BREAK_EVEN_LOW: _within(lb.break_even.held), T.BREAK_EVEN_HIGH: _within(hb.break_even.held),
            T.CHANGES_CHEAPEST: lb.cheapest != base.cheapest or hb.cheapest != base.cheapest,
        })
    rows.sort(key=lambda r: (-r[T.SWING_USD], r[T.PARAMETER]))
    pct = f"{fraction:.0%}"
    cols = (
        TableColumn(T.PARAMETER, "", "input moved"), TableColumn(T.KEY, "", "config key"),
        TableColumn(T.BASE_VALUE, "", "configured value"),
        TableColumn(T.LOW_VALUE, "", f"value × {1 - fraction:g} (clamped to its range)"),
        TableColumn(T.HIGH_VALUE, "", f"value × {1 + fraction:g} (clamped to its range)"),
        TableColumn(T.BASE_DIFF_USD, "USD", "all-cloud − cheapest owning scenario, configured inputs"),
        TableColumn(T.LOW_DIFF_USD, "USD", "all-cloud − cheapest owning scenario, this input low"),
        TableColumn(T.HIGH_DIFF_USD, "USD", "all-cloud − cheapest owning scenario, this input high"),
        TableColumn(T.PLAN, "", "the recommended (cheapest) plan at the configured inputs"),
        TableColumn(T.BASE_PLAN_USD, "USD", "its cost, configured inputs"),
        TableColumn(T.LOW_PLAN_USD, "USD", "its cost, this input low"),
        TableColumn(T.HIGH_PLAN_USD, "USD", "its cost, this input high"),
        TableColumn(T.BASE_MARGIN_USD, "USD", "the cheapest different allowed plan − it, configured inputs (> 0: it "
                    "is cheapest; empty: no allowed plan differs from it)"),
        TableColumn(T.LOW_MARGIN_USD, "USD", "the cheapest different allowed plan − it, this input low"),
        TableColumn(T.HIGH_MARGIN_USD, "USD", "the cheapest different allowed plan − it, this input high"),
        TableColumn(T.SWING_USD, "USD", "|high margin − low margin| (without margins: |high cost − low cost|)"),
        TableColumn(T.CHEAPEST_LOW, "", "cheapest allowed scenario, this input low"),
        TableColumn(T.CHEAPEST_HIGH, "", "cheapest allowed scenario, this input high"),
        TableColumn(T.BREAK_EVEN_LOW, "fraction", "break-even held-hour utilization, this input low (empty: never)"),
        TableColumn(T.BREAK_EVEN_HIGH, "fraction", "break-even held-hour utilization, this input high (empty: never)"),
        TableColumn(T.CHANGES_CHEAPEST, "", "the cheapest scenario changes at either end"),
    )
    return Table("tornado", f"Each input ±{pct} on its own: the recommended plan's cost and its margin over the "
                 "runner-up (positive: it stays the cheapest), and all-cloud − the cheapest owning plan (positive: "
                 "owning is cheaper); inputs set to 0 are left out.", cols, tuple(rows), "cost model rerun per input")


def growth_table(cfg: Config, m: Measured, rates: tuple[float, ...]) -> Table:
    G = GrowthColumns
    rows = []
    tl = costs.timeline(cfg)
    for g in rates:
        b = cost_block(cfg, m, growth=g, what_if=False)
        row: dict[str, object] = {G.GROWTH_PER_YEAR: g, G.DEMAND_FACTOR: tl.mean_growth(g)}
        for s in b.scenarios:
            row[G.scenario_usd(s.id)] = s.total.value
        row[G.CHEAPEST] = b.cheapest
        row[G.HYBRID_GPUS] = b.plan.n_hybrid
        rows.append(row)
    cols = (
        TableColumn(G.GROWTH_PER_YEAR, "fraction", "demand growth per year"),
        TableColumn(G.DEMAND_FACTOR, "", "demand multiplier averaged over the horizon (months weighted by discount)"),
        *(TableColumn(G.scenario_usd(sid), "USD", f"present value of scenario {sid}") for sid in SCENARIO_ORDER),
        TableColumn(G.CHEAPEST, "", "cheapest allowed scenario"),
        TableColumn(G.HYBRID_GPUS, "GPUs", "GPUs the hybrid scenario owns (best N ≥ 1) at this growth"),
    )
    return Table("growth", "Scenario totals when demand grows (average multiplier over the horizon).", cols,
                 tuple(rows), "cost model rerun per growth rate")


def with_egress(cfg: Config, egress_gb_per_week: float | None) -> Config:
    if egress_gb_per_week is None:
        return cfg
    return cfg.replace("cloud", egress_gb_per_week=float(egress_gb_per_week))


# ------------------------------------------------------------------------------------------ cost bootstrap


@dataclass(frozen=True)
class CostDraws:
    """Scenario totals per resample with the point estimate's plan held fixed."""

    ids: tuple[str, ...]
    totals: np.ndarray  # resamples × scenarios


def cost_draws(cfg: Config, m: Measured, block: CostBlock, idx: np.ndarray, days: np.ndarray) -> CostDraws:
    """Totals of the point estimate's scenarios (same reservation, same owned counts) when whole days are
    resampled: `idx` (resamples × n) indexes `days` (the distinct UTC days). Everything a plan pays per
    bucket is summed per day, so a resample is a sum of day totals."""
    tl, prices, plan = block.timeline, block.prices, block.plan
    held = block.held
    fl = block.fleet
    unit = prices.unit
    per_bucket = {
        "all-cloud": np.maximum(costs.billable(held, unit) - plan.reserved_gpus, 0.0),
        "hybrid": np.maximum(costs.billable(held - plan.n_hybrid, unit) - plan.hybrid_reserved_gpus, 0.0),
    }
    if m.current is Deployment.ON_PREM:
        per_bucket["stay-as-is"] = np.maximum(costs.billable(held - plan.existing, unit) - plan.stay_reserved_gpus,
                                              0.0)
    else:
        running = fleet_series(m, fl, m.reporting, m.elastic_reporting)[0]
        per_bucket["stay-as-is"] = np.maximum(costs.billable(running, unit) - plan.stay_reserved_gpus, 0.0)
    pos = np.searchsorted(days, block.day)
    counts = np.bincount(pos, minlength=len(days)).astype(float)
    sums = {k: np.bincount(pos, weights=v, minlength=len(days)) for k, v in per_bucket.items()}
    n_draw = counts[idx].sum(axis=1)
    n_draw[n_draw <= 0] = np.nan
    means = {k: v[idx].sum(axis=1) / n_draw for k, v in sums.items()}

    def own(n: float) -> float:
        w = block.power.watts(held, float(n)) if block.power is not None else block.watts
        return float(costs.owned_total(costs.owned_cost(cfg, tl, float(n), w, fl.existing,
                                                        fl.age_years))[0])

    fixed = sum(costs.cloud_fixed(cfg, tl).values())
    per_gpu_flex = costs.HOURS_PER_MONTH * prices.flexible * tl.annuity
    per_gpu_res = costs.HOURS_PER_MONTH * prices.reserved * tl.annuity

    def bill(reserved: float, flex: np.ndarray) -> np.ndarray:
        used = (flex > 1e-12) | (reserved > 1e-12)
        return reserved * per_gpu_res + flex * per_gpu_flex + np.where(used, fixed, 0.0)

    ids, cols = [], []
    for s in block.scenarios:
        if s.what_if and s.id != "all-cloud":  # all cloud stays: the cost difference is measured against it
            continue
        if s.id == "all-cloud":
            v = own(0) + bill(plan.reserved_gpus, means["all-cloud"])
        elif s.id == "hybrid":
            v = own(plan.n_hybrid) + bill(plan.hybrid_reserved_gpus, means["hybrid"])
        elif s.id == "stay-as-is":
            v = own(plan.existing) + bill(plan.stay_reserved_gpus, means["stay-as-is"])
        else:  # all-on-prem: owned, demand-independent
            v = np.full(idx.shape[0], float(s.total.value or 0.0))
        ids.append(s.id)
        cols.append(v)
    return CostDraws(tuple(ids), np.column_stack(cols))
