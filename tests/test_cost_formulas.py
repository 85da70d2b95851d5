"""Figures checked against values derived by hand from docs/analyzer.md, at non-trivial settings (a discount
rate, a PUE above 1), so that a one-line slip in a cost formula, the discounting or the hurdle shows."""

from __future__ import annotations

import numpy as np
import pytest
from tests.analysis_helpers import gpu_rows, rollups

from gpuaudit import schema
from gpuaudit.analysis import analyze_rollups
from gpuaudit.analysis.config import load_config
from gpuaudit.analysis.costs import owned_cost, timeline
from gpuaudit.analysis.hybrid import size


def test_owned_power_is_charged_at_the_facilitys_pue() -> None:
    """Planted bug: `* pue` dropped from owned power."""
    cfg = load_config().replace("on_prem", pue=1.5, power_usd_per_kwh=0.10)
    cfg = cfg.replace("analysis", discount_rate_per_year=0.0, horizon_months=12)
    parts = owned_cost(cfg, timeline(cfg), 10.0, 700.0)
    # 10 GPUs x 700 W x 1.5 = 10.5 kW; x $0.10/kWh x 730 h x 12 months
    assert float(parts["power"][0]) == pytest.approx(10.5 * 0.10 * 730 * 12)


def test_residual_value_is_discounted_from_the_horizons_end() -> None:
    """Planted bug: the residual credit not discounted (received at the end of the horizon, not today)."""
    price = 30_000.0
    cfg = load_config().replace("on_prem", capex_timing="upfront", amortization_years=4.0, salvage_fraction=0.1,
                                hardware_usd_per_gpu=price, networking_usd=0.0, networking_usd_per_gpu=0.0)
    cfg = cfg.replace("analysis", discount_rate_per_year=0.10, horizon_months=24)
    parts = owned_cost(cfg, timeline(cfg), 10.0, 700.0)
    # After 2 of 4 years: salvage + (1 - salvage) x half its life left = 0.55 of the price, received in 2 years.
    assert float(parts["residual_value"][0]) == pytest.approx(-10 * price * 0.55 / 1.10**2)
    assert float(parts["hardware"][0]) == pytest.approx(10 * price)  # bought today: not discounted


def test_the_hybrid_hurdle_includes_a_new_builds_network() -> None:
    """Planted bug: the new build's fixed network dropped from the hybrid's fixed-cost hurdle."""
    cfg = load_config().replace("on_prem", capex_timing="upfront", networking_usd=50_000.0,
                                networking_amortization_years=5.0, staff_usd_per_month=10_000.0)
    cfg = cfg.replace("analysis", discount_rate_per_year=0.0, horizon_months=36)
    s = size(cfg, timeline(cfg), np.full(100, 4.0), 1e18, 400.0, 0, 0.0)
    # staff over 36 months + the network bought today less its value after 3 of its 5 years (no salvage)
    assert s.fixed_usd == pytest.approx(10_000.0 * 36 + 50_000.0 * (1 - (1 - 3 / 5)))
    owned = size(cfg, timeline(cfg), np.full(100, 4.0), 1e18, 400.0, 8, 0.0)  # GPUs owned already: no new build
    assert owned.fixed_usd == pytest.approx(10_000.0 * 36)


def _two_streams_one_hour(sm_dcgm: float, duty_nvml: float) -> list[dict]:  # type: ignore[type-arg]
    dcgm = gpu_rows("n1", "GPU-a", 12, interval_s=300, sm=sm_dcgm, procs=1, source=schema.SOURCE_PROM_DCGM)
    nvml = gpu_rows("n1", "GPU-a", 60, interval_s=60, sm=None, duty=duty_nvml, procs=1, source=schema.SOURCE_NVML)
    return dcgm + nvml


def test_a_dcgm_import_wins_over_the_duty_cycle_agent_on_the_same_gpu_hour() -> None:
    """The documented precedence DCGM import > duty-cycle agent (`nvml`): the import's SM activity counts, the
    agent's duty cycle (an upper bound) does not, and the hour is not flagged as an upper bound."""
    r = analyze_rollups(rollups(_two_streams_one_hour(0.30, 0.90)), load_config())
    u = r.utilization
    assert u.observed_gpu_hours.value == pytest.approx(1.0)
    assert u.real_gpu_hours.value == pytest.approx(0.30)
    assert not u.real_is_upper_bound
    assert r.data_quality.overlap_gpu_hours.value == pytest.approx(1.0)  # the agent's hour, removed


@pytest.mark.parametrize(("sm", "idle"), [(0.0099, True), (0.0101, False), (0.05, False)])
def test_idle_held_means_sm_activity_below_one_percent(sm: float, idle: bool) -> None:
    """Idle-held is held by a process while SM activity < 1 % (sql/analysis_streams.sql): the boundary."""
    r = analyze_rollups(rollups(gpu_rows("n1", "GPU-a", 60, interval_s=60, sm=sm, procs=1)), load_config())
    assert r.utilization.idle_held_gpu_hours.value == pytest.approx(1.0 if idle else 0.0)


def test_instance_billing_break_even_from_a_bill_priced_by_hand() -> None:
    """The instance-billing break-even was checked only by identities that hold by definition. Here the compute
    bill is priced by hand: 4 GPUs held around the clock bill one whole 8-GPU instance, all of it reserved."""
    from gpuaudit.analysis.costs import owned_total
    from gpuaudit.analysis.fleet import Measured, fleet
    from gpuaudit.analysis.result import Deployment
    from gpuaudit.analysis.scenarios import cost_block

    months = 36
    cfg = load_config().replace("cloud", billing_granularity="instance", gpus_per_instance=8,
                                instance_usd_per_hour=55.04, reserved_share=1.0, reserved_multiplier=0.62,
                                egress_usd_per_gb=0.09, egress_gb_per_week=500.0)
    cfg = cfg.replace("analysis", discount_rate_per_year=0.0, horizon_months=months)
    held = np.full(2016, 4.0)  # a week of 5-minute buckets
    m = Measured(w=8 * 168.0, r=4 * 168.0, s=1 * 168.0, s_lower=168.0, gpus_seen=8, gpu_equivalents=8.0,
                 held=held, reporting=np.full(held.size, 8.0), day=np.arange(held.size) // 288,
                 dt_hours=300 / 3600, measured_w=400.0, current=Deployment.ON_PREM)
    be = cost_block(cfg, m, what_if=False).break_even
    compute = 8 * 730.0 * (55.04 / 8) * 0.62 * months  # one instance, reserved 24/7
    c = cfg.cloud
    egress = 0.09 * 500.0 * 52 / 12 * months
    fixed_cloud = egress + c.managed_services_usd_once + c.managed_services_usd_per_month * months
    fl = fleet(cfg, m)
    tl = timeline(cfg)
    own = float(owned_total(owned_cost(cfg, tl, 8.0, 400.0, fl.existing, fl.age_years))[0])
    sold = float(owned_total(owned_cost(cfg, tl, 0.0, 400.0, fl.existing, fl.age_years))[0])
    assert be.measured_billed == pytest.approx(0.5)
    assert be.rent_variable_usd == pytest.approx(compute)
    assert be.held == pytest.approx(0.5 * (own - sold - fixed_cloud) / compute)


def test_a_sorted_series_is_not_sorted_again() -> None:
    """29: the sizing sorted the same demand series over a thousand times per warm fleet run (0.37 s of 3 s);
    it now sorts once and every helper takes the sorted series as it is. An unsorted one is still sorted, and
    the helpers answer the same either way."""
    from gpuaudit.analysis import costs, hybrid

    rng = np.random.default_rng(7)
    d = rng.gamma(2.0, 3.0, 5000)
    s = np.sort(d)
    assert costs.ascending(s) is s and np.array_equal(costs.ascending(d), s)
    assert np.array_equal(costs.ascending(np.array([2.0, np.nan, 1.0])), np.array([1.0, 2.0, np.nan]), equal_nan=True)
    n = np.arange(0, 20, dtype=float)
    assert np.allclose(hybrid.overflow_mean(d, n), hybrid.overflow_mean(s, n), rtol=1e-12)
    pm = costs.PowerModel(100.0, 400.0, 250.0)
    assert np.allclose(pm.watts(d, n), pm.watts(s, n), rtol=1e-12)
