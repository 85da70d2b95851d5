"""The cost model: prices, cash flows and their present value. Pure functions of the config and a few
measured figures; docs/analyzer.md states every formula.

Money over a horizon of M months is a present value: a monthly amount is paid mid-month and discounted at
`analysis.discount_rate_per_year` (PV of $1 a month = `Timeline.annuity`, = M at a 0 % rate), capital bought
up front is paid at month 0, and resale value is received at the end (`Timeline.end`).

Cloud (per GPU-hour of demand; `cloud_bill`):
    reserved  = reserved GPUs K × 730 h × list × reserved multiplier, every hour of every month (24/7)
    flexible  = GPU-hours above K × list × (spot, capacity-block and on-demand shares of the rest,
                spot inflated by the work redone after interruptions)
    egress    = $/GB × GB/week × 52/12 per month;  managed services = once + per month
On-prem (N GPUs, with E already owned: `owned_cost`): keep min(N, E), sell the rest of E now, buy N − E:
    hardware  = new GPUs × $/GPU (upfront) or ÷ (years × 12) per month of its life (spread); bought once
    owned value kept = GPUs kept × today's resale value (what keeping them forgoes; selling costs nothing)
    residual  = −(value at the end of what is owned then)
    networking= a new build's fixed network + per new GPU, amortized like hardware (its own life)
    power     = N × W × PUE × $/kWh × 730 / 1000 per month;  maintenance = fraction/year × $/GPU × N / 12
    staff     = base + per node × nodes;  space = per node × nodes  (nodes = ceil(N / GPUs per node)), or with
                a per-kW rate: per kW × nodes × GPUs per node × busy W ÷ 1000
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from gpuaudit.analysis.config import Config

HOURS_PER_MONTH = 8760.0 / 12
_WEEKS_PER_MONTH = 52.0 / 12


@dataclass(frozen=True)
class Timeline:
    """When money moves: `months` of the horizon, discounted at `rate` per year."""

    months: int
    rate: float

    @cached_property
    def factors(self) -> np.ndarray:
        """Discount factor of each month's payment (paid mid-month)."""
        m = np.arange(self.months, dtype=float)
        return (1.0 + self.rate) ** (-(m + 0.5) / 12.0)

    @cached_property
    def annuity(self) -> float:
        """Present value of $1 paid every month of the horizon (= months at a 0 % rate)."""
        return float(self.factors.sum()) if self.rate else float(self.months)

    def annuity_for(self, months: float) -> float:
        """Present value of $1 a month for the first `months` of the horizon (a fraction of a month counts in
        part); the whole annuity when `months` reaches past the horizon."""
        if months >= self.months:
            return self.annuity
        whole = int(months)
        f = self.factors if self.rate else np.ones(self.months)
        return float(f[:whole].sum() + (months - whole) * f[whole])

    @property
    def end(self) -> float:
        """Present value of $1 received at the end of the horizon."""
        return (1.0 + self.rate) ** (-self.months / 12.0)

    def mean_growth(self, growth: float) -> float:
        """Demand multiplier averaged over the horizon, each month weighted by its discount factor, when demand
        grows by `growth` per year."""
        m = np.arange(self.months, dtype=float)
        f = (1.0 + growth) ** ((m + 0.5) / 12.0)
        w = self.factors
        return float((f * w).sum() / w.sum())


def timeline(cfg: Config, months: float | None = None) -> Timeline:
    return Timeline(round(months if months is not None else cfg.analysis.horizon_months),
                    cfg.analysis.discount_rate_per_year)


# ----------------------------------------------------------------------------------------------- cloud


@dataclass(frozen=True)
class CloudPrices:
    """Cloud $ per GPU-hour by way of buying."""

    list: float  # on-demand: instance $/h ÷ GPUs per instance
    reserved: float  # a reserved GPU-hour (paid whether used or not)
    flexible: float  # a GPU-hour above the reservation: the spot / capacity-block / on-demand mix
    blended: float  # a GPU-hour of perfectly steady demand: reserved share × reserved + the rest × flexible
    unit: int  # GPUs per billing unit: 1, or GPUs per instance with instance granularity


def _spot_overhead(cfg: Config) -> float:
    c = cfg.cloud
    return 1.0 + c.spot_interruptions_per_hour * c.spot_lost_hours_per_interruption


def cloud_prices(cfg: Config) -> CloudPrices:
    c = cfg.cloud
    lst = c.instance_usd_per_hour / c.gpus_per_instance
    rest = 1.0 - c.reserved_share
    if rest > 1e-12:
        on_demand = max(0.0, rest - c.spot_share - c.capacity_block_share)
        mix = (c.spot_share * c.spot_multiplier * _spot_overhead(cfg) + c.capacity_block_share *
               c.capacity_block_multiplier + on_demand) / rest
    else:
        mix = 1.0  # everything reserved: what spills over (rounding) is bought on demand
    reserved = lst * c.reserved_multiplier
    flexible = lst * mix
    blended = c.reserved_share * reserved + rest * flexible
    unit = c.gpus_per_instance if c.billing_granularity == "instance" else 1
    return CloudPrices(lst, reserved, flexible, blended, unit)


def ascending(values: np.ndarray) -> np.ndarray:
    """`values` as floats in ascending order, as given when they already are: one O(n) check instead of a sort.
    The sizing sorts its demand once and every helper it calls (overflow, reservation, power, fractile) takes
    it sorted; they sorted the same series over a thousand times per run (0.37 s of a warm fleet report)."""
    d = np.asarray(values, dtype=float)
    if d.size < 2 or bool((d[1:] >= d[:-1]).all()):
        return d
    return np.sort(d)


def billable(demand: np.ndarray, unit: int) -> np.ndarray:
    """GPUs billed for each bucket of demand: whole instances when the unit is an instance."""
    d = np.maximum(np.asarray(demand, dtype=float), 0.0)
    if unit <= 1:
        return d
    return np.ceil(d / unit - 1e-9) * unit


def best_reservation(billed: np.ndarray, prices: CloudPrices) -> float:
    """The reservation K (GPUs, billed every hour) that makes renting `billed` cheapest: K × reserved + the
    flexible price × mean max(b − K, 0). One rule for every plan and billing granularity: a GPU-level k is
    reserved when it is busy often enough that reserving it costs less than buying its hours flexibly
    (share of time b ≥ k ≥ reserved ÷ flexible). The cost is convex and piecewise linear in K with knees at the
    billed values (whole instances with instance billing), so the best K is 0 or one of them: all are priced
    at once with sorted suffix sums; ties go to the smaller K."""
    b = ascending(np.maximum(np.asarray(billed, dtype=float), 0.0))
    if b.size == 0 or prices.reserved >= prices.flexible or b[-1] <= 0:
        return 0.0
    knots = np.concatenate([[0.0], np.unique(b)])
    suffix = np.concatenate([np.cumsum(b[::-1])[::-1], [0.0]])
    i = np.searchsorted(b, knots, side="right")
    above = (suffix[i] - knots * (b.size - i)) / b.size  # mean max(b − K, 0)
    cost = knots * prices.reserved + above * prices.flexible
    return float(knots[int(np.argmin(cost + 1e-9 * knots))])


def cloud_fixed(cfg: Config, tl: Timeline) -> dict[str, float]:
    """Egress and managed services: paid whenever the cloud is used at all."""
    c = cfg.cloud
    return {
        "egress": c.egress_usd_per_gb * c.egress_gb_per_week * _WEEKS_PER_MONTH * tl.annuity,
        "managed_services": c.managed_services_usd_once + c.managed_services_usd_per_month * tl.annuity,
    }


def cloud_bill(cfg: Config, tl: Timeline, reserved_gpus: float, flexible_gpus: float) -> dict[str, float]:
    """Present value of renting `reserved_gpus` around the clock plus `flexible_gpus` on average (GPUs; a
    typical month of demand, repeated over the horizon). Nothing at all when both are 0."""
    p = cloud_prices(cfg)
    parts = {
        "cloud_reserved": reserved_gpus * HOURS_PER_MONTH * p.reserved * tl.annuity,
        "cloud_flexible": flexible_gpus * HOURS_PER_MONTH * p.flexible * tl.annuity,
    }
    used = reserved_gpus > 1e-12 or flexible_gpus > 1e-12
    fixed = cloud_fixed(cfg, tl) if used else {"egress": 0.0, "managed_services": 0.0}
    return {**parts, **fixed}


def cloud_cost(cfg: Config, gpu_hours: float, months: float, *, fixed: bool = True) -> dict[str, float]:
    """Renting `gpu_hours` of perfectly steady demand over `months` (what the article's total_cost_cloud
    computes): reserved share × reserved price + the rest × flexible price, plus egress and managed services."""
    tl = timeline(cfg, months)
    p = cloud_prices(cfg)
    per_month = gpu_hours / tl.months if tl.months else 0.0
    compute = per_month * p.blended * tl.annuity
    parts = {"cloud_compute": compute}
    if fixed:
        parts.update(cloud_fixed(cfg, tl))
    else:
        parts.update({"egress": 0.0, "managed_services": 0.0})
    return parts


# ---------------------------------------------------------------------------------------------- on-prem


def power_watts(cfg: Config, measured_w: float | None) -> tuple[float, str]:
    if cfg.on_prem.power_source == "measured" and measured_w is not None and measured_w > 0:
        return measured_w, "measured"
    return cfg.on_prem.fallback_watts_per_gpu, "configured"


@dataclass(frozen=True)
class PowerModel:
    """Board power of an owned GPU by what it does: `idle_w` while no job holds it, `held_w` while one does (the
    measured power-vs-load relation: a plan that keeps fewer GPUs keeps them busier, and draws more per GPU).
    Flat (idle = held = the fleet average) when power is configured or the trial cannot separate the two."""

    idle_w: float
    held_w: float
    average_w: float  # the fleet's measured (or configured) average: what the owned $/GPU-h figure uses

    def watts(self, demand: np.ndarray, n: np.ndarray | float) -> np.ndarray:
        """Average watts per GPU of owning `n` GPUs (one value per count) that serve min(d_t, n) held GPUs."""
        counts = np.atleast_1d(np.asarray(n, dtype=float))
        d = np.asarray(demand, dtype=float)
        if self.held_w == self.idle_w or d.size == 0:
            return np.full(counts.shape, self.average_w if self.held_w == self.idle_w else self.idle_w)
        s = ascending(d)
        prefix = np.concatenate([[0.0], np.cumsum(s)])
        i = np.searchsorted(s, counts, side="right")
        served = (prefix[i] + counts * (s.size - i)) / s.size  # mean_t min(d_t, n)
        share = np.where(counts > 0, np.minimum(served / np.maximum(counts, 1e-12), 1.0), 0.0)
        return self.idle_w + (self.held_w - self.idle_w) * share


def power_model(cfg: Config, measured_w: float | None, idle_w: float | None, held_w: float | None,
                held_share: float | None = None) -> tuple[PowerModel, str]:
    """The power model a plan's GPUs are charged with, and where it came from: "measured", "configured" (flat
    `fallback_watts_per_gpu`), or, where nothing was measured and the pool's model has both board powers
    (`cfg.load_power`), its idle power while no job holds a GPU and its busy power while one does (the string
    names where the two came from). `held_share` (held ÷ observed GPU-hours) sets that model's average."""
    w, source = power_watts(cfg, measured_w)
    if source == "measured" and idle_w is not None and held_w is not None:
        return PowerModel(idle_w, held_w, w), source
    lp = cfg.load_power
    # power_source = "configured" asks for the flat figure whatever was measured: only the unmeasured fallback
    # follows load
    if source == "configured" and lp is not None and cfg.on_prem.power_source == "measured":
        idle, busy, where = lp
        share = min(max(held_share, 0.0), 1.0) if held_share is not None else 1.0
        return PowerModel(idle, busy, idle + (busy - idle) * share), where
    return PowerModel(w, w, w), source


def resale_value(cfg: Config, age_years: float) -> float:
    """Value of one GPU of age `age_years` as a share of today's price: straight line from 1 (new) to the
    salvage fraction at the end of the amortization life, flat after."""
    o = cfg.on_prem
    left = max(0.0, 1.0 - age_years / o.amortization_years)
    return o.salvage_fraction + (1.0 - o.salvage_fraction) * left


def capital(cost: np.ndarray, life_years: float, salvage: float, tl: Timeline, timing: str
             ) -> tuple[np.ndarray, np.ndarray]:
    """(capital charge, residual credit) of `cost` bought now. life 0 = expensed at once in full. Bought once
    in both timings: spread pays instalments over the life only (a horizon past the life runs the hardware on
    with nothing more to pay, as upfront does; no refresh is priced)."""
    zero = np.zeros_like(cost)
    if life_years <= 0:
        return cost, zero
    if timing == "spread":
        return cost / (life_years * 12.0) * tl.annuity_for(life_years * 12.0), zero
    left = max(0.0, 1.0 - tl.months / 12.0 / life_years)
    return cost, -cost * (salvage + (1.0 - salvage) * left) * tl.end


def owned_cost(cfg: Config, tl: Timeline, gpus: np.ndarray | float, watts: np.ndarray | float, existing: int = 0,
               existing_age_years: float = 0.0) -> dict[str, np.ndarray]:
    """Present value of owning `gpus` GPUs (an array: one total per count) over the horizon, `existing` of
    them owned already. Counts above `existing` are bought now; below, the surplus is sold now."""
    o = cfg.on_prem
    n = np.atleast_1d(np.asarray(gpus, dtype=float))
    price = o.hardware_usd_per_gpu
    kept = np.minimum(n, existing)
    bought = np.maximum(n - existing, 0.0)
    any_owned = n > 0
    nodes = np.ceil(n / o.gpus_per_node - 1e-9)

    hardware, residual_new = capital(bought * price, o.amortization_years, o.salvage_fraction, tl,
                                      o.capex_timing)
    # Owned GPUs are sunk: what they cost was paid. Keeping one forgoes selling it today (its value now is the
    # capital it still ties up) and leaves its value at the end; selling it costs nothing further. So keeping
    # costs the loss of value over the horizon, in both capex timings (the same baseline for every scenario:
    # totals stay costs, never "income" from an old fleet).
    kept_value = kept * price * resale_value(cfg, existing_age_years)
    residual_kept = -kept * price * resale_value(cfg, existing_age_years + tl.months / 12.0) * tl.end
    new_build = (existing == 0) & any_owned
    net_cost = np.where(new_build, o.networking_usd, 0.0) + o.networking_usd_per_gpu * bought
    networking, residual_net = capital(net_cost, o.networking_amortization_years, 0.0, tl, o.capex_timing)
    monthly = tl.annuity
    return {
        "hardware": hardware,
        "owned_value_kept": kept_value,
        "residual_value": residual_new + residual_kept + residual_net,
        "networking": networking,
        "power": n * watts * o.pue * o.power_usd_per_kwh * HOURS_PER_MONTH / 1000.0 * monthly,
        "maintenance": o.maintenance_fraction_per_year * price * n / 12.0 * monthly,
        "staff": np.where(any_owned, o.staff_usd_per_month + o.staff_usd_per_node_per_month * nodes, 0.0) * monthly,
        "space": space_per_node(cfg) * nodes * monthly,
    }


def space_per_node(cfg: Config) -> float:
    """$ per node per month of space: the per-node rate, or with a per-kW rate set, that rate × the node's busy
    board power (GPUs per node × `fallback_watts_per_gpu`, a pool's model's busy power) in kW. Why: one node
    figure sized for an HGX H100 node overprices a node of small GPUs."""
    o = cfg.on_prem
    if o.space_usd_per_kw_per_month > 0:
        return o.space_usd_per_kw_per_month * o.gpus_per_node * o.fallback_watts_per_gpu / 1000.0
    return o.space_usd_per_node_per_month


def owned_total(parts: dict[str, np.ndarray]) -> np.ndarray:
    return np.sum(list(parts.values()), axis=0)


def owned_fixed(cfg: Config, tl: Timeline, existing: int = 0) -> float:
    """The part of owning anything that does not grow with the GPU count: the base staff, and a new build's
    fixed network (none when GPUs are owned already)."""
    o = cfg.on_prem
    staff = o.staff_usd_per_month * tl.annuity
    if existing > 0:
        return staff
    net, res = capital(np.array([o.networking_usd]), o.networking_amortization_years, 0.0, tl, o.capex_timing)
    return staff + float(net[0] + res[0])


def owned_marginal_per_hour(cfg: Config, tl: Timeline, watts: float, *, keep: bool = False,
                            existing_age_years: float = 0.0) -> float:
    """What one more owned GPU costs per hour of the horizon, fixed costs left out: a new GPU, or (`keep`) one
    already owned (its resale value forgone). Levelized: the constant $/h whose present value over the horizon
    equals the present value of owning it (PV ÷ PV of one hour every month), so it compares with a cloud list
    price. Per node costs (staff, space) are spread over the node's GPUs."""
    g = cfg.on_prem.gpus_per_node
    hours = tl.annuity * HOURS_PER_MONTH
    if not hours:
        return 0.0
    if keep:
        kept = owned_total(owned_cost(cfg, tl, float(g), watts, g, existing_age_years))[0]
        sold = owned_total(owned_cost(cfg, tl, 0.0, watts, g, existing_age_years))[0]
        variable = kept - sold - owned_fixed(cfg, tl, g)
    else:
        variable = owned_total(owned_cost(cfg, tl, float(g), watts))[0] - owned_fixed(cfg, tl, 0)
    return float(variable) / g / hours
