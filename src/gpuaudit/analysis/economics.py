"""The result's priced parts: each plan's cost, the break-even, hybrid sizing and what the answer is sensitive to.

Money in USD over the trial unless a name says per year or per GPU-hour; fractions 0-1.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuaudit.analysis.figure import Figure, Table


@dataclass(frozen=True)
class PricedMix:
    """How a plan's cloud GPU-hours were actually priced (analysis.cloudmix).

    reserved_share / spot_share / capacity_block_share / on_demand_share: shares of the plan's cloud GPU-hours
      (summing to 1) bought reserved 24/7, on spot, in capacity blocks and on demand. Not cloud.spot_share and
      cloud.reserved_share: a plan reserves only what is cheaper reserved (none when a reserved hour costs more
      than a flexible one), and the configured shares of what is not reserved price the rest.
    usd_per_gpu_hour: the effective price of one of its cloud GPU-hours (spot inflated by the work redone after
      interruptions); on_demand_usd_per_gpu_hour: the list price it derives from.
    spot_interruptions_per_hour / spot_lost_hours_per_interruption: what its spot hours assume.
    text: the sentence the report and the summaries print ("priced as 100 % spot at $3.17/GPU-h; on demand
      $6.88/GPU-h").
    """

    reserved_share: float
    spot_share: float
    capacity_block_share: float
    on_demand_share: float
    usd_per_gpu_hour: float
    on_demand_usd_per_gpu_hour: float
    spot_interruptions_per_hour: float
    spot_lost_hours_per_interruption: float
    text: str


@dataclass(frozen=True)
class CostScenario:
    """One way to run the measured demand over the horizon.

    id: stay-as-is, all-cloud, all-on-prem, hybrid, and the what-if plans all-cloud-if-packed,
      all-on-prem-if-packed, hybrid-if-packed.
    cloud_gpu_hours: GPU-hours billed by the cloud over the horizon. owned_gpus: GPUs owned.
    total: present value of the cost over the horizon (USD). components: named cost parts (USD; residual value
    is negative) summing to total. monthly_usd: total ÷ months.
    """

    id: str
    label: str
    description: str
    cloud_gpu_hours: float
    owned_gpus: int
    total: Figure
    components: dict[str, float]
    monthly_usd: float
    what_if: bool = False  # an "if behaviour changes" plan: shown, never counted as cheapest
    allowed: bool = True  # False when data residency forbids it (it rents)
    # Board power per owned GPU its power cost is priced at: the measured power-vs-load relation at the load the
    # GPUs it keeps carry (None when it owns nothing)
    power_w_per_gpu: float | None = None
    # Cash, not present value: what leaves (or comes back: GPUs sold now, resale) each month of the horizon,
    # month 0 first (capital paid up front in month 0, instalments over the hardware's life when spread, resale
    # in the last month); capex_usd: the new hardware and network bought; payback_months: for a plan that buys, when its
    # cumulative cash (resale left out) falls to the renting plan's (Costs.payback_against; None: not within the
    # horizon)
    reserved_gpus: float = 0.0  # GPUs it reserves around the clock (what is cheaper reserved)
    cash_usd_by_month: tuple[float, ...] = ()
    capex_usd: float = 0.0
    payback_months: float | None = None
    priced_mix: PricedMix | None = None  # how its cloud GPU-hours were priced (None: it rents nothing)
    # The owned GPUs it sells now and the cash they bring back in month 0 (today's resale value): part of year
    # 1's cash, not a cost
    sold_gpus: int = 0
    sale_usd: float = 0.0


@dataclass(frozen=True)
class Costs:
    """The cost model over `horizon_months`.

    cloud_usd_per_gpu_hour: list $/instance-hour ÷ GPUs per instance.
    cloud_effective_usd_per_gpu_hour: after the spot/reserved/on-demand mix and spot interruption overhead.
    owned_usd_per_gpu_hour: marginal owned cost of one GPU per wall-clock hour (amortized hardware,
      maintenance, power at measured watts × PUE); fixed costs (staff, networking) are separate.
    power_w_per_gpu / power_source: watts used for on-prem power, "measured", "configured", "catalogue idle/busy
      by load" or "[models] idle/busy by load" (no power measured: the model's board powers by the held share),
      or "mixed" (pools of several sources).
    scale: fleet capacity ÷ GPUs that reported, averaged over the demand buckets (how measured demand is
      extrapolated to the fleet; 1 when every GPU reported all the time).
    discount_rate_per_year / annuity_months: the present-value convention (annuity: PV of $1 a month).
    fleet_gpus / fleet_capacity / owned_gpus: GPUs in the fleet, its capacity in GPU equivalents, GPUs owned.
    pack_factor: held demand × this in the "if behaviour changes" scenarios. reserved_gpus: all-cloud's
      reservation (billed 24/7). cloud_reserved/flexible_usd_per_gpu_hour: the two cloud prices.
    phantom_usd / phantom_usd_per_year: what the held-but-idle time (R − S) would cost at the cloud's effective
      rate, over the trial and per year.
    """

    horizon_months: int
    cloud_usd_per_gpu_hour: Figure
    cloud_effective_usd_per_gpu_hour: Figure
    owned_usd_per_gpu_hour: Figure
    power_w_per_gpu: Figure
    power_source: str
    scale: float
    scenarios: tuple[CostScenario, ...]
    cheapest: str
    preset: str
    discount_rate_per_year: float
    annuity_months: float  # present value of $1 a month over the horizon, in dollars
    fleet_gpus: int
    fleet_capacity: float
    owned_gpus: int
    pack_factor: float
    reserved_gpus: float
    cloud_reserved_usd_per_gpu_hour: Figure
    cloud_flexible_usd_per_gpu_hour: Figure
    phantom_usd: Figure  # the trial's phantom GPU-hours (R − S) at the cloud's effective rate
    phantom_usd_per_year: Figure  # the same, scaled to a year (HOURS_PER_YEAR ÷ trial hours)
    # the renting plan each purchase's payback_months is measured against (staying, for a fleet that rents today)
    payback_against: str = "all-cloud"


@dataclass(frozen=True)
class BreakEven:
    """Where renting and owning cost the same, on the basis the cloud bills: billed GPU-hours.

    break_even_billed_utilization: u*, the billed-hour utilization (demand shaped as measured, scaled up or down)
      at which renting costs the same as owning the whole fleet (`own_reference`: "keep-the-owned-fleet" when every
      fleet GPU is owned, "buy-the-fleet" when none is, "keep-owned-and-buy-the-rest" in between; more owned
      than the fleet is refused). Renting k × today's billed demand
      costs rent_fixed_usd + k × rent_variable_usd (selling owned GPUs, egress and managed services; the compute
      bill). None when nothing was billed, or with `never`.
    real_equivalent: u* × measured efficiency while held (S/R): the real utilization that corresponds at
      today's efficiency.
    never: True when renting is cheaper even with every GPU billed all the time (u* > 1).
    measured_billed: the trial's billed-hour utilization, billed GPU-hours / W (= utilization.billed_utilization),
      compared with u*;
      measured_real / measured_runtime: S/W and R/W.
    verdict: "cloud" when all-cloud costs less than the reference, else "on-prem" (measured_billed < u* ⇔
      "cloud"); always "on-prem" under data residency. own_usd / cloud_usd: the two totals compared.
    curve: USD per fleet GPU-year of renting (fixed part + compute in proportion to billed hours) and of owning
      (flat) over a grid of billed-hour utilizations 0-1: the break-even chart.
    """

    never: bool
    measured_real: float
    measured_runtime: float
    verdict: str
    break_even_billed_utilization: Figure
    real_equivalent: Figure
    measured_billed: float
    own_reference: str
    own_usd: float
    cloud_usd: float
    rent_fixed_usd: float
    rent_variable_usd: float
    curve: Table  # BreakEvenCurveColumns; no rows when there is no break-even


@dataclass(frozen=True)
class HybridSizing:
    """How many GPUs to own when bursting the rest to the cloud.

    n_star: owned count N in 0..ceil(peak) minimizing owned cost(N) + cloud cost of demand above N (N = 0:
      all-cloud). n_owning: the best N ≥ 1 (the hybrid scenario). critical_fractile_n: the largest N whose
      demand is ≥ N at least c_own/c_cloud of the time (no fixed costs); agrees: it is within `tolerance` GPUs
      of n_owning (a node when costs step per node). fixed_cost_usd: fixed costs of owning anything;
      hurdle_gpus: GPUs busy around the clock needed before owning covers them ("owning pays only above ~K busy
      GPUs"); None when owning never pays.
    peak_demand / mean_demand: of the fleet-scaled demand series. curve: total cost per candidate N.
    """

    n_star: int
    critical_fractile_n: int
    cost_ratio_u: Figure
    fractile: Figure
    agrees: bool
    peak_demand: Figure
    mean_demand: Figure
    demand_basis: str
    bucket_s: float
    curve: Table
    n_owning: int
    tolerance: int
    fixed_cost_usd: float
    hurdle_gpus: Figure
    # the fewest GPUs the hybrid may own: the latency-sensitive share's peak (0 without one); N* and n_owning are
    # the best N at or above it, and the critical fractile is raised to it
    min_owned_gpus: int = 0
    # in a fleet of several GPU models, the model pool (Pool.model) this sizing is of: the one with the most held
    # GPU-hours (each pool sizes its own hybrid; "" when the fleet has one model)
    model: str = ""


@dataclass(frozen=True)
class Sensitivity:
    """How the answer moves.

    tornado: each price at -x % and +x % (x = 30 by default): cheapest scenario, break-even real
      utilization, and the all-cloud minus all-on-prem cost difference at each end; sorted by swing.
    growth: demand growth per year → scenario costs, cheapest scenario, hybrid N*.
    """

    fraction: float
    tornado: Table
    growth: Table
