"""The cost model: the article preset reproduces the article exactly, present values, capex timing, residual
and resale value, networking amortized like hardware, reservations billed 24/7, instance granularity, hybrid
sizing (brute force, critical fractile, fixed-cost hurdle), monotonicity, sensitivity and the cost bootstrap,
config validation, and the sources of the defaults."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.analysis_helpers import gpu_rows, rollups

from gpuaudit.analysis import analyze_rollups
from gpuaudit.analysis.config import Config, load_config, preset_comments
from gpuaudit.analysis.costs import (
    HOURS_PER_MONTH,
    Timeline,
    best_reservation,
    billable,
    cloud_bill,
    cloud_cost,
    cloud_prices,
    owned_cost,
    owned_total,
    power_watts,
    resale_value,
    timeline,
)
from gpuaudit.analysis.hybrid import critical_fractile_n, overflow_mean, size
from gpuaudit.analysis.overrides import Overrides
from gpuaudit.errors import GpuauditError


def _owned(cfg: Config, gpus: float, months: float, watts: float) -> dict[str, float]:
    """Building and running a new fleet of `gpus` GPUs over `months`, by component."""
    return {k: float(v[0]) for k, v in owned_cost(cfg, timeline(cfg, months), float(gpus), watts).items()}


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
    watts, source = power_watts(cfg, 250.0)  # measured power is ignored: the article's 4000 W
    onprem = sum(_owned(cfg, 100, 12, watts).values())
    assert (watts, source) == (4000.0, "configured")
    assert round(cloud, 2) == 2_916_600.00
    assert round(onprem, 2) == 1_710_480.00
    assert round(cloud, 2) == round(article_total_cost_cloud(100, 40, 52), 2)
    assert round(onprem, 2) == round(article_total_cost_onprem(100, 12), 2)


@given(units=st.integers(1, 500), hours=st.integers(1, 168), months=st.integers(1, 36))
@settings(max_examples=60, deadline=None)
def test_article_preset_matches_the_article_functions_everywhere(units: int, hours: int, months: int) -> None:
    """Within the hardware's 3-year life (past it the article keeps paying instalments; gpuaudit buys once and
    says no refresh is priced)."""
    cfg = load_config(preset="article")
    weeks = months * 52 / 12
    assert sum(cloud_cost(cfg, units * hours * weeks, months).values()) == pytest.approx(
        article_total_cost_cloud(units, hours, weeks), rel=1e-12)
    assert sum(_owned(cfg, units, months, 4000.0).values()) == pytest.approx(
        article_total_cost_onprem(units, months), rel=1e-12)


def test_article_preset_used_by_the_analysis_sets_horizon_and_power() -> None:
    r = analyze_rollups(rollups(gpu_rows("n1", "GPU-a", 180, sm=0.5, procs=1)), load_config(preset="article"))
    assert r.costs.preset == "article" and r.costs.horizon_months == 12
    assert r.costs.power_source == "configured" and r.costs.power_w_per_gpu.value == 4000.0
    assert r.costs.discount_rate_per_year == 0.0 and r.costs.annuity_months == 12.0


# ------------------------------------------------------------------------------------------ present value


def test_timeline_discounts_mid_month_and_at_the_end() -> None:
    tl = Timeline(24, 0.10)
    assert tl.factors[0] == pytest.approx(1.1 ** (-0.5 / 12))
    assert tl.factors[-1] == pytest.approx(1.1 ** (-23.5 / 12))
    assert tl.annuity == pytest.approx(sum(1.1 ** (-(m + 0.5) / 12) for m in range(24)))
    assert tl.end == pytest.approx(1.1 ** -2)
    assert Timeline(24, 0.0).annuity == 24 and Timeline(24, 0.0).end == 1.0
    assert tl.mean_growth(0.0) == pytest.approx(1.0)
    assert 1.0 < tl.mean_growth(0.5) < 1.5**2


def test_discounting_lowers_running_costs_not_upfront_capital() -> None:
    cfg = load_config().replace("on_prem", salvage_fraction=0.0, staff_usd_per_month=0.0,
                                staff_usd_per_node_per_month=0.0, space_usd_per_node_per_month=0.0,
                                networking_usd=0.0)
    plain = cfg.replace("analysis", discount_rate_per_year=0.0)
    a, b = _owned(plain, 8, 36, 500.0), _owned(cfg, 8, 36, 500.0)
    assert a["hardware"] == b["hardware"] == 8 * cfg.on_prem.hardware_usd_per_gpu  # paid at month 0
    assert b["power"] == pytest.approx(a["power"] * timeline(cfg).annuity / 36)
    assert b["power"] < a["power"]


def test_upfront_capex_is_bought_then_resold_spread_is_straight_line() -> None:
    cfg = load_config().replace("analysis", discount_rate_per_year=0.0)
    o = cfg.on_prem
    up = _owned(cfg, 16, 24, 500.0)
    # bought now, worth salvage + (1 − salvage) × (1 − 2/3) at 24 months of a 36-month life
    assert up["hardware"] == pytest.approx(16 * o.hardware_usd_per_gpu)
    value = 16 * o.hardware_usd_per_gpu * (o.salvage_fraction + (1 - o.salvage_fraction) / 3)
    net_value = o.networking_usd * (1 - 2 / o.networking_amortization_years)
    assert up["residual_value"] == pytest.approx(-(value + net_value))
    spread = _owned(cfg.replace("on_prem", capex_timing="spread"), 16, 24, 500.0)
    assert spread["hardware"] == pytest.approx(16 * o.hardware_usd_per_gpu / 36 * 24)
    assert spread["residual_value"] == 0.0
    # networking is amortized like hardware, over its own life
    assert spread["networking"] == pytest.approx(o.networking_usd / (o.networking_amortization_years * 12) * 24)
    # with no salvage, a zero rate and horizon = life, both timings cost the same
    same = cfg.replace("on_prem", salvage_fraction=0.0, networking_amortization_years=3.0)
    u = sum(_owned(same, 16, 36, 500.0).values())
    s = sum(_owned(same.replace("on_prem", capex_timing="spread"), 16, 36, 500.0).values())
    assert u == pytest.approx(s)


def test_resale_value_falls_to_salvage() -> None:
    cfg = load_config().replace("on_prem", salvage_fraction=0.1, amortization_years=4.0)
    assert resale_value(cfg, 0.0) == 1.0
    assert resale_value(cfg, 2.0) == pytest.approx(0.1 + 0.9 * 0.5)
    assert resale_value(cfg, 4.0) == pytest.approx(0.1) == resale_value(cfg, 9.0)


def test_owning_with_an_existing_fleet_keeps_sells_and_buys() -> None:
    cfg = load_config().replace("analysis", discount_rate_per_year=0.0)
    tl = timeline(cfg)
    price = cfg.on_prem.hardware_usd_per_gpu
    age = 1.0
    parts = owned_cost(cfg, tl, np.array([0.0, 6.0, 8.0, 10.0]), 500.0, existing=8, existing_age_years=age)
    # 0: sell all 8 now; 6: sell 2; 8: keep all (nothing bought, no new network); 10: buy 2
    now = resale_value(cfg, age) * price
    assert list(parts["owned_value_kept"]) == pytest.approx([0.0, 6 * now, 8 * now, 8 * now])
    assert list(parts["hardware"]) == pytest.approx([0.0, 0.0, 0.0, 2 * price])
    assert parts["networking"][2] == 0.0 and parts["networking"][0] == 0.0
    assert parts["staff"][0] == 0.0 and parts["staff"][1] > 0
    end = resale_value(cfg, age + 3.0) * price
    assert parts["residual_value"][2] == pytest.approx(-8 * end)


# ----------------------------------------------------------------------------------------------- cloud


def test_default_cloud_prices() -> None:
    cfg = load_config()
    p = cloud_prices(cfg)
    c = cfg.cloud
    assert p.list == pytest.approx(c.instance_usd_per_hour / 8)
    flexible_mix = (c.spot_share * c.spot_multiplier * (1 + c.spot_interruptions_per_hour *
                                                         c.spot_lost_hours_per_interruption)
                    + (1 - c.spot_share - c.reserved_share)) / (1 - c.reserved_share)
    assert p.flexible == pytest.approx(p.list * flexible_mix)
    assert p.reserved == pytest.approx(p.list * c.reserved_multiplier)
    assert p.blended == pytest.approx(c.reserved_share * p.reserved + (1 - c.reserved_share) * p.flexible)
    assert p.unit == 1


def test_reservations_are_billed_around_the_clock() -> None:
    """Demand of 8 GPUs half the time: a reservation covering 30 % of the hours idles the other half."""
    cfg = load_config().replace("analysis", discount_rate_per_year=0.0)
    demand = np.array([8.0, 0.0] * 50)
    k = 2.4  # the reservation whose hours cover 30 %: Σ min(d, K) = 50 K = 0.3 × 400
    bill = cloud_bill(cfg, timeline(cfg), k, float(np.maximum(demand - k, 0).mean()))
    p = cloud_prices(cfg)
    assert bill["cloud_reserved"] == pytest.approx(k * HOURS_PER_MONTH * 36 * p.reserved)  # 24/7, idle or not
    assert bill["cloud_flexible"] == pytest.approx((8 - k) / 2 * HOURS_PER_MONTH * 36 * p.flexible)
    # steady demand of 4 GPUs, 30 % of its hours reserved: the same as the blended price per GPU-hour
    ks = 0.3 * 4.0
    flat = cloud_bill(cfg, timeline(cfg), ks, 4.0 - ks)
    assert flat["cloud_reserved"] + flat["cloud_flexible"] == pytest.approx(4 * HOURS_PER_MONTH * 36 * p.blended)


def test_instance_granularity_bills_whole_instances() -> None:
    assert list(billable(np.array([0.0, 0.5, 3.0, 8.0, 8.1]), 8)) == [0.0, 8.0, 8.0, 8.0, 16.0]
    assert list(billable(np.array([3.0]), 1)) == [3.0]
    rows = [r for g in range(3) for r in gpu_rows("n1", f"GPU-{g}", 48 * 12, interval_s=300, sm=0.5, procs=1)]
    gpu = analyze_rollups(rollups(rows), load_config(), overrides=Overrides(current="cloud"))
    inst = analyze_rollups(rollups(rows), load_config().replace("cloud", billing_granularity="instance"),
                           overrides=Overrides(current="cloud"))
    a = next(s for s in gpu.costs.scenarios if s.id == "all-cloud")
    b = next(s for s in inst.costs.scenarios if s.id == "all-cloud")
    assert b.cloud_gpu_hours == pytest.approx(a.cloud_gpu_hours * 8 / 3)  # 3 GPUs held → one 8-GPU instance


# ---------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[cloud]\nspot_multiplier = "abc"', 'config error: cloud.spot_multiplier must be a number >= 0 and <= 100, '
                                             'got "abc"'),
        ("[cloud]\nspot_multiplier = -0.1", "cloud.spot_multiplier must be a number >= 0 and <= 100, got -0.1"),
        ("[on_prem]\nhardware_usd_per_gpu = -1", "on_prem.hardware_usd_per_gpu must be a number >= 0"),
        ("[on_prem]\nhardware_usd_per_gpu = 1e300", "on_prem.hardware_usd_per_gpu must be a number >= 0 and <= 1e+12"),
        ("[on_prem]\nhardware_usd_per_gpu = inf", "on_prem.hardware_usd_per_gpu must be a number"),
        ("[cloud]\ngpus_per_instance = 2.5", "cloud.gpus_per_instance must be an integer >= 1"),
        ("[cloud]\nspot_share = true", "cloud.spot_share must be a number >= 0 and <= 1, got true"),
        ("[cloud]\nspot_discount = 0.3", "unknown key cloud.spot_discount"),
        ("[clouds]\nspot_multiplier = 0.3", "unknown section [clouds]"),
        ("[on_prem]\npower_source = \"solar\"", "on_prem.power_source must be one of measured, configured"),
        ("[on_prem]\ncapex_timing = \"later\"", "on_prem.capex_timing must be one of upfront, spread"),
        ("[cloud]\nbilling_granularity = \"rack\"", "cloud.billing_granularity must be one of gpu, instance"),
        ("[cloud]\nspot_share = 0.9", "cloud.spot_share + cloud.reserved_share + cloud.capacity_block_share must be"),
        ("[decision]\ncloud_below = 0.8", "decision.cloud_below must be <= decision.on_prem_above"),
        ("[analysis]\ngrowth_rates = 0.1", "analysis.growth_rates must be a list of numbers"),
        ("[analysis]\ndiscount_rate_per_year = 2", "analysis.discount_rate_per_year must be a number >= 0 and <= 1"),
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


def test_config_that_is_not_utf8_is_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"[cloud]\n# caf\xe9\nspot_share = 0.5\n")
    with pytest.raises(GpuauditError, match="not UTF-8"):
        load_config(path)


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


_PRICES = ("cloud.instance_usd_per_hour", "cloud.spot_multiplier", "cloud.reserved_multiplier",
           "cloud.capacity_block_multiplier", "on_prem.hardware_usd_per_gpu", "on_prem.staff_usd_per_node_per_month",
           "on_prem.space_usd_per_node_per_month", "on_prem.space_usd_per_kw_per_month", "cloud.egress_usd_per_gb",
           "cloud.spot_interruptions_per_hour")


@pytest.mark.parametrize("key", _PRICES)
def test_default_prices_carry_a_source_and_a_date(key: str) -> None:
    comment = preset_comments("default")[key]
    dated = re.search(r"\b20\d\d\b", comment)
    assert dated or "gpuaudit's assumption" in comment, comment


# -------------------------------------------------------------------------------------------- sizing


def _brute(cfg, demand, existing=0):  # type: ignore[no-untyped-def]
    tl = timeline(cfg)
    best = None
    for n in range(1, math.ceil(max(demand)) + 1):
        over = float(np.maximum(np.asarray(demand, float) - n, 0).mean())
        total = float(owned_total(owned_cost(cfg, tl, float(n), 300.0, existing))[0]) + sum(
            cloud_bill(cfg, tl, 0.0, over).values())
        if best is None or total < best[1] - 1e-6:
            best = (n, total)
    return best[0]  # type: ignore[index]


def test_overflow_matches_a_loop() -> None:
    d = np.array([0.0, 1.5, 3.0, 3.0, 7.25])
    for n in range(9):
        assert overflow_mean(d, np.array([float(n)]))[0] == pytest.approx(np.mean([max(x - n, 0) for x in d]))
        assert overflow_mean(d, np.array([float(n)]), 8)[0] == pytest.approx(
            np.mean([math.ceil(max(x - n, 0) / 8 - 1e-9) * 8 for x in d]))


def test_critical_fractile_by_hand() -> None:
    d = np.array([0, 1, 2, 3, 4, 4, 4, 4, 8, 8], dtype=float)
    assert critical_fractile_n(d, 2.0, 1.0) == 4  # demand ≥ 4 60 % ≥ 50 % of the time; ≥ 5 only 20 %
    assert critical_fractile_n(d, 5.0, 1.0) == 8  # own/cloud = 20 %: demand reaches 8 20 % of the time
    assert critical_fractile_n(d, 0.9, 1.0) == 0  # owning costs more per hour than renting: own nothing
    # owned GPUs are cheaper to keep than to buy: the first 2 levels use the keep price
    assert critical_fractile_n(d, 2.0, np.array([0.1, 0.1, 1.2, 1.2, 1.2, 1.2, 1.2, 1.2])) == 4
    assert critical_fractile_n(d, 2.0, np.array([0.1, 0.1, 1.9, 1.9, 1.9, 1.9, 1.9, 1.9])) == 2


@given(
    demand=st.lists(st.integers(0, 30), min_size=1, max_size=60),
    hw=st.floats(1000, 60000), staff=st.floats(0, 30000), price=st.floats(1, 80),
)
@settings(max_examples=40, deadline=None)
def test_best_owned_count_is_the_minimum(demand: list[int], hw: float, staff: float, price: float) -> None:
    cfg = load_config().replace("on_prem", hardware_usd_per_gpu=hw, staff_usd_per_month=staff)
    cfg = cfg.replace("cloud", instance_usd_per_hour=price)
    d = np.array(demand, dtype=float)
    if d.max() < 1:
        return
    s = size(cfg, timeline(cfg), d, 1e18, 300.0, 0, 0.0)
    assert 1 <= s.n_owning <= max(demand)
    assert s.n_owning == _brute(cfg, demand)
    assert s.n_star == s.n_owning  # renting everything was priced out (1e18)


def test_fractile_agrees_with_the_best_owned_count_without_per_node_costs() -> None:
    cfg = load_config().replace("on_prem", staff_usd_per_node_per_month=0.0, space_usd_per_node_per_month=0.0)
    rng = np.random.default_rng(3)
    demand = rng.integers(0, 40, size=2000).astype(float)
    s = size(cfg, timeline(cfg), demand, 1e18, 400.0, 0, 0.0)
    assert s.tolerance == 1 and abs(s.n_owning - s.critical_fractile_n) <= 1 and s.agrees


def test_fixed_cost_hurdle() -> None:
    cfg = load_config()
    tl = timeline(cfg)
    s = size(cfg, tl, np.full(100, 4.0), 1e18, 400.0, 0, 0.0)
    assert s.fixed_usd == pytest.approx(cfg.on_prem.staff_usd_per_month * tl.annuity + s.fixed_usd
                                        - cfg.on_prem.staff_usd_per_month * tl.annuity)
    assert s.hurdle_gpus is not None and s.hurdle_gpus > 0
    free_cloud = cfg.replace("cloud", instance_usd_per_hour=0.01)
    assert size(free_cloud, tl, np.full(100, 4.0), 1e18, 400.0, 0, 0.0).hurdle_gpus is None  # never pays


# ----------------------------------------------------------------------------------------- monotonicity

CLOUD_PRICES = ("instance_usd_per_hour", "spot_multiplier", "reserved_multiplier", "egress_usd_per_gb",
                "managed_services_usd_per_month", "managed_services_usd_once", "spot_interruptions_per_hour")
ONPREM_PRICES = ("hardware_usd_per_gpu", "networking_usd", "networking_usd_per_gpu", "staff_usd_per_month",
                 "staff_usd_per_node_per_month", "space_usd_per_node_per_month", "space_usd_per_kw_per_month",
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
def test_owned_cost_is_monotone_in_every_price(key: str, base: float, bump: float, gpus: int,
                                                 months: int) -> None:
    cfg = load_config()
    lo = cfg.replace("on_prem", **{key: base})
    hi = cfg.replace("on_prem", **{key: base + bump})
    assert sum(_owned(hi, gpus, months, 500).values()) >= sum(_owned(lo, gpus, months, 500).values()) - 1e-6


@given(bump=st.floats(0.01, 2.0))
@settings(max_examples=10, deadline=None)
def test_scenario_totals_monotone_in_cloud_price(bump: float) -> None:
    roll = rollups(gpu_rows("n1", "GPU-a", 240, sm=lambda i: 0.1 * (i % 10), procs=lambda i: int(i % 3 > 0)))
    base = load_config()
    dearer = base.replace("cloud", instance_usd_per_hour=base.cloud.instance_usd_per_hour * (1 + bump))
    a = {s.id: s.total.value for s in analyze_rollups(roll, base).costs.scenarios}
    b = {s.id: s.total.value for s in analyze_rollups(roll, dearer).costs.scenarios}
    for sid in ("all-cloud", "all-cloud-if-packed", "hybrid"):
        assert b[sid] >= a[sid] - 1e-6
    assert b["all-on-prem"] == pytest.approx(a["all-on-prem"])


# ------------------------------------------------------------------------------ scenarios and sensitivity


def _two_gpus():  # type: ignore[no-untyped-def]
    return rollups(gpu_rows("n1", "GPU-a", 24 * 60, sm=0.5, procs=1) + gpu_rows("n1", "GPU-b", 24 * 60, sm=0.2,
                                                                             procs=1))


def test_tornado_moves_every_input_by_the_configured_fraction() -> None:
    cfg = load_config().replace("analysis", sensitivity_fraction=0.2)
    r = analyze_rollups(_two_gpus(), cfg)
    t = r.sensitivity.tornado
    keys = {row["key"] for row in t.rows}
    assert {"cloud.spot_share", "cloud.spot_interruptions_per_hour", "on_prem.amortization_years", "on_prem.pue",
            "cloud.egress_gb_per_week", "on_prem.staff_usd_per_month", "on_prem.staff_usd_per_node_per_month",
            "analysis.discount_rate_per_year"} <= keys
    assert r.sensitivity.fraction == 0.2 and "±20%" in t.description
    swings = [row["swing_usd"] for row in t.rows]
    assert swings == sorted(swings, reverse=True)
    hw = next(row for row in t.rows if row["key"] == "on_prem.hardware_usd_per_gpu")
    assert hw["low_value"] == pytest.approx(0.8 * cfg.on_prem.hardware_usd_per_gpu)
    assert hw["high_diff_usd"] <= hw["base_diff_usd"] <= hw["low_diff_usd"]  # dearer hardware: owning pays less
    pue = next(row for row in t.rows if row["key"] == "on_prem.pue")
    assert pue["low_value"] >= 1.0  # clamped to its range
    spot = next(row for row in t.rows if row["key"] == "cloud.spot_share")
    assert spot["high_value"] <= 1 - cfg.cloud.reserved_share + 1e-12


def test_growth_table() -> None:
    r = analyze_rollups(_two_gpus(), load_config())
    g = {row["growth_per_year"]: row for row in r.sensitivity.growth.rows}
    assert set(g) == {0.0, 0.25, 0.5, 1.0}
    assert g[1.0]["all_cloud_usd"] > g[0.0]["all_cloud_usd"]
    # Both GPUs are always held: growing demand no longer fits today's fleet and is rented on top.
    assert g[1.0]["stay_as_is_usd"] > g[0.0]["stay_as_is_usd"]
    all_cloud = next(s.total.value for s in r.costs.scenarios if s.id == "all-cloud")
    assert g[0.0]["all_cloud_usd"] == pytest.approx(all_cloud)


def test_scenarios_are_consistent() -> None:
    roll = rollups(gpu_rows("n1", "GPU-a", 24 * 60, sm=0.5, procs=1) + gpu_rows("n1", "GPU-b", 24 * 60, sm=0.0))
    r = analyze_rollups(roll, load_config(), overrides=Overrides(current="cloud"))
    s = {x.id: x for x in r.costs.scenarios}
    assert list(s) == ["stay-as-is", "all-cloud", "all-on-prem", "hybrid", "all-cloud-if-packed",
                       "all-on-prem-if-packed", "hybrid-if-packed"]
    hours = 36 * HOURS_PER_MONTH
    assert s["stay-as-is"].cloud_gpu_hours == pytest.approx(2 * hours)  # current cloud: both instances ran
    assert s["all-cloud"].cloud_gpu_hours == pytest.approx(1 * hours)  # one GPU held
    assert s["all-on-prem"].owned_gpus == 1 and r.costs.owned_gpus == 0
    for x in s.values():
        assert x.total.value == pytest.approx(sum(x.components.values()))
    base = [x for x in s.values() if not x.what_if]
    assert r.costs.cheapest == min(base, key=lambda x: x.total.value).id
    curve = r.hybrid.curve.rows
    assert curve[0]["n"] == 0 and curve[0]["total_usd"] == pytest.approx(s["all-cloud"].total.value)


def test_cost_bootstrap_gives_an_interval_around_the_point() -> None:
    rows = [r for g in range(4) for r in gpu_rows("n1", f"GPU-{g}", 10 * 24 * 12, interval_s=300,
                                                     sm=0.4, procs=lambda i, g=g: int((i // 288 + g) % 3 > 0))]
    r = analyze_rollups(rollups(rows), load_config())
    c = r.confidence
    d = c.cost_difference_usd
    assert d.low <= d.point <= d.high and d.low < d.high
    assert sum(c.cheapest_shares.values()) == pytest.approx(1.0)
    assert 0.0 <= c.cheapest_flip_share <= 1.0
    again = analyze_rollups(rollups(rows), load_config())
    assert again.confidence.cost_difference_usd == d  # seeded


def test_egress_override_reaches_the_cost_model() -> None:
    roll = rollups(gpu_rows("n1", "GPU-a", 240, sm=0.5, procs=1))
    r = analyze_rollups(roll, load_config(), overrides=Overrides(egress_gb_per_week=0.0))
    assert next(x for x in r.costs.scenarios if x.id == "all-cloud").components["egress"] == 0.0
    assert r.decision.inputs.egress_gb_per_week == 0.0
    with pytest.raises(GpuauditError, match="egress"):
        analyze_rollups(roll, load_config(), overrides=Overrides(egress_gb_per_week=-5.0))


def test_config_replace_keeps_other_values() -> None:
    cfg = load_config()
    new = cfg.replace("cloud", spot_multiplier=0.4)
    assert new.cloud.spot_multiplier == 0.4 and new.on_prem == cfg.on_prem


def test_break_even_prices_renting_and_owning_the_same() -> None:
    """At u*, renting k × today's held demand (fixed part + k × the compute bill) costs exactly what owning
    the fleet costs; with per-GPU billing that is renting the demand itself scaled by k."""
    from gpuaudit.analysis.fleet import Measured
    from gpuaudit.analysis.result import Deployment
    from gpuaudit.analysis.scenarios import cost_block

    rng = np.random.default_rng(1)
    held = rng.integers(0, 9, size=2880).astype(float)
    m = Measured(w=1.0, r=0.5, s=0.3, s_lower=0.3, gpus_seen=8, gpu_equivalents=8.0, held=held,
                 reporting=np.full(held.size, 8.0), day=np.arange(held.size) // 288, dt_hours=300 / 3600,
                 measured_w=400.0, current=Deployment.ON_PREM)
    for granularity in ("gpu", "instance"):
        cfg = load_config().replace("cloud", billing_granularity=granularity)
        block = cost_block(cfg, m, what_if=False)
        be = block.break_even
        assert be.held is not None and be.measured_billed == pytest.approx(held.mean() / 8)
        k = be.held / be.measured_billed
        tl = timeline(cfg)

        def rent(k: float, cfg=cfg, tl=tl, unit=block.prices.unit) -> float:  # type: ignore[no-untyped-def]
            billed = billable(held * k, unit)
            kk = best_reservation(billed, cloud_prices(cfg))  # what is cheaper reserved (issue 17)
            return sum(cloud_bill(cfg, tl, kk, float(np.maximum(billed - kk, 0).mean())).values()) + float(
                owned_total(owned_cost(cfg, tl, 0.0, 400.0, 8, cfg.on_prem.owned_age_years))[0])

        assert be.rent_fixed_usd + k * be.rent_variable_usd == pytest.approx(be.own_usd, rel=1e-9)
        assert be.rent_fixed_usd + be.rent_variable_usd == pytest.approx(be.cloud_usd, rel=1e-9)
        if granularity == "gpu":
            assert rent(k) == pytest.approx(be.own_usd, rel=1e-9)
        assert (be.measured_billed < be.held) == (be.verdict == "cloud")


def test_article_preset_reproduces_its_on_prem_total_through_the_analyzer() -> None:
    """The article test calls costs.cloud_cost, which the analyzer never calls: it could pass while the analyzer
    drifts. End to end: 100 GPUs held 40 h of a 168 h week, a new build (--current cloud),
    --preset article: all on-prem is the article's $1,710,480.00 exactly; all cloud is the article's formula over
    the analyzer's 730 h months (208,571 GPU-hours a year, not the article's 52 weeks' 208,000)."""
    from tests.analysis_helpers import gpu_rows, rollups

    from gpuaudit.analysis import analyze_rollups

    def held(i: int) -> int:
        return int(i < 40 * 12)  # the first 40 h of the week, 300 s samples

    rows = [r for g in range(100) for r in gpu_rows(f"n{g // 8}", f"G-{g}", 7 * 288, interval_s=300,
                                                     sm=lambda i: 0.9 if held(i) else 0.0, procs=held)]
    r = analyze_rollups(rollups(rows), load_config(preset="article"), overrides=Overrides(current="cloud"))
    by_id = {s.id: s for s in r.costs.scenarios}
    assert by_id["all-on-prem"].owned_gpus == 100
    assert round(by_id["all-on-prem"].total.value or 0.0, 2) == 1_710_480.00
    mean_gpus = 100 * 40 / 168
    assert by_id["all-cloud"].total.value == pytest.approx(mean_gpus * 730 * 12 * 14 + 0.10 * 500 * 52 + 2000,
                                                           abs=0.01)
