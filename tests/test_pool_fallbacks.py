"""What a pool is charged where the trial cannot say: its power when no power was measured (the model's idle and
busy board power weighted by the share of the hours its GPUs are held), and its space (per node, or per kW of
the model's busy board power when a per-kW rate is set). Hand-computed per pool on a fleet of 8 H100s held
around the clock and 32 T4s held a quarter of the hours."""

from __future__ import annotations

from typing import Any

import pytest
from tests.analysis_helpers import gpu_rows, rollups

from gpuaudit.analysis import analyze_rollups, costs
from gpuaudit.analysis.config import Config, load_config
from gpuaudit.catalog import catalogue

H100, T4, NVL = "NVIDIA H100 80GB HBM3", "Tesla T4", "NVIDIA H100 NVL"
STEP, HOURS = 900.0, 4 * 24
N = int(HOURS * 3600 / STEP)


def _t4_held(gpu: int) -> Any:
    # 6 hours in every 24 (25 %), staggered so the pool's demand is spread over the day
    return lambda i: int((int(i * STEP // 3600) + 3 * gpu) % 24 < 6)


def _rows(h100: int = 8, t4: int = 32, h100_name: str = H100) -> list[dict[str, Any]]:
    """No power columns at all: every pool's power is the fallback."""
    rows: list[dict[str, Any]] = []
    for g in range(h100):
        for r in gpu_rows("h100-node", f"GPU-h{g}", N, interval_s=STEP, sm=0.7, procs=1, power_w=None):
            rows.append({**r, "gpu_index": g, "gpu_name": h100_name, "mem_total_bytes": 80 * 2**30})
    for g in range(t4):
        held = _t4_held(g)
        for r in gpu_rows(f"t4-node-{g // 8}", f"GPU-t{g}", N, interval_s=STEP,
                          sm=lambda i, h=held: 0.3 if h(i) else 0.0, procs=held, power_w=None):
            rows.append({**r, "gpu_index": g % 8, "gpu_name": T4, "mem_total_bytes": 16 * 2**30})
    return rows


def _power_usd(cfg: Config, gpus: int, watts: float) -> float:
    o, tl = cfg.on_prem, costs.timeline(cfg)
    return gpus * watts * o.pue * o.power_usd_per_kwh * 730 / 1000 * tl.annuity


def _stay(scenarios: Any) -> Any:
    return next(s for s in scenarios if s.id == "stay-as-is")


def test_unmeasured_power_of_a_t4_fleet_follows_its_load() -> None:
    """32 T4s held 25 % of the hours, no power measured: each owned T4 draws idle + (busy − idle) × 0.25, not
    its busy power around the clock."""
    cfg = load_config()
    t4 = catalogue()["t4"]
    assert t4.idle_watts_per_gpu is not None and t4.busy_watts_per_gpu is not None
    watts = t4.idle_watts_per_gpu + (t4.busy_watts_per_gpu - t4.idle_watts_per_gpu) * 0.25  # 11 + 59 × 0.25
    r = analyze_rollups(rollups(_rows(h100=0)), cfg)
    stay = _stay(r.costs.scenarios)
    assert stay.owned_gpus == 32
    assert stay.components["power"] == pytest.approx(_power_usd(cfg, 32, watts), rel=1e-9)
    assert stay.power_w_per_gpu == pytest.approx(watts, rel=1e-9)
    assert r.costs.power_source == "catalogue idle/busy by load"
    assert r.costs.power_w_per_gpu.value == pytest.approx(watts, rel=1e-9)
    assert r.costs.power_w_per_gpu.source == "catalogue"
    row = next(a for a in r.assumptions if a.key == "on_prem.fallback_watts_per_gpu")
    assert "catalogue idle/busy by load: idle 11 W, busy 70 W" in row.source


def test_unmeasured_power_follows_each_pools_load_in_a_mixed_fleet() -> None:
    cfg = load_config()
    cat = catalogue()
    t4, h100 = cat["t4"], cat["h100-sxm-80gb"]
    assert t4.idle_watts_per_gpu is not None and t4.busy_watts_per_gpu is not None
    r = analyze_rollups(rollups(_rows()), cfg)
    pools = {p.model: p for p in r.pools}
    t4_w = t4.idle_watts_per_gpu + (t4.busy_watts_per_gpu - t4.idle_watts_per_gpu) * 0.25
    assert _stay(pools["t4"].scenarios).components["power"] == pytest.approx(_power_usd(cfg, 32, t4_w), rel=1e-9)
    # the H100s are held every hour: their busy power
    assert h100.busy_watts_per_gpu is not None
    assert _stay(pools["h100-sxm-80gb"].scenarios).components["power"] == pytest.approx(
        _power_usd(cfg, 8, h100.busy_watts_per_gpu), rel=1e-9)
    assert r.costs.power_source == "catalogue idle/busy by load"


def test_a_models_override_of_its_board_power_is_named_as_the_source(tmp_path: Any) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[models."t4"]\nidle_watts_per_gpu = 20\n', encoding="utf-8")
    cfg = load_config(path)
    r = analyze_rollups(rollups(_rows(h100=0)), cfg)
    assert r.costs.power_source == "[models] idle/busy by load"
    assert _stay(r.costs.scenarios).power_w_per_gpu == pytest.approx(20 + (70 - 20) * 0.25, rel=1e-9)


def test_a_model_without_board_powers_keeps_the_flat_fallback() -> None:
    """An H100 NVL is not in the catalogue: priced at the fleet defaults, its power the flat fallback."""
    cfg = load_config()
    r = analyze_rollups(rollups(_rows(t4=0, h100_name=NVL)), cfg)
    assert r.costs.power_source == "configured"
    stay = _stay(r.costs.scenarios)
    assert stay.components["power"] == pytest.approx(_power_usd(cfg, 8, cfg.on_prem.fallback_watts_per_gpu),
                                                     rel=1e-9)


def test_a_stated_fleet_fallback_stays_flat() -> None:
    """A single-model fleet whose config states its own flat fallback keeps it (the operator's figure)."""
    cfg = load_config().replace("on_prem", fallback_watts_per_gpu=50.0)
    r = analyze_rollups(rollups(_rows(h100=0)), cfg)
    assert r.costs.power_source == "configured"
    assert _stay(r.costs.scenarios).power_w_per_gpu == pytest.approx(50.0)


def _space(result: Any, model: str) -> float:
    pool = next(p for p in result.pools if p.model == model)
    return float(_stay(pool.scenarios).components["space"])


def test_space_per_kw_prices_each_pools_nodes_at_their_models_power(tmp_path: Any) -> None:
    """$196 per kW-month: an HGX node of 8 H100s is 8 × 700 W = 5.6 kW; a node of 8 T4s is 8 × 70 W = 0.56 kW.
    Each pool's space = nodes × kW per node × $/kW-month × PV months."""
    path = tmp_path / "c.toml"
    path.write_text("[on_prem]\nspace_usd_per_kw_per_month = 196\n", encoding="utf-8")
    cfg = load_config(path)
    months = costs.timeline(cfg).annuity
    r = analyze_rollups(rollups(_rows()), cfg)
    assert _space(r, "h100-sxm-80gb") == pytest.approx(1 * 8 * 700 / 1000 * 196 * months, rel=1e-9)
    assert _space(r, "t4") == pytest.approx(4 * 8 * 70 / 1000 * 196 * months, rel=1e-9)
    fleet = _stay(r.costs.scenarios).components["space"]
    assert fleet == pytest.approx((1 * 5.6 + 4 * 0.56) * 196 * months, rel=1e-9)


def test_space_per_kw_counts_nodes_at_each_models_own_size(tmp_path: Any) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[on_prem]\nspace_usd_per_kw_per_month = 196\n[models."t4"]\ngpus_per_node = 4\n',
                    encoding="utf-8")
    cfg = load_config(path)
    months = costs.timeline(cfg).annuity
    r = analyze_rollups(rollups(_rows()), cfg)
    assert _space(r, "t4") == pytest.approx(8 * 4 * 70 / 1000 * 196 * months, rel=1e-9)


def test_space_stays_per_node_unless_a_per_kw_rate_is_set() -> None:
    cfg = load_config()
    assert cfg.on_prem.space_usd_per_kw_per_month == 0
    months = costs.timeline(cfg).annuity
    r = analyze_rollups(rollups(_rows()), cfg)
    per_node = cfg.on_prem.space_usd_per_node_per_month
    assert _space(r, "h100-sxm-80gb") == pytest.approx(1 * per_node * months, rel=1e-9)
    assert _space(r, "t4") == pytest.approx(4 * per_node * months, rel=1e-9)


def test_an_implausible_space_per_kw_is_refused(tmp_path: Any) -> None:
    from gpuaudit.errors import GpuauditError

    path = tmp_path / "c.toml"
    path.write_text("[on_prem]\nspace_usd_per_kw_per_month = 196000\n", encoding="utf-8")
    with pytest.raises(GpuauditError, match="space_usd_per_kw_per_month = 196000 is outside its plausible range"):
        load_config(path)


def test_the_assumptions_list_space_per_kw_only_when_it_is_set(tmp_path: Any) -> None:
    r = analyze_rollups(rollups(_rows(h100=0)), load_config())
    assert "on_prem.space_usd_per_kw_per_month" not in {a.key for a in r.assumptions}
    path = tmp_path / "c.toml"
    path.write_text("[on_prem]\nspace_usd_per_kw_per_month = 196\n", encoding="utf-8")
    r = analyze_rollups(rollups(_rows(h100=0)), load_config(path))
    row = next(a for a in r.assumptions if a.key == "on_prem.space_usd_per_kw_per_month")
    assert (row.value, row.unit) == (196.0, "USD/kW/month")
