"""Sensitivity: each input moved on its own (the tornado) and demand growth, the cost model rerun per case."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuaudit.analysis import costs
from gpuaudit.analysis.columns import GrowthColumns, TornadoColumns
from gpuaudit.analysis.config import Config, bounds
from gpuaudit.analysis.economics import CostScenario
from gpuaudit.analysis.figure import Table, TableColumn
from gpuaudit.analysis.fleet import Measured
from gpuaudit.analysis.plans import OWNING, SCENARIO_ORDER
from gpuaudit.analysis.scenarios import CostBlock, cost_block

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
    ("on_prem", "space_usd_per_kw_per_month", "space $/kW/month"),  # 0 (per node) moves nothing: no row
    ("on_prem", "power_usd_per_kwh", "power $/kWh"),
    ("on_prem", "pue", "PUE"),
    ("on_prem", "networking_usd", "networking $"),
    ("on_prem", "maintenance_fraction_per_year", "maintenance %/year"),
    ("on_prem", "owned_age_years", "age of owned GPUs"),
    ("analysis", "discount_rate_per_year", "discount rate/year"),
)


def total_of(block: CostBlock, sid: str) -> float:
    return float(next(s.total.value for s in block.scenarios if s.id == sid) or 0.0)


def _best_owning(block: CostBlock) -> CostScenario:
    """The cheapest allowed scenario that owns GPUs (stay-as-is counts only when today's fleet is owned)."""
    pool = [s for s in block.scenarios if s.id in OWNING and s.allowed and not s.what_if and s.owned_gpus > 0]
    return min(pool, key=lambda s: (s.total.value or 0.0, SCENARIO_ORDER.index(s.id)))


def _cloud_minus_own(block: CostBlock) -> float:
    return total_of(block, "all-cloud") - float(_best_owning(block).total.value or 0.0)


def _moved(cfg: Config, section: str, key: str, value: float, lo: float, hi: float) -> tuple[Config, float, str]:
    """The config with `key` moved to `value` (clamped), the value used, and why it differs from `value` ("" when
    it does not)."""
    why = ""
    if not lo <= value <= hi:
        why = f"clamped to the accepted range {lo:g}-{hi:g}"
    value = min(max(value, lo), hi)
    if section == "cloud" and key == "spot_share":  # the shares must still add up to at most 1
        c = cfg.cloud
        room = 1.0 - c.reserved_share - c.capacity_block_share
        if value > room:
            value, why = room, (f"capped at {room:g}: the spot, reserved ({c.reserved_share:g}) and capacity-block "
                                f"({c.capacity_block_share:g}) shares add up to at most 1")
    return cfg.replace(section, **{key: value}), value, why


def _within(u: float | None) -> float | None:
    """A break-even above 100 % held is "never" (renting wins even fully held), as everywhere else."""
    return None if u is None or u > 1.0 else u


def _same_plan(a: CostScenario, b: CostScenario) -> bool:
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
              if s.allowed and not s.what_if and s.id != plan and not _same_plan(s, me)]
    return own, (min(others) - own if others else None)


# Prices the fleet's plans at a config and a demand growth per year (one model pool, or the fleet's pools).
Build = Callable[[Config, float], CostBlock]


def builder(m: Measured) -> Build:
    """The plans of one pool measured as `m`, at any config and growth."""
    return lambda cfg, growth: cost_block(cfg, m, growth, what_if=False)


def tornado(cfg: Config, build: Build, fraction: float, base: CostBlock | None = None, plan: str | None = None
            ) -> Table:
    """Each input ±fraction on its own. `plan`: the recommended plan (default: the cheapest; after a tie,
    staying as is), whose cost and margin over the cheapest different allowed plan the rows carry."""
    T = TornadoColumns
    base = base or build(cfg, 0.0)
    base_diff = _cloud_minus_own(base)
    plan = plan or base.cheapest
    base_plan, base_margin = margin(base, plan)
    rows: list[dict[str, Any]] = []
    for section, key, label in PARAMETERS:
        lo, hi = bounds(section, key)
        value = float(getattr(getattr(cfg, section), key))
        if value == 0:
            continue  # a share of nothing moves nothing
        ends: dict[str, tuple[CostBlock, float]] = {}
        limits = []
        for side, mult in (("low", 1 - fraction), ("high", 1 + fraction)):
            moved, used, why = _moved(cfg, section, key, value * mult, lo, hi)
            ends[side] = (build(moved, 0.0), used)
            if why:
                limits.append(f"{side} {why}")
        (lb, lv), (hb, hv) = ends["low"], ends["high"]
        lo_diff, hi_diff = _cloud_minus_own(lb), _cloud_minus_own(hb)
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
            T.LIMIT: "; ".join(limits),
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
        TableColumn(T.BREAK_EVEN_LOW, "fraction", "break-even billed-hour utilization, this input low (empty: never)"),
        TableColumn(
            T.BREAK_EVEN_HIGH, "fraction", "break-even billed-hour utilization, this input high (empty: never)"
        ),
        TableColumn(T.CHANGES_CHEAPEST, "", "the cheapest scenario changes at either end"),
        TableColumn(T.LIMIT, "", f"why a moved value is not the configured value × (1 ± {fraction:g}) (empty: it is)"),
    )
    return Table("tornado", f"Each input ±{pct} on its own: the recommended plan's cost and its margin over the "
                 "runner-up (positive: it stays the cheapest), and all-cloud − the cheapest owning plan (positive: "
                 "owning is cheaper); inputs set to 0 are left out.", cols, tuple(rows), "cost model rerun per input")


def growth_table(cfg: Config, build: Build, rates: tuple[float, ...]) -> Table:
    G = GrowthColumns
    rows = []
    tl = costs.timeline(cfg)
    for g in rates:
        b = build(cfg, g)
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
