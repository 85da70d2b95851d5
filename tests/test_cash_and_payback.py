"""Cash and payback: each plan's cash month by month (capital when it is paid, running costs, resale at the
end), never the present value divided by months, and for every plan that buys, its simple payback against
renting everything (a research lab: capex $3.05 M, ~25-30 months at default prices)."""

from __future__ import annotations

import math

import pytest
from tests.analysis_helpers import gpu_rows, rollups

from gpuaudit.analysis import analyze_rollups
from gpuaudit.analysis.config import load_config
from gpuaudit.analysis.overrides import Overrides

GPUS = 64


def _lab() -> list[dict]:  # type: ignore[type-arg]
    """A new build: 64 rented GPUs held all the time at 80 % SM activity, drawing 700 W."""
    return [r for g in range(GPUS) for r in gpu_rows(f"n{g // 8}", f"G-{g}", 48 * 12, interval_s=300, sm=0.8,
                                                     procs=1, power_w=700.0)]


def test_a_plan_that_buys_has_cash_by_month_and_a_payback() -> None:
    cfg = load_config()
    r = analyze_rollups(rollups(_lab()), cfg, overrides=Overrides(current="cloud"))
    s = {x.id: x for x in r.costs.scenarios}
    own, rent = s["all-on-prem"], s["all-cloud"]
    o, c = cfg.on_prem, cfg.cloud
    assert own.owned_gpus == GPUS
    # by hand: capital at month 0, level running costs, renting the 64 GPUs flexibly (a reserved hour costs more)
    capex = GPUS * o.hardware_usd_per_gpu + o.networking_usd
    nodes = math.ceil(GPUS / o.gpus_per_node)
    running = (GPUS * 700 * o.pue * o.power_usd_per_kwh * 730 / 1000
               + o.maintenance_fraction_per_year * o.hardware_usd_per_gpu * GPUS / 12
               + o.staff_usd_per_month + (o.staff_usd_per_node_per_month + o.space_usd_per_node_per_month) * nodes)
    lst = c.instance_usd_per_hour / c.gpus_per_instance
    flexible = lst * c.spot_share * c.spot_multiplier * (1 + c.spot_interruptions_per_hour
                                                         * c.spot_lost_hours_per_interruption) / (1 - c.reserved_share)
    renting = GPUS * 730 * flexible + c.egress_usd_per_gb * c.egress_gb_per_week * 52 / 12 + \
        c.managed_services_usd_per_month
    assert own.capex_usd == pytest.approx(capex, rel=1e-9)
    assert own.cash_usd_by_month[0] == pytest.approx(capex + running, rel=1e-9)
    assert own.cash_usd_by_month[1] == pytest.approx(running, rel=1e-9)
    assert len(own.cash_usd_by_month) == cfg.analysis.horizon_months
    assert own.cash_usd_by_month[-1] < running  # resale comes back in the last month
    assert rent.cash_usd_by_month[5] == pytest.approx(renting, rel=1e-9)
    # simple payback: capex ÷ (renting − running) months
    assert own.payback_months == pytest.approx(capex / (renting - running), rel=1e-9)
    assert 20 < own.payback_months < 36
    # the cash discounted as the model discounts (capital at month 0 undiscounted, running costs mid-month, resale
    # at the end) gives back the present value
    rate, months = cfg.analysis.discount_rate_per_year, cfg.analysis.horizon_months
    resale = own.cash_usd_by_month[-1] - running
    pv = capex + sum(running * (1 + rate) ** (-(m + 0.5) / 12) for m in range(months)) + resale * (1 + rate) ** (
        -months / 12)
    assert pv == pytest.approx(own.total.value, rel=1e-9)
    assert rent.payback_months is None and rent.capex_usd == 0


def test_selling_owned_gpus_brings_cash_back() -> None:
    """Keeping owned GPUs pays nothing in cash; a plan that sells some receives their value in month 0."""
    cfg = load_config()
    rows = [r for g in range(8) for r in gpu_rows("n1", f"G-{g}", 48 * 12, interval_s=300, sm=0.1,
                                                  procs=int(g < 2))]
    r = analyze_rollups(rollups(rows), cfg)
    s = {x.id: x for x in r.costs.scenarios}
    o = cfg.on_prem
    value = o.hardware_usd_per_gpu * (o.salvage_fraction + (1 - o.salvage_fraction)
                                      * (1 - o.owned_age_years / o.amortization_years))
    stay, cloud = s["stay-as-is"], s["all-cloud"]
    assert stay.cash_usd_by_month[0] == pytest.approx(stay.cash_usd_by_month[1], rel=1e-9)  # nothing at month 0
    assert cloud.cash_usd_by_month[0] == pytest.approx(cloud.cash_usd_by_month[1] - 8 * value, rel=1e-9)
