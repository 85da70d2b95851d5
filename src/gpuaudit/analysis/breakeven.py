"""Break-even: the billed-hour utilization u* at which renting all the demand costs the same as owning the
fleet, and the curve the report draws (renting grows with the hours billed, owning is flat)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuaudit.analysis import costs
from gpuaudit.analysis.columns import BreakEvenCurveColumns
from gpuaudit.analysis.config import Config
from gpuaudit.analysis.figure import Table, TableColumn
from gpuaudit.analysis.fleet import Fleet, Measured, fleet_mean


@dataclass(frozen=True)
class BreakEvenCalc:
    held: float | None  # u*: the billed-hour utilization at which renting costs the same as owning the reference
    measured_billed: float  # the billed-hour utilization: coverage-weighted billed demand ÷ fleet GPUs
    own_reference: str  # what renting is compared with
    own_usd: float
    cloud_usd: float
    verdict: str  # "cloud" or "on-prem": the cheaper of all-cloud and the reference
    rent_fixed_usd: float = 0.0  # renting's part that does not scale with demand (sell owned GPUs, egress…)
    rent_variable_usd: float = 0.0  # renting's compute bill at today's demand (k = 1)



def own_reference(fl: Fleet) -> str:
    """What renting is compared with: owning the whole fleet, named by how much of it is owned today (never more
    than the fleet: `fleet()` refuses that)."""
    if fl.existing == 0:
        return "buy-the-fleet"
    return "keep-the-owned-fleet" if fl.existing >= fl.gpus else "keep-owned-and-buy-the-rest"

def break_even(cfg: Config, tl: costs.Timeline, m: Measured, fl: Fleet, held: np.ndarray,
               power: costs.PowerModel, all_cloud: dict[str, float]) -> BreakEvenCalc:
    """The billed-hour utilization u* at which renting k × today's billed demand (its bill scaled by k) costs the
    same as owning the whole fleet: keeping the GPUs owned today and buying the rest.

    Renting is linear in k: the fixed part (egress, managed services, selling the owned GPUs) plus k × the
    compute bill. Scaling the bill, not the demand, keeps instance billing from turning u* into the point where
    one more instance-hour tips the sum."""
    n_ref = fl.gpus
    ref = own_reference(fl)
    watts = power.watts(held, float(n_ref))
    own_ref = float(costs.owned_total(costs.owned_cost(cfg, tl, float(n_ref), watts, fl.existing,
                                                       fl.age_years))[0])
    own_zero = float(costs.owned_total(costs.owned_cost(cfg, tl, 0.0, watts, fl.existing, fl.age_years))[0])
    # billed GPU-hours ÷ W without elastic GPUs: never below believed or held-hour (fleet.fleet_mean)
    measured = fleet_mean(m, fl, held)
    all_cloud_usd = _total(all_cloud)
    # data residency forbids renting: owning is the only answer, whatever u* says
    verdict = ("cloud" if all_cloud_usd < own_ref and not (m.data_residency or m.latency_share > 0)
               else "on-prem")
    variable = all_cloud["cloud_reserved"] + all_cloud["cloud_flexible"]  # the all-cloud scenario's compute bill
    fixed = own_zero + _total(costs.cloud_fixed(cfg, tl))
    if measured <= 0 or variable <= 1e-9:
        return BreakEvenCalc(None, measured, ref, own_ref, all_cloud_usd, verdict, fixed, variable)
    k = (own_ref - fixed) / variable
    return BreakEvenCalc(max(k, 0.0) * measured, measured, ref, own_ref, all_cloud_usd, verdict, fixed, variable)


_BREAK_EVEN_GRID = tuple(i / 100 for i in range(0, 101, 2))  # billed-hour utilizations the curve is drawn at


def break_even_curve(b: BreakEvenCalc, fleet_gpus: int, horizon_months: int) -> Table:
    """Renting and owning per fleet GPU-year (present value) against billed-hour utilization: renting k × today's
    billed demand costs fixed + k × compute, owning the fleet costs the same at any utilization, and the two meet
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
            for x in _BREAK_EVEN_GRID
        )
    cols = (
        TableColumn(c.BILLED_UTILIZATION, "fraction", "billed-hour utilization: the share of the fleet's hours "
                    "the cloud would bill (held or, where larger, allocated)"),
        TableColumn(c.CLOUD_USD_PER_GPU_YEAR, "USD", "renting: (fixed part + compute bill × this utilization ÷ "
                    "the measured one) ÷ fleet GPUs ÷ years"),
        TableColumn(c.OWNED_USD_PER_GPU_YEAR, "USD", f"owning ({b.own_reference}): its total ÷ fleet GPUs ÷ years"),
    )
    return Table("break_even_curve", "Renting and owning per fleet GPU-year (present value) by billed-hour "
                 "utilization.", cols, rows, "cost model × fleet-scaled demand")


def _total(parts: dict[str, float]) -> float:
    return float(sum(parts.values()))
