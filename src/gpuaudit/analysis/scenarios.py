"""Cost scenarios over the horizon: the registry's plans (analysis.plans) priced on the fleet-scaled demand,
what each is allowed, their cash by month and payback, the cheapest, and the cost bootstrap. Pure functions of
the config and what the trial measured (`Measured`), so the sensitivity analysis can rerun them cheaply.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from gpuaudit.analysis import costs
from gpuaudit.analysis import plans as pl
from gpuaudit.analysis.breakeven import BreakEvenCalc, break_even
from gpuaudit.analysis.cloudmix import priced_mix
from gpuaudit.analysis.config import Config
from gpuaudit.analysis.economics import CostScenario
from gpuaudit.analysis.fleet import Fleet, Measured, fleet, fleet_series
from gpuaudit.analysis.hybrid import Sizing
from gpuaudit.analysis.plans import SCENARIO_ORDER, is_cloud_used
from gpuaudit.analysis.result import Deployment


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


def cost_block(cfg: Config, m: Measured, growth: float = 0.0, *, what_if: bool = True) -> CostBlock:
    tl = costs.timeline(cfg)
    fl = fleet(cfg, m)
    f = tl.mean_growth(growth) if growth else 1.0
    prices = costs.cloud_prices(cfg)
    power, power_source = costs.power_model(cfg, m.measured_w, m.idle_w, m.held_w,
                                            m.r / m.w if m.w > 0 else None)
    held, ok = fleet_series(m, fl, m.held, m.elastic_held)
    # Every plan, owning or renting, serves `held`: the demand the cloud bills.
    ctx = pl.Context(cfg, m, tl, fl, prices, power, held * f, f)
    built = pl.build(ctx, what_if=what_if)
    out = [_with_power(cfg, tl, b.scenario) for b in built.values()]
    if m.data_residency or m.latency_share > 0:  # data that must stay, or latency-bound work, limit renting
        floors = {sid: ctx.floor if b.floor is None else b.floor for sid, b in built.items()}
        out = [dataclasses.replace(s, allowed=pl.allowed(m, s, floors[s.id])) for s in out]
    owned_value = fl.existing * cfg.on_prem.hardware_usd_per_gpu * costs.resale_value(cfg, fl.age_years)
    out = with_cash(cfg, tl, out, owned_value, fl.existing, payback_against(m.current, out))
    hours = costs.HOURS_PER_MONTH * tl.months
    out = [dataclasses.replace(s, reserved_gpus=float(built[s.id].reserved_gpus),
                               priced_mix=priced_mix(prices, cfg.cloud, built[s.id].reserved_gpus * hours,
                                                     s.cloud_gpu_hours)) for s in out]
    hyb = built["hybrid"]
    assert hyb.sizing is not None
    plan = Plan(built["all-cloud"].reserved_gpus, built["stay-as-is"].reserved_gpus,
                built["all-on-prem"].scenario.owned_gpus, hyb.scenario.owned_gpus, fl.existing, hyb.reserved_gpus)
    be = break_even(cfg, tl, m, fl, ctx.held, power, built["all-cloud"].scenario.components)
    return CostBlock(tl, prices, power.average_w, power_source, costs.owned_marginal_per_hour(cfg, tl, power.average_w),
                     fl, tuple(out), cheapest_of(out), hyb.sizing, be, plan, ctx.held, m.day[ok], ctx.pack, power)


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


def with_cash(cfg: Config, tl: costs.Timeline, out: list[CostScenario], owned_value: float, existing: int,
              against: str) -> list[CostScenario]:
    """The scenarios with their cash by month, capex and payback against the plan `against` ("" for none);
    `owned_value`: what the `existing` GPUs owned today would sell for now."""
    cash = {s.id: _cash(cfg, tl, s, owned_value) for s in out}
    rent = cash.get(against) if against else None
    done = []
    for s in out:
        flows, capex, plain = cash[s.id]
        payback = _payback(plain, rent[2]) if rent is not None and s.components.get("hardware", 0.0) > 0 else None
        sale = owned_value - s.components.get("owned_value_kept", 0.0)  # as _cash receives it in month 0
        done.append(dataclasses.replace(s, cash_usd_by_month=tuple(float(x) for x in flows), capex_usd=capex,
                                        payback_months=payback, sold_gpus=existing - min(s.owned_gpus, existing),
                                        sale_usd=float(sale) if sale > 1e-6 else 0.0))
    return done


def cheapest_of(scenarios: list[CostScenario] | tuple[CostScenario, ...]) -> str:
    """The cheapest allowed scenario (what-if scenarios never count); ties go to the earlier one."""
    pool = [s for s in scenarios if s.allowed and not s.what_if]
    return min(pool, key=lambda s: (round(s.total.value or 0.0, 2), SCENARIO_ORDER.index(s.id))).id


def _with_egress(cfg: Config, egress_gb_per_week: float | None) -> Config:
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
