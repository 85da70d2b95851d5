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
from gpuaudit.analysis.hybrid import Sizing, overflow_mean, size
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


@dataclass(frozen=True)
class Fleet:
    capacity: float  # GPU equivalents of the whole fleet: demand is scaled to it
    gpus: int  # physical GPUs of the whole fleet
    existing: int  # GPUs owned today
    age_years: float  # their age


def fleet(cfg: Config, m: Measured) -> Fleet:
    configured = cfg.analysis.fleet_gpus
    gpus = configured or max(1, m.gpus_seen)
    capacity = float(configured) if configured else max(m.gpu_equivalents, 1e-9)
    owned = cfg.on_prem.owned_gpus
    existing = owned if owned >= 0 else (gpus if m.current is Deployment.ON_PREM else 0)
    return Fleet(capacity, gpus, existing, cfg.on_prem.owned_age_years)


def to_fleet(series: np.ndarray, reporting: np.ndarray, capacity: float) -> np.ndarray:
    """Scale a per-bucket series measured on the GPUs that reported to the whole fleet; buckets where nothing
    reported are dropped (unknown, not idle)."""
    ok = reporting > 1e-9
    return np.asarray(series, dtype=float)[ok] * (capacity / reporting[ok])


@dataclass(frozen=True)
class Plan:
    """The choices the scenarios made, fixed while the bootstrap resamples demand."""

    reserved_gpus: float  # all-cloud reservation
    stay_reserved_gpus: float  # stay-as-is in the cloud: its reservation
    n_on_prem: int
    n_hybrid: int
    existing: int


@dataclass(frozen=True)
class BreakEvenCalc:
    held: float | None  # held-hour utilization at which renting costs the same as owning the reference
    measured_held: float  # the trial's held-hour utilization, fleet-scaled
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


def _gpus(n: int) -> str:
    return f"{n:,} GPU" + ("" if n == 1 else "s")


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
    """(bill, reservation K, mean GPUs billed) for renting `series` with the configured mix. With whole-instance
    billing the reservation covering the configured share may overshoot it by most of an instance (one 8-GPU
    instance reserved 24/7 for a job that runs a fifth of the time): one instance fewer is taken when cheaper."""
    billed = costs.billable(series, prices.unit)
    k = costs.reserved_capacity(billed, cfg.cloud.reserved_share, prices.unit)
    options = [k, k - prices.unit] if prices.unit > 1 and k >= prices.unit else [k]
    bills = [costs.cloud_bill(cfg, tl, kk, float(np.maximum(billed - kk, 0.0).mean()) if billed.size else 0.0)
             for kk in options]
    i = min(range(len(options)), key=lambda j: bills[j]["cloud_reserved"] + bills[j]["cloud_flexible"])
    return bills[i], options[i], float(billed.mean()) if billed.size else 0.0


def cost_block(cfg: Config, m: Measured, growth: float = 0.0, *, what_if: bool = True) -> CostBlock:
    tl = costs.timeline(cfg)
    fl = fleet(cfg, m)
    f = tl.mean_growth(growth) if growth else 1.0
    prices = costs.cloud_prices(cfg)
    watts, power_source = costs.power_watts(cfg, m.measured_w)
    ok = m.reporting > 1e-9
    held = to_fleet(m.held, m.reporting, fl.capacity) * f
    # Every plan, owning or renting, serves `held`: the demand the cloud bills.
    day = m.day[ok]

    def own(n: float) -> dict[str, float]:
        return _first(costs.owned_cost(cfg, tl, float(n), watts, fl.existing, fl.age_years))

    def flex_bill(mean_gpus: float) -> dict[str, float]:
        return costs.cloud_bill(cfg, tl, 0.0, mean_gpus)

    out: list[CostScenario] = []
    # stay as is
    if m.current is Deployment.ON_PREM:
        over = float(overflow_mean(held, np.array([float(fl.existing)]), prices.unit)[0])
        out.append(_scenario(
            "stay-as-is", "Stay as is (on-prem)",
            f"Keep the {fl.existing} GPUs owned today (their purchase is sunk: only running costs and the value "
            "they lose count); rent demand above them.",
            over, fl.existing, {**own(fl.existing), **flex_bill(over)},
            "owned cost(GPUs owned today) + flexible cloud cost(demand above them)", tl))
        stay_k = 0.0
    else:
        # The instances that ran, scaled to the fleet like the demand they carry: a GPU that did not report is
        # taken to run like those that did (so held demand never exceeds what is rented).
        running = to_fleet(m.reporting, m.reporting, fl.capacity) * f
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
    out.append(_scenario("all-cloud", "All cloud",
                         f"Rent the GPU-hours jobs hold (reserving {k_all:,.1f} GPUs 24/7, the rest flexibly){sold}.",
                         mean_billed, 0, all_cloud, "cloud cost(held demand) (owned GPUs sold today)", tl))
    # all on-prem
    n_peak = max(1, math.ceil(float(held.max()) - 1e-9)) if held.size else 1
    out.append(_scenario("all-on-prem", "All on-prem", f"Own enough GPUs for peak demand ({n_peak}).", 0.0, n_peak,
                         own(n_peak), "owned cost(ceil(peak demand))", tl))
    # hybrid
    sizing = size(cfg, tl, held, _sum(all_cloud), watts, fl.existing, fl.age_years)
    n_h = max(1, sizing.n_owning)
    over_h = float(overflow_mean(held, np.array([float(n_h)]), prices.unit)[0])
    note = " (no demand above them: the same as all on-prem)" if over_h <= 1e-12 else ""
    out.append(_scenario("hybrid", "Hybrid", f"Own {_gpus(n_h)} for the steady base, rent demand above them "
                         f"flexibly{note}.", over_h, n_h, {**own(n_h), **flex_bill(over_h)},
                         "owned cost(N) + flexible cloud cost(Σ max(demand − N, 0)), N = best N ≥ 1", tl))
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
                             f"Own enough GPUs for the packed peak ({n_pp}).", 0.0, n_pp, own(n_pp),
                             "owned cost(ceil(peak demand × pack factor))", tl, what_if=True))
        sz_p = size(cfg, tl, held_p, _sum({**own(0), **bill_p}), watts, fl.existing, fl.age_years)
        n_hp = max(1, sz_p.n_owning)
        over_hp = float(overflow_mean(held_p, np.array([float(n_hp)]), prices.unit)[0])
        out.append(_scenario("hybrid-if-packed", "Hybrid, if behaviour changes",
                             f"Own {_gpus(n_hp)}, rent the packed demand above them.", over_hp, n_hp,
                             {**own(n_hp), **flex_bill(over_hp)}, "owned cost(N) + flexible cloud cost above N", tl,
                             what_if=True))
    if m.data_residency:
        out = [dataclasses.replace(s, allowed=not is_cloud_used(s)) for s in out]
    cheapest = cheapest_of(out)
    plan = Plan(k_all, stay_k, n_peak, n_h, fl.existing)
    be = _break_even(cfg, tl, m, fl, held, watts, all_cloud)
    return CostBlock(tl, prices, watts, power_source, costs.owned_marginal_per_hour(cfg, tl, watts), fl, tuple(out),
                     cheapest, sizing, be, plan, held, day, pack)


def cheapest_of(scenarios: list[CostScenario] | tuple[CostScenario, ...]) -> str:
    """The cheapest allowed scenario (what-if scenarios never count); ties go to the earlier one."""
    pool = [s for s in scenarios if s.allowed and not s.what_if]
    return min(pool, key=lambda s: (round(s.total.value or 0.0, 2), SCENARIO_ORDER.index(s.id))).id


def _break_even(cfg: Config, tl: costs.Timeline, m: Measured, fl: Fleet, held: np.ndarray, watts: float,
                all_cloud: dict[str, float]) -> BreakEvenCalc:
    """The held-hour utilization u* at which renting k × today's held demand (its bill scaled by k) costs the
    same as owning the whole fleet: keeping the GPUs owned today and buying the rest.

    Renting is linear in k: the fixed part (egress, managed services, selling the owned GPUs) plus k × the
    compute bill. Scaling the bill, not the demand, keeps instance billing from turning u* into the point where
    one more instance-hour tips the sum."""
    n_ref = fl.gpus
    ref = ("buy-the-fleet" if fl.existing == 0 else "keep-the-owned-fleet" if fl.existing == fl.gpus else
           "keep-owned-and-buy-the-rest" if fl.existing < fl.gpus else "keep-the-fleet-sell-the-rest")
    own_ref = float(costs.owned_total(costs.owned_cost(cfg, tl, float(n_ref), watts, fl.existing,
                                                       fl.age_years))[0])
    own_zero = float(costs.owned_total(costs.owned_cost(cfg, tl, 0.0, watts, fl.existing, fl.age_years))[0])
    measured = float(held.mean()) / fl.capacity if held.size else 0.0
    all_cloud_usd = _sum(all_cloud)
    # data residency forbids renting: owning is the only answer, whatever u* says
    verdict = "cloud" if all_cloud_usd < own_ref and not m.data_residency else "on-prem"
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
            {c.HELD_UTILIZATION: x,
             c.CLOUD_USD_PER_GPU_YEAR: (b.rent_fixed_usd + b.rent_variable_usd * x / b.measured_held) / per
             if b.measured_held > 0 else b.rent_fixed_usd / per,
             c.OWNED_USD_PER_GPU_YEAR: owned}
            for x in BREAK_EVEN_GRID
        )
    cols = (
        TableColumn(c.HELD_UTILIZATION, "fraction", "share of the fleet's hours held by jobs"),
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


def tornado(cfg: Config, m: Measured, fraction: float, base: CostBlock | None = None) -> Table:
    T = TornadoColumns
    base = base or cost_block(cfg, m, what_if=False)
    base_diff = cloud_minus_own(base)
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
        rows.append({
            T.PARAMETER: label, T.KEY: f"{section}.{key}", T.BASE_VALUE: value, T.LOW_VALUE: lv, T.HIGH_VALUE: hv,
            T.BASE_DIFF_USD: base_diff, T.LOW_DIFF_USD: lo_diff, T.HIGH_DIFF_USD: hi_diff,
            T.SWING_USD: abs(hi_diff - lo_diff),
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
        TableColumn(T.SWING_USD, "USD", "|high − low|"),
        TableColumn(T.CHEAPEST_LOW, "", "cheapest allowed scenario, this input low"),
        TableColumn(T.CHEAPEST_HIGH, "", "cheapest allowed scenario, this input high"),
        TableColumn(T.BREAK_EVEN_LOW, "fraction", "break-even held-hour utilization, this input low (empty: never)"),
        TableColumn(T.BREAK_EVEN_HIGH, "fraction", "break-even held-hour utilization, this input high (empty: never)"),
        TableColumn(T.CHANGES_CHEAPEST, "", "the cheapest scenario changes at either end"),
    )
    return Table("tornado", f"Each input ±{pct} on its own (positive difference: owning is cheaper); inputs "
                 "set to 0 are left out.", cols, tuple(rows), "cost model rerun per input")


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
        "hybrid": costs.billable(held - plan.n_hybrid, unit),
    }
    if m.current is Deployment.ON_PREM:
        per_bucket["stay-as-is"] = costs.billable(held - plan.existing, unit)
    else:
        running = to_fleet(m.reporting, m.reporting, fl.capacity)
        per_bucket["stay-as-is"] = np.maximum(costs.billable(running, unit) - plan.stay_reserved_gpus, 0.0)
    pos = np.searchsorted(days, block.day)
    counts = np.bincount(pos, minlength=len(days)).astype(float)
    sums = {k: np.bincount(pos, weights=v, minlength=len(days)) for k, v in per_bucket.items()}
    n_draw = counts[idx].sum(axis=1)
    n_draw[n_draw <= 0] = np.nan
    means = {k: v[idx].sum(axis=1) / n_draw for k, v in sums.items()}

    def own(n: float) -> float:
        return float(costs.owned_total(costs.owned_cost(cfg, tl, float(n), block.watts, fl.existing,
                                                        fl.age_years))[0])

    fixed = sum(costs.cloud_fixed(cfg, tl).values())
    per_gpu_flex = costs.HOURS_PER_MONTH * prices.flexible * tl.annuity
    per_gpu_res = costs.HOURS_PER_MONTH * prices.reserved * tl.annuity

    def bill(reserved: float, flex: np.ndarray) -> np.ndarray:
        used = (flex > 1e-12) | (reserved > 1e-12)
        return reserved * per_gpu_res + flex * per_gpu_flex + np.where(used, fixed, 0.0)

    ids, cols = [], []
    for s in block.scenarios:
        if s.what_if:
            continue
        if s.id == "all-cloud":
            v = own(0) + bill(plan.reserved_gpus, means["all-cloud"])
        elif s.id == "hybrid":
            v = own(plan.n_hybrid) + bill(0.0, means["hybrid"])
        elif s.id == "stay-as-is" and m.current is Deployment.ON_PREM:
            v = own(plan.existing) + bill(0.0, means["stay-as-is"])
        elif s.id == "stay-as-is":
            v = own(plan.existing) + bill(plan.stay_reserved_gpus, means["stay-as-is"])
        else:  # all-on-prem: owned, demand-independent
            v = np.full(idx.shape[0], float(s.total.value or 0.0))
        ids.append(s.id)
        cols.append(v)
    return CostDraws(tuple(ids), np.column_stack(cols))
