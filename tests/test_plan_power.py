"""Each owning plan is charged the board power of the GPUs it keeps at the load they carry (the measured
power-vs-load relation), not the fleet average with the idle GPUs in it: a plan that keeps fewer GPUs keeps
them busier."""

from __future__ import annotations

import pytest
from tests.analysis_helpers import gpu_rows, rollups

from gpuaudit.analysis import analyze_rollups
from gpuaudit.analysis.config import load_config

IDLE_W, HELD_W = 100.0, 500.0


def _rows() -> list[dict]:  # type: ignore[type-arg]
    """4 GPUs held all the time drawing 500 W, 4 never held drawing 100 W: the fleet averages 300 W."""
    busy = [r for g in range(4) for r in gpu_rows("n1", f"B-{g}", 48 * 12, interval_s=300, sm=0.8, procs=1,
                                                  power_w=HELD_W)]
    idle = [r for g in range(4) for r in gpu_rows("n1", f"I-{g}", 48 * 12, interval_s=300, sm=0.0, procs=0,
                                                  power_w=IDLE_W)]
    return busy + idle


def _power_usd(cfg, gpus: int, watts: float) -> float:  # type: ignore[no-untyped-def]
    o, months, rate = cfg.on_prem, cfg.analysis.horizon_months, cfg.analysis.discount_rate_per_year
    annuity = sum((1 + rate) ** (-(m + 0.5) / 12) for m in range(months))
    return gpus * watts * o.pue * o.power_usd_per_kwh * 730 / 1000 * annuity


def test_each_plan_draws_the_power_of_the_gpus_it_keeps() -> None:
    cfg = load_config()
    r = analyze_rollups(rollups(_rows()), cfg)
    s = {x.id: x for x in r.costs.scenarios}
    assert r.costs.power_w_per_gpu.value == pytest.approx(300.0)  # the fleet average, as measured
    # owning the peak (4 GPUs, held all the time) draws 500 W each; keeping all 8 averages 300 W
    assert s["all-on-prem"].owned_gpus == 4
    assert s["all-on-prem"].components["power"] == pytest.approx(_power_usd(cfg, 4, HELD_W), rel=1e-9)
    assert s["all-on-prem"].power_w_per_gpu == pytest.approx(HELD_W, rel=1e-9)
    assert s["stay-as-is"].components["power"] == pytest.approx(_power_usd(cfg, 8, 300.0), rel=1e-9)
    assert s["stay-as-is"].power_w_per_gpu == pytest.approx(300.0, rel=1e-9)
    assert s["all-cloud"].power_w_per_gpu is None


def test_configured_power_stays_flat() -> None:
    """With on_prem.power_source = "configured" every owned GPU draws the configured watts, busy or not."""
    cfg = load_config().replace("on_prem", power_source="configured")
    r = analyze_rollups(rollups(_rows()), cfg)
    s = {x.id: x for x in r.costs.scenarios}
    w = cfg.on_prem.fallback_watts_per_gpu
    assert s["all-on-prem"].components["power"] == pytest.approx(_power_usd(cfg, 4, w), rel=1e-9)
