"""One reservation rule for every plan and billing granularity: reserve what is cheaper reserved (per-GPU and
instance billing alike, and the hybrid's bursts too), never a fixed share of the billed hours."""

from __future__ import annotations

import pytest
from tests.analysis_helpers import gpu_rows, rollups

from gpuaudit.analysis import analyze_rollups
from gpuaudit.analysis.config import load_config
from gpuaudit.analysis.overrides import Overrides


def _rows() -> list[dict]:  # type: ignore[type-arg]
    """2 GPUs held all the time, 2 more held the first quarter of every 4 hours: demand is 2 GPUs 75 % of the
    time and 4 GPUs 25 % of it (mean 2.5)."""
    rows = [r for g in range(2) for r in gpu_rows("n1", f"A-{g}", 48 * 12, interval_s=300, sm=0.5, procs=1)]
    return rows + [r for g in range(2) for r in gpu_rows("n1", f"B-{g}", 48 * 12, interval_s=300, sm=0.5,
                                                         procs=lambda i: int(i % 48 < 12))]


def _prices(cfg) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    """(reserved $/GPU-h, flexible $/GPU-h, PV of $1 a month) by hand from the config."""
    c = cfg.cloud
    lst = c.instance_usd_per_hour / c.gpus_per_instance
    rest = 1 - c.reserved_share
    flexible = lst * (c.spot_share * c.spot_multiplier * (1 + c.spot_interruptions_per_hour
                                                         * c.spot_lost_hours_per_interruption)
                      + (rest - c.spot_share - c.capacity_block_share)) / rest
    r, months = cfg.analysis.discount_rate_per_year, cfg.analysis.horizon_months
    return lst * c.reserved_multiplier, flexible, sum((1 + r) ** (-(m + 0.5) / 12) for m in range(months))


def _compute(r, sid: str) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    s = next(x for x in r.costs.scenarios if x.id == sid)
    return s.components["cloud_reserved"], s.components["cloud_flexible"]


@pytest.mark.parametrize("granularity", ["gpu", "instance"])
def test_nothing_is_reserved_when_a_reserved_hour_costs_more(granularity: str) -> None:
    """At the default prices a reserved GPU-hour ($4.27) costs more than a flexible one ($3.17): a
    reservation only adds cost, whatever the plan or the billing granularity."""
    cfg = load_config().replace("cloud", billing_granularity=granularity)
    reserved, flexible, annuity = _prices(cfg)
    assert reserved > flexible
    r = analyze_rollups(rollups(_rows()), cfg, overrides=Overrides(current="cloud"))
    billed = 2.5 if granularity == "gpu" else 8.0  # one 8-GPU instance runs all the time
    assert r.costs.reserved_gpus == 0
    assert _compute(r, "all-cloud") == pytest.approx((0.0, billed * 730 * flexible * annuity), rel=1e-9)
    assert _compute(r, "stay-as-is")[0] == 0.0


def test_the_steady_base_is_reserved_when_cheaper_reserved() -> None:
    """reserved_multiplier 0.3: a reserved hour costs 65 % of a flexible one. The 2 GPUs busy all the time are
    reserved (P(demand ≥ k) = 1 ≥ 0.65), the 2 busy a quarter of the time are not (0.25 < 0.65), in every plan:
    by hand all cloud reserves 2 and rents 0.5 GPUs flexibly on average."""
    cfg = load_config().replace("cloud", reserved_multiplier=0.3, instance_usd_per_hour=90.0)
    reserved, flexible, annuity = _prices(cfg)
    r = analyze_rollups(rollups(_rows()), cfg, overrides=Overrides(current="cloud"))
    assert r.costs.reserved_gpus == pytest.approx(2.0)
    assert _compute(r, "all-cloud") == pytest.approx((2 * 730 * reserved * annuity, 0.5 * 730 * flexible * annuity),
                                                     rel=1e-9)
    # demand above owned GPUs follows the same rule (it was always flexible): owning 1, reserve 1, burst 0.5
    one = analyze_rollups(rollups(_rows()), cfg.replace("on_prem", owned_gpus=1))
    assert _compute(one, "stay-as-is") == pytest.approx((730 * reserved * annuity, 0.5 * 730 * flexible * annuity),
                                                        rel=1e-9)
    h = next(x for x in one.costs.scenarios if x.id == "hybrid")
    res, flex = _compute(one, "hybrid")
    assert res == pytest.approx(max(2 - h.owned_gpus, 0) * 730 * reserved * annuity, rel=1e-9)
    assert flex == pytest.approx((4 - max(h.owned_gpus, 2)) * 0.25 * 730 * flexible * annuity, rel=1e-9)


def test_instance_billing_never_prices_the_cloud_below_per_gpu_billing() -> None:
    for mult in (0.62, 0.3):
        cfg = load_config().replace("cloud", reserved_multiplier=mult)
        gpu = analyze_rollups(rollups(_rows()), cfg, overrides=Overrides(current="cloud"))
        inst = analyze_rollups(rollups(_rows()), cfg.replace("cloud", billing_granularity="instance"),
                               overrides=Overrides(current="cloud"))
        for sid in ("all-cloud", "stay-as-is"):
            assert sum(_compute(inst, sid)) >= sum(_compute(gpu, sid)) - 1e-6, (mult, sid)
