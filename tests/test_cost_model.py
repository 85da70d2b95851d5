"""The cost model: the article preset reproduces the article exactly, the default model's formulas,
config validation, break-even, hybrid sizing (N*, critical fractile) and monotonicity properties."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.analysis_helpers import gpu_rows, rollups

from gpuaudit.analysis import analyze_rollups
from gpuaudit.analysis.config import load_config
from gpuaudit.analysis.costs import (
    HOURS_PER_MONTH,
    break_even_utilization,
    cloud_cost,
    mix_multiplier,
    on_prem_cost,
    rates,
)
from gpuaudit.analysis.hybrid import critical_fractile_n, overflow_hours, size
from gpuaudit.errors import GpuauditError

# --------------------------------------------------------------------------------------------- the article


def article_total_cost_cloud(instances, hours_per_week, weeks, spot=True, reserved=False):  # type: ignore[no-untyped-def]
    """The article's function, verbatim."""
    hourly_rate = 40.0
    if spot:
        hourly_rate *= 0.35
    if reserved:
        hourly_rate *= 0.50
    compute = instances * hours_per_week * weeks * hourly_rate
    egress = 0.10 * 500
    managed_services = 2000
    return compute + egress * weeks + managed_services


def article_total_cost_onprem(gpus, months, deprec_years=3, power_cost=0.12):  # type: ignore[no-untyped-def]
    """The article's function, verbatim."""
    hardware = 30000 * gpus
    annual_power = gpus * 4000 * power_cost * 24 * 365 / 1000
    networking = 50000
    staff = 15000 * months
    maintenance = 0.02 * hardware * months / 12
    total_hw = hardware / (deprec_years * 12) * months
    return total_hw + annual_power * (months / 12) + networking + staff + maintenance


def test_article_preset_reproduces_the_article_example() -> None:
    cfg = load_config(preset="article")
    cloud = sum(cloud_cost(cfg, 100 * 40 * 52, 12).values())  # 100 units, 40 h/week, 52 weeks, spot
    watts, _ = 4000.0, "configured"
    onprem = sum(on_prem_cost(cfg, 100, 12, rates(cfg, 250.0).power_w).values())  # measured power is ignored
    assert round(cloud, 2) == 2_916_600.00
    assert round(onprem, 2) == 1_710_480.00
    assert rates(cfg, 250.0).power_w == watts
    assert round(cloud, 2) == round(article_total_cost_cloud(100, 40, 52), 2)
    assert round(onprem, 2) == round(article_total_cost_onprem(100, 12), 2)


@given(units=st.integers(1, 500), hours=st.integers(1, 168), months=st.integers(1, 60))
@settings(max_examples=60, deadline=None)
def test_article_preset_matches_the_article_functions_everywhere(units: int, hours: int, months: int) -> None:
    cfg = load_config(preset="article")
    weeks = months * 52 / 12
    assert sum(cloud_cost(cfg, units * hours * weeks, months).values()) == pytest.approx(
        article_total_cost_cloud(units, hours, weeks), rel=1e-12)
    assert sum(on_prem_cost(cfg, units, months, 4000.0).values()) == pytest.approx(
        article_total_cost_onprem(units, months), rel=1e-12)


def test_article_preset_used_by_the_analysis_sets_horizon_and_power() -> None:
    r = analyze_rollups(rollups(gpu_rows("n1", "GPU-a", 180, sm=0.5, procs=1)), load_config(preset="article"))
    assert r.costs.preset == "article" and r.costs.horizon_months == 12
    assert r.costs.power_source == "configured" and r.costs.power_w_per_gpu.value == 4000.0


# ------------------------------------------------------------------------------------------ default model


def test_default_cloud_price_is_per_gpu_and_mixed() -> None:
    cfg = load_config()
    r = rates(cfg, None)
    assert r.cloud_list == 40.0 / 8
    expected_mix = 0.7 * 0.35 * (1 + 0.02 * 0.25) + 0.3 * 0.5
    assert mix_multiplier(cfg) == pytest.approx(expected_mix)
    assert r.cloud_effective == pytest.approx(5.0 * expected_mix)
    assert r.power_w == 700.0 and r.power_source == "configured"  # nothing measured → fallback


def test_default_cloud_cost_parts() -> None:
    cfg = load_config()
    parts = cloud_cost(cfg, 1000.0, 36)
    assert parts["cloud_compute"] == pytest.approx(1000 * 5.0 * mix_multiplier(cfg))
    assert parts["egress"] == pytest.approx(0.09 * 500 * 36 * 52 / 12)
    assert parts["managed_services"] == pytest.approx(2000 * 36)


def test_default_on_prem_cost_uses_measured_power_and_pue() -> None:
    cfg = load_config()
    watts = rates(cfg, 350.0).power_w
    assert watts == 350.0
    parts = on_prem_cost(cfg, 10, 36, watts)
    assert parts["power"] == pytest.approx(10 * 350 * 1.58 * 0.12 * HOURS_PER_MONTH * 36 / 1000)
    assert parts["hardware"] == pytest.approx(300_000.0)  # 36 of 36 months amortized
    assert parts["maintenance"] == pytest.approx(0.02 * 300_000 * 3)
    assert parts["staff"] == 15000 * 36 and parts["networking"] == 50000
    assert sum(on_prem_cost(cfg, 0, 36, watts).values()) == 0


def test_break_even_makes_both_sides_equal() -> None:
    cfg = load_config()
    u = break_even_utilization(cfg, 64, 36, 400.0)
    assert u is not None and 0 < u < 1
    hours = u * 64 * 36 * HOURS_PER_MONTH
    assert sum(cloud_cost(cfg, hours, 36).values()) == pytest.approx(sum(on_prem_cost(cfg, 64, 36, 400.0).values()))


# ---------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[cloud]\nspot_multiplier = "abc"', 'config error: cloud.spot_multiplier must be a number >= 0, got "abc"'),
        ("[cloud]\nspot_multiplier = -0.1", "cloud.spot_multiplier must be a number >= 0, got -0.1"),
        ("[on_prem]\nhardware_usd_per_gpu = -1", "on_prem.hardware_usd_per_gpu must be a number >= 0, got -1"),
        ("[cloud]\ngpus_per_instance = 2.5", "cloud.gpus_per_instance must be an integer >= 1, got 2.5"),
        ("[cloud]\nspot_share = true", "cloud.spot_share must be a number >= 0 and <= 1, got true"),
        ("[cloud]\nspot_discount = 0.3", "unknown key cloud.spot_discount"),
        ("[clouds]\nspot_multiplier = 0.3", "unknown section [clouds]"),
        ("[on_prem]\npower_source = \"solar\"", "on_prem.power_source must be one of measured, configured"),
        ("[cloud]\nspot_share = 0.9", "cloud.spot_share + cloud.reserved_share must be <= 1"),
        ("[decision]\ncloud_below = 0.8", "decision.cloud_below must be <= decision.on_prem_above"),
        ("[analysis]\ngrowth_rates = 0.1", "analysis.growth_rates must be a list of numbers"),
        ("cloud = 3", "cloud must be a table"),
        ('preset = "cheap"', "preset must be one of default, article"),
        ("[cloud\n", "is not valid TOML"),
    ],
)
def test_bad_config_names_the_key(tmp_path, text: str, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "costs.toml"
    path.write_text(text)
    with pytest.raises(GpuauditError) as e:
        load_config(path)
    assert message in str(e.value)
    assert "\n" not in str(e.value).strip() or "TOML" in str(e.value)


def test_config_file_overrides_and_records_its_source(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "mine.toml"
    path.write_text('preset = "article"\n[cloud]\ninstance_usd_per_hour = 32\n')
    cfg = load_config(path)
    assert cfg.preset == "article" and cfg.cloud.instance_usd_per_hour == 32.0 and cfg.cloud.gpus_per_instance == 1
    assert cfg.sources["cloud.instance_usd_per_hour"] == str(path)
    assert cfg.sources["cloud.gpus_per_instance"] == "article"


def test_missing_config_file_is_a_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(GpuauditError, match="cannot read"):
        load_config(tmp_path / "nope.toml")


# -------------------------------------------------------------------------------------------- sizing


def _brute_n_star(cfg, demand, dt_h, scale, months, watts):  # type: ignore[no-untyped-def]
    best = None
    for n in range(math.ceil(max(demand)) + 1):
        over = sum(max(d - n, 0) for d in demand) * dt_h * scale
        total = sum(on_prem_cost(cfg, n, months, watts).values()) + sum(
            cloud_cost(cfg, over, months, fixed=over > 1e-9).values())
        if best is None or total < best[1] - 1e-6:
            best = (n, total)
    return best[0]  # type: ignore[index]


def test_overflow_hours_matches_a_loop() -> None:
    d = np.array([0.0, 1.5, 3.0, 3.0, 7.25])
    for n in range(9):
        assert overflow_hours(d, np.array([float(n)]), 0.5)[0] == pytest.approx(sum(max(x - n, 0) for x in d) * 0.5)


def test_critical_fractile_by_hand() -> None:
    d = np.array([0, 1, 2, 3, 4, 4, 4, 4, 8, 8], dtype=float)
    assert critical_fractile_n(d, 2.0) == 4  # demand ≥ 4 in 60 % ≥ 50 % of the time; ≥ 5 only 20 %
    assert critical_fractile_n(d, 5.0) == 8  # 1/U = 20 %: demand reaches 8 20 % of the time
    assert critical_fractile_n(d, 0.9) == 0  # owning costs more per hour than renting: own nothing


def test_n_star_matches_the_critical_fractile_without_fixed_costs() -> None:
    cfg = load_config()
    cfg = cfg.replace("on_prem", staff_usd_per_month=0.0, networking_usd=0.0)
    cfg = cfg.replace("cloud", egress_gb_per_week=0.0, managed_services_usd_per_month=0.0)
    rng = np.random.default_rng(3)
    demand = rng.integers(0, 40, size=2000).astype(float)
    r = rates(cfg, 400.0)
    # With demand in whole GPUs and per-hour prices, the cost-minimizing N is the critical fractile
    # once trial hours are scaled to the horizon (scale makes one bucket-hour worth `scale` horizon hours).
    scale = 36 * HOURS_PER_MONTH / len(demand)
    s = size(cfg, demand, 1.0, scale, 36, 400.0, r.owned_marginal, r.cloud_effective)
    assert abs(s.n_star - s.critical_fractile_n) <= 1


@given(
    demand=st.lists(st.integers(0, 30), min_size=1, max_size=60),
    hw=st.floats(1000, 60000), staff=st.floats(0, 30000), price=st.floats(1, 80),
)
@settings(max_examples=60, deadline=None)
def test_n_star_never_exceeds_peak_and_is_the_minimum(demand: list[int], hw: float, staff: float,
                                                      price: float) -> None:
    cfg = load_config().replace("on_prem", hardware_usd_per_gpu=hw, staff_usd_per_month=staff)
    cfg = cfg.replace("cloud", instance_usd_per_hour=price)
    d = np.array(demand, dtype=float)
    r = rates(cfg, 300.0)
    scale = 36 * HOURS_PER_MONTH / len(d)
    s = size(cfg, d, 1.0, scale, 36, 300.0, r.owned_marginal, r.cloud_effective)
    assert 0 <= s.n_star <= max(demand)
    assert s.n_star == _brute_n_star(cfg, demand, 1.0, scale, 36, 300.0)


# ----------------------------------------------------------------------------------------- monotonicity

CLOUD_PRICES = ("instance_usd_per_hour", "spot_multiplier", "reserved_multiplier", "egress_usd_per_gb",
                "managed_services_usd_per_month", "managed_services_usd_once", "spot_interruptions_per_hour")
ONPREM_PRICES = ("hardware_usd_per_gpu", "networking_usd", "networking_usd_per_gpu", "staff_usd_per_month",
                 "maintenance_fraction_per_year", "power_usd_per_kwh", "pue")


@given(key=st.sampled_from(CLOUD_PRICES), base=st.floats(0, 100), bump=st.floats(0, 100),
       hours=st.floats(0, 1e6), months=st.integers(1, 60))
@settings(max_examples=80, deadline=None)
def test_cloud_cost_is_monotone_in_every_price(key: str, base: float, bump: float, hours: float,
                                               months: int) -> None:
    cfg = load_config()
    lo = cfg.replace("cloud", **{key: base})
    hi = cfg.replace("cloud", **{key: base + bump})
    assert sum(cloud_cost(hi, hours, months).values()) >= sum(cloud_cost(lo, hours, months).values()) - 1e-6


@given(key=st.sampled_from(ONPREM_PRICES), base=st.floats(1, 100), bump=st.floats(0, 100),
       gpus=st.integers(0, 500), months=st.integers(1, 60))
@settings(max_examples=80, deadline=None)
def test_on_prem_cost_is_monotone_in_every_price(key: str, base: float, bump: float, gpus: int,
                                                 months: int) -> None:
    cfg = load_config()
    lo = cfg.replace("on_prem", **{key: base})
    hi = cfg.replace("on_prem", **{key: base + bump})
    assert sum(on_prem_cost(hi, gpus, months, 500).values()) >= sum(on_prem_cost(lo, gpus, months, 500).values()) - 1e-6


@given(bump=st.floats(0.01, 2.0))
@settings(max_examples=15, deadline=None)
def test_scenario_totals_monotone_in_cloud_price(bump: float) -> None:
    roll = rollups(gpu_rows("n1", "GPU-a", 240, sm=lambda i: 0.1 * (i % 10), procs=lambda i: int(i % 3 > 0)))
    base = load_config()
    dearer = base.replace("cloud", instance_usd_per_hour=base.cloud.instance_usd_per_hour * (1 + bump))
    a = {s.id: s.total.value for s in analyze_rollups(roll, base).costs.scenarios}
    b = {s.id: s.total.value for s in analyze_rollups(roll, dearer).costs.scenarios}
    for sid in ("all-cloud", "all-cloud-right-sized", "hybrid"):
        assert b[sid] >= a[sid] - 1e-6
    assert b["all-on-prem"] == pytest.approx(a["all-on-prem"])


def test_tornado_and_growth_tables() -> None:
    roll = rollups(gpu_rows("n1", "GPU-a", 240, sm=0.5, procs=1) + gpu_rows("n1", "GPU-b", 240, sm=0.2, procs=1))
    r = analyze_rollups(roll, load_config())
    t = r.sensitivity.tornado
    assert len(t.rows) == 10 and r.sensitivity.fraction == 0.3
    swings = [row["swing_usd"] for row in t.rows]
    assert swings == sorted(swings, reverse=True)
    hw = next(row for row in t.rows if row["key"] == "on_prem.hardware_usd_per_gpu")
    assert hw["low_value"] == pytest.approx(21000) and hw["high_value"] == pytest.approx(39000)
    assert hw["high_diff_usd"] < hw["base_diff_usd"] < hw["low_diff_usd"]  # dearer hardware: owning pays less
    g = {row["growth_per_year"]: row for row in r.sensitivity.growth.rows}
    assert set(g) == {0.0, 0.25, 0.5, 1.0}
    assert g[1.0]["all_cloud_usd"] > g[0.0]["all_cloud_usd"]
    # Both GPUs are always held: growing demand no longer fits today's fleet and is rented on top.
    assert g[1.0]["stay_as_is_usd"] > g[0.0]["stay_as_is_usd"]
    stay = next(s for s in r.costs.scenarios if s.id == "stay-as-is")
    assert stay.cloud_gpu_hours == 0 and stay.owned_gpus == 2
    all_cloud = next(s.total.value for s in r.costs.scenarios if s.id == "all-cloud")
    assert g[0.0]["all_cloud_usd"] == pytest.approx(all_cloud)


def test_scenarios_are_consistent() -> None:
    roll = rollups(gpu_rows("n1", "GPU-a", 240, sm=0.5, procs=1) + gpu_rows("n1", "GPU-b", 240, sm=0.0))
    r = analyze_rollups(roll, load_config(), current="cloud")
    s = {x.id: x for x in r.costs.scenarios}
    assert list(s) == ["stay-as-is", "all-cloud", "all-cloud-right-sized", "all-on-prem", "hybrid"]
    scale = r.costs.scale
    assert scale == pytest.approx(36 * HOURS_PER_MONTH / 4)
    assert s["stay-as-is"].cloud_gpu_hours == pytest.approx(8 * scale)  # current cloud pays W
    assert s["all-cloud"].cloud_gpu_hours == pytest.approx(4 * scale)  # R
    assert s["all-cloud-right-sized"].cloud_gpu_hours == pytest.approx(2 / 0.7 * scale)  # S / 0.7
    assert s["all-on-prem"].owned_gpus == 1
    for x in s.values():
        assert x.total.value == pytest.approx(sum(x.components.values()))
    assert r.costs.cheapest == min(s.values(), key=lambda x: x.total.value).id


def test_egress_override_reaches_the_cost_model() -> None:
    roll = rollups(gpu_rows("n1", "GPU-a", 240, sm=0.5, procs=1))
    r = analyze_rollups(roll, load_config(), egress_gb_per_week=0.0)
    assert next(x for x in r.costs.scenarios if x.id == "all-cloud").components["egress"] == 0.0
    assert r.decision.inputs.egress_gb_per_week == 0.0
    with pytest.raises(GpuauditError, match="egress"):
        analyze_rollups(roll, load_config(), egress_gb_per_week=-5.0)


def test_config_replace_keeps_other_values() -> None:
    cfg = load_config()
    new = cfg.replace("cloud", spot_multiplier=0.4)
    assert new.cloud.spot_multiplier == 0.4 and new.on_prem == cfg.on_prem
    assert dataclasses.replace(cfg).cloud == cfg.cloud
