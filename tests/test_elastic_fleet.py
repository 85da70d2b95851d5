"""An autoscaled cloud fleet, whose instances (and their agents) exist only while a job holds them, is billed
for the GPU-hours it held, its fleet is the peak of concurrent GPUs, and a new GPU UUID per launch (as real
autoscaling gives) does not multiply the fleet: an elastic GPU's absent time is not a coverage gap."""

from __future__ import annotations

import datetime as dt

import pytest
from tests.analysis_helpers import T0, gpu_rows, rollups

from gpuaudit.analysis import analyze_rollups
from gpuaudit.analysis.config import load_config
from gpuaudit.analysis.overrides import Overrides

STEADY, BURST, DAYS = 20, 180, 2  # 20 GPUs always, 180 more for 15 minutes every 2 hours: a peak of 200
LAUNCHES = DAYS * 12


def _fleet(new_uuid_per_launch: bool) -> list[dict]:  # type: ignore[type-arg]
    rows = [r for g in range(STEADY) for r in gpu_rows(f"s{g // 8}", f"S-{g}", DAYS * 288, interval_s=300,
                                                        sm=0.5, procs=1)]
    for j in range(LAUNCHES):
        start = T0 + dt.timedelta(hours=2 * j)
        for g in range(BURST):
            uuid = f"B-{j}-{g}" if new_uuid_per_launch else f"B-{g}"
            rows += gpu_rows(f"b{g // 8}", uuid, 3, interval_s=300, start=start, sm=0.4, procs=1)
    return rows


def _hand_all_cloud(cfg) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(held GPU-hours over the horizon, all-cloud present value) by hand, with no reservation."""
    c = cfg.cloud
    mean_gpus = (STEADY * 24 + BURST * 0.25 * 12) / 24  # 1,020 held GPU-hours a day = 42.5 GPUs
    months, r = cfg.analysis.horizon_months, cfg.analysis.discount_rate_per_year
    annuity = sum((1 + r) ** (-(m + 0.5) / 12) for m in range(months))
    lst = c.instance_usd_per_hour / c.gpus_per_instance
    on_demand = 1 - c.spot_share - c.capacity_block_share
    flexible = lst * (c.spot_share * c.spot_multiplier * (1 + c.spot_interruptions_per_hour
                                                         * c.spot_lost_hours_per_interruption) + on_demand)
    reserved = lst * c.reserved_multiplier
    # reserve what is cheaper reserved: the 20 GPUs held all the time when a reserved hour costs less than a
    # flexible one (the 180 more, held 1/8 of the time, would need a reserved hour at 1/8 of the flexible price)
    assert reserved > flexible / 8
    k = STEADY if reserved < flexible else 0
    compute = (k * reserved + (mean_gpus - k) * flexible) * 730 * annuity
    fixed = c.egress_usd_per_gb * c.egress_gb_per_week * 52 / 12 * annuity + c.managed_services_usd_per_month * annuity
    return mean_gpus * 730 * months, compute + fixed


@pytest.mark.parametrize("new_uuid", [False, True], ids=["same-uuids", "new-uuid-per-launch"])
def test_an_autoscaled_cloud_fleet_is_billed_for_what_it_held(new_uuid: bool) -> None:
    """20 GPUs always, 200 for 15 minutes every 2 hours, --current cloud: before the fix mean demand read 200 and
    the plan was to buy 200 GPUs (2,260 with a new UUID per launch); by hand all-cloud rents 1.12 M GPU-hours."""
    cfg = load_config().replace("cloud", reserved_share=0.0, spot_share=0.7)
    r = analyze_rollups(rollups(_fleet(new_uuid)), cfg, overrides=Overrides(current="cloud"))
    hours, usd = _hand_all_cloud(cfg)
    s = {x.id: x for x in r.costs.scenarios}
    assert r.costs.fleet_gpus == STEADY + BURST  # the peak of concurrent GPUs, never the distinct UUIDs
    assert s["all-cloud"].cloud_gpu_hours == pytest.approx(hours, rel=1e-6)
    assert s["all-cloud"].total.value == pytest.approx(usd, rel=1e-6)
    assert r.hybrid.mean_demand.value == pytest.approx(42.5, rel=1e-6)
    assert r.hybrid.peak_demand.value == pytest.approx(200, rel=1e-6)
    assert r.break_even.measured_billed == pytest.approx(42.5 / 200, rel=1e-6)
    # the elastic GPUs' absent time is not a coverage gap; owning the burst peak is never the plan
    assert r.data_quality.coverage.value == pytest.approx(1.0, abs=1e-6)
    assert not any("gaps" in w or "stopped reporting" in w for w in r.warnings)
    assert all(x.owned_gpus < 100 for x in r.costs.scenarios if x.id == r.costs.cheapest)
    # staying as is rents the instances while they ran: the held hours here, not the fleet around the clock
    assert s["stay-as-is"].cloud_gpu_hours == pytest.approx(hours, rel=1e-6)


def test_a_steady_fleet_with_a_gap_is_still_scaled() -> None:
    """A cloud GPU that reported all the time but only half of it held is not elastic: when it stops reporting,
    its absent time is a coverage gap, scaled like the rest (the rule of issue 9 still holds)."""
    rows = [r for g in range(4) for r in gpu_rows("n1", f"G-{g}", 576, interval_s=300, sm=0.2,
                                                  procs=lambda i: int((i // 12) % 2 == 0))]
    rows = [r for r in rows if r["gpu_uuid"] in ("G-0", "G-1") or r["ts"] < T0 + dt.timedelta(days=1)]
    r = analyze_rollups(rollups(rows), load_config(), overrides=Overrides(current="cloud"))
    assert r.costs.fleet_gpus == 4
    assert r.hybrid.mean_demand.value == pytest.approx(2.0, rel=1e-3)
