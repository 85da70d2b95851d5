"""Cost scenarios over the horizon, break-even, hybrid sizing and sensitivity: pure functions of the
config and a few measured figures (`Measured`), so the sensitivity analysis can rerun them cheaply."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from gpuaudit.analysis import costs
from gpuaudit.analysis.config import Config
from gpuaudit.analysis.hybrid import Sizing, overflow_hours, size
from gpuaudit.analysis.result import Column, Deployment, Figure, Scenario, Table

SCENARIO_ORDER = ("stay-as-is", "all-cloud", "all-cloud-right-sized", "all-on-prem", "hybrid")

# The prices the tornado moves (config section, key, label).
PRICES: tuple[tuple[str, str, str], ...] = (
    ("cloud", "instance_usd_per_hour", "cloud instance $/hour"),
    ("cloud", "spot_multiplier", "spot multiplier"),
    ("cloud", "reserved_multiplier", "reserved multiplier"),
    ("cloud", "egress_usd_per_gb", "egress $/GB"),
    ("cloud", "managed_services_usd_per_month", "managed services $/month"),
    ("on_prem", "hardware_usd_per_gpu", "hardware $/GPU"),
    ("on_prem", "staff_usd_per_month", "staff $/month"),
    ("on_prem", "power_usd_per_kwh", "power $/kWh"),
    ("on_prem", "networking_usd", "networking $"),
    ("on_prem", "maintenance_fraction_per_year", "maintenance %/year"),
)


@dataclass(frozen=True)
class Measured:
    """What the trial measured, as the cost model needs it."""

    w: float  # observed GPU-hours
    r: float  # runtime GPU-hours
    s: float  # real GPU-hours
    trial_hours: float
    fleet_gpus: int  # physical GPUs seen (distinct gpu_uuid): what is owned today
    demand: np.ndarray  # GPUs per bucket (held or SM-weighted, see demand_basis)
    dt_hours: float  # bucket length
    measured_w: float | None  # average board power per GPU
    current: Deployment


@dataclass(frozen=True)
class CostBlock:
    rates: costs.Rates
    scenarios: tuple[Scenario, ...]
    cheapest: str
    sizing: Sizing
    break_even: float | None
    scale: float


def _total(parts: dict[str, float]) -> float:
    return float(sum(parts.values()))


def _scenario(sid: str, label: str, description: str, cloud_h: float, owned: int, parts: dict[str, float],
              formula: str, months: float) -> Scenario:
    total = _total(parts)
    return Scenario(
        id=sid, label=label, description=description, cloud_gpu_hours=cloud_h, owned_gpus=owned,
        total=Figure(total, "USD", formula, "cost model (config) × measured GPU-hours, scaled to the horizon",
                     f"Total cost of '{label}' over {months:g} months."),
        components={k: float(v) for k, v in parts.items()}, monthly_usd=total / months,
    )


def growth_factor(rate: float, months: float) -> float:
    """Average demand multiplier over the horizon when demand grows by `rate` per year."""
    m = max(1, round(months))
    return float(np.mean([(1.0 + rate) ** ((i + 0.5) / 12) for i in range(m)]))


def cost_block(cfg: Config, m: Measured, growth: float = 0.0) -> CostBlock:
    months = float(cfg.analysis.horizon_months)
    horizon_h = months * costs.HOURS_PER_MONTH
    scale = horizon_h / m.trial_hours
    f = growth_factor(growth, months)
    rates = costs.rates(cfg, m.measured_w)
    watts = rates.power_w
    demand = m.demand * f

    out: list[Scenario] = []
    if m.current is Deployment.ON_PREM:
        # Keep today's GPUs; demand growing beyond them is rented (none without growth: a fleet cannot
        # hold more GPUs than it has).
        over = float(overflow_hours(demand, np.array([float(m.fleet_gpus)]), m.dt_hours)[0]) * scale
        parts = {**costs.on_prem_cost(cfg, m.fleet_gpus, months, watts),
                 **costs.cloud_cost(cfg, over, months, fixed=over > 1e-9)}
        out.append(_scenario("stay-as-is", "Stay as is (on-prem)",
                             f"Keep owning today's {m.fleet_gpus} GPUs (demand above them rented).", over,
                             m.fleet_gpus, parts, "on-prem cost(GPUs owned today) + cloud cost(demand above them)",
                             months))
    else:
        hours = m.w * scale * f
        out.append(_scenario("stay-as-is", "Stay as is (cloud)",
                             "Keep renting the instances for all the time they ran (observed GPU-hours W).",
                             hours, 0, costs.cloud_cost(cfg, hours, months), "cloud cost(W × scale)", months))
    hours = m.r * scale * f
    out.append(_scenario("all-cloud", "All cloud", "Rent GPUs for the runtime GPU-hours R (while a job holds "
                         "them).", hours, 0, costs.cloud_cost(cfg, hours, months), "cloud cost(R × scale)", months))
    eff = cfg.cloud.right_size_target_efficiency
    hours = min(m.s / eff, m.r) * scale * f
    out.append(_scenario("all-cloud-right-sized", "All cloud, right-sized",
                         f"Rent only real GPU-hours S at {eff:.0%} efficiency while held.", hours, 0,
                         costs.cloud_cost(cfg, hours, months), "cloud cost(min(S / target efficiency, R) × scale)",
                         months))
    peak = float(demand.max()) if demand.size else 0.0
    n_peak = max(1, math.ceil(peak - 1e-9))
    out.append(_scenario("all-on-prem", "All on-prem", f"Own enough GPUs for peak demand ({n_peak}).", 0.0,
                         n_peak, costs.on_prem_cost(cfg, n_peak, months, watts), "on-prem cost(ceil(peak demand))",
                         months))
    sizing = size(cfg, demand, m.dt_hours, scale, months, watts, rates.owned_marginal, rates.cloud_effective)
    i = int(np.argmin(sizing.total_usd))
    over = float(sizing.overflow_gpu_hours[i])
    parts = {**costs.on_prem_cost(cfg, sizing.n_star, months, watts),
             **costs.cloud_cost(cfg, over, months, fixed=over > 1e-9)}
    out.append(_scenario("hybrid", "Hybrid", f"Own N* = {sizing.n_star} GPUs for the steady base, burst demand "
                         "above them to the cloud.", over, sizing.n_star, parts,
                         "on-prem cost(N*) + cloud cost(Σ max(demand − N*, 0) × dt × scale)", months))
    cheapest = min(out, key=lambda s: (round(s.total.value or 0.0, 2), SCENARIO_ORDER.index(s.id))).id
    be = costs.break_even_utilization(cfg, m.fleet_gpus, months, watts)
    return CostBlock(rates, tuple(out), cheapest, sizing, be, scale)


def total_of(block: CostBlock, sid: str) -> float:
    return float(next(s.total.value for s in block.scenarios if s.id == sid) or 0.0)


def tornado(cfg: Config, m: Measured, fraction: float) -> Table:
    base = cost_block(cfg, m)
    base_diff = total_of(base, "all-cloud") - total_of(base, "all-on-prem")
    rows = []
    for section, key, label in PRICES:
        value = getattr(getattr(cfg, section), key)
        ends = {}
        for side, mult in (("low", 1 - fraction), ("high", 1 + fraction)):
            b = cost_block(cfg.replace(section, **{key: value * mult}), m)
            ends[side] = b
        lo, hi = ends["low"], ends["high"]
        lo_diff = total_of(lo, "all-cloud") - total_of(lo, "all-on-prem")
        hi_diff = total_of(hi, "all-cloud") - total_of(hi, "all-on-prem")
        rows.append({
            "parameter": label, "key": f"{section}.{key}", "base_value": value,
            "low_value": value * (1 - fraction), "high_value": value * (1 + fraction),
            "base_diff_usd": base_diff, "low_diff_usd": lo_diff, "high_diff_usd": hi_diff,
            "swing_usd": abs(hi_diff - lo_diff),
            "cheapest_low": lo.cheapest, "cheapest_high": hi.cheapest,
            "break_even_low": lo.break_even, "break_even_high": hi.break_even,
            "changes_cheapest": lo.cheapest != base.cheapest or hi.cheapest != base.cheapest,
        })
    rows.sort(key=lambda r: (-r["swing_usd"], r["parameter"]))
    cols = (
        Column("parameter", "", "price moved"), Column("key", "", "config key"),
        Column("base_value", "", "configured value"), Column("low_value", "", f"value × {1 - fraction:g}"),
        Column("high_value", "", f"value × {1 + fraction:g}"),
        Column("base_diff_usd", "USD", "all-cloud − all-on-prem total at the configured prices"),
        Column("low_diff_usd", "USD", "all-cloud − all-on-prem total with this price low"),
        Column("high_diff_usd", "USD", "all-cloud − all-on-prem total with this price high"),
        Column("swing_usd", "USD", "|high − low|"),
        Column("cheapest_low", "", "cheapest scenario with this price low"),
        Column("cheapest_high", "", "cheapest scenario with this price high"),
        Column("break_even_low", "fraction", "break-even real utilization with this price low"),
        Column("break_even_high", "fraction", "break-even real utilization with this price high"),
        Column("changes_cheapest", "", "the cheapest scenario changes at either end"),
    )
    return Table("tornado", f"Each price ±{fraction:.0%} on its own (positive difference: owning is cheaper).",
                 cols, tuple(rows), "cost model rerun per price")


def growth_table(cfg: Config, m: Measured, rates: tuple[float, ...]) -> Table:
    rows = []
    for g in rates:
        b = cost_block(cfg, m, growth=g)
        row: dict[str, object] = {"growth_per_year": g, "demand_factor": growth_factor(g, cfg.analysis.horizon_months)}
        for s in b.scenarios:
            row[f"{s.id.replace('-', '_')}_usd"] = s.total.value
        row["cheapest"] = b.cheapest
        row["hybrid_n_star"] = b.sizing.n_star
        rows.append(row)
    cols = (
        Column("growth_per_year", "fraction", "demand growth per year"),
        Column("demand_factor", "", "average demand multiplier over the horizon"),
        *(Column(f"{sid.replace('-', '_')}_usd", "USD", f"total of scenario {sid}") for sid in SCENARIO_ORDER),
        Column("cheapest", "", "cheapest scenario"), Column("hybrid_n_star", "GPUs", "hybrid N*"),
    )
    return Table("growth", "Scenario totals when demand grows (average multiplier over the horizon).", cols,
                 tuple(rows), "cost model rerun per growth rate")


def with_egress(cfg: Config, egress_gb_per_week: float | None) -> Config:
    if egress_gb_per_week is None:
        return cfg
    new = dataclasses.replace(cfg.cloud, egress_gb_per_week=float(egress_gb_per_week))
    return dataclasses.replace(cfg, cloud=new)
