"""The right-size lever: held GPU-hours whose peak memory fits a cheaper catalogue model and whose SM activity ×
the throughput ratio (dense FP16 TFLOPS, this model's ÷ that one's) fits under analysis.right_size_headroom
are priced on the cheapest such model. A what-if: it never changes the cheapest plan or the recommendation.

Hand-computed on four H100s held for two days (48 GPU-hours each) at the default flexible mix: 70 % spot at
0.45 × (1 + 0.1 interruptions/h × 0.25 h lost) of the list price, 30 % reserved (a reserved hour costs more than
a flexible one, so nothing is reserved): flexible = list × 0.70 × 0.45 × 1.025 ÷ 0.70 = list × 0.46125.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.analysis_helpers import gpu_rows, rollups

from gpuaudit.analysis import analyze_rollups, costs, load_config
from gpuaudit.analysis.config import Config
from gpuaudit.analysis.result import RightSize
from gpuaudit.analysis.text import summary
from gpuaudit.catalog import catalogue
from gpuaudit.errors import GpuauditError

H100, T4 = "NVIDIA H100 80GB HBM3", "Tesla T4"
STEP, N = 900.0, 192  # two days of 15-minute samples: 48 GPU-hours per GPU
FLEX = 0.70 * 0.45 * 1.025 / 0.70
H100_LIST, T4_LIST, L4_LIST, H100_PCIE_LIST = 55.04 / 8, 0.526, 0.7992, 3.29


def _gpu(uuid: str, sm: float, mem: int, name: str = H100, total: int = 80 * 2**30) -> list[dict[str, Any]]:
    return [
        {**r, "gpu_name": name, "mem_total_bytes": total}
        for r in gpu_rows("n1", uuid, N, interval_s=STEP, sm=sm, procs=1, mem_used_bytes=mem)
    ]


def _rows() -> list[dict[str, Any]]:
    return (
        _gpu("GPU-a", 0.04, 10 * 10**9)  # 4 % × 989.4 / 65 = 0.61 ≤ 0.8 and 10 GB ≤ 16 GiB: a T4
        + _gpu("GPU-b", 0.08, 20 * 10**9)  # 20 GB > a T4's 16 GiB; 8 % × 989.4 / 121 = 0.65: an L4
        + _gpu("GPU-c", 0.04, 60 * 10**9)  # 60 GB fits no 24 or 48 GB model: the cheapest 80 GB, H100 PCIe
        + _gpu("GPU-d", 0.70, 10 * 10**9)
    )  # 70 % × 989.4 / 756.5 = 0.92 > 0.8 even on an H100 PCIe: stays


@pytest.fixture(scope="module")
def roll() -> Any:
    return rollups(_rows())


def _cfg(**analysis: Any) -> Config:
    cfg = load_config()
    return cfg.replace("analysis", bootstrap_resamples=0, **analysis)


def test_catalogue_throughput_figures_are_dense_and_sourced() -> None:
    cat = catalogue()
    assert cat["h100-sxm-80gb"].dense_fp16_tflops == pytest.approx(989.4)
    assert cat["l4"].dense_fp16_tflops == pytest.approx(121.0)  # 242 with sparsity, halved
    assert cat["t4"].dense_fp16_tflops == pytest.approx(65.0)
    assert cat["a10g"].dense_fp16_tflops is None  # no traceable figure: never a source or target
    for key, spec in cat.items():
        if spec.dense_fp16_tflops is not None:
            src = spec.sources["dense_fp16_tflops"]
            assert src.text and src.url.startswith("https://") and src.date, key


def test_hand_computed_moves_each_hour_to_the_cheapest_model_that_fits(roll: Any) -> None:
    r = analyze_rollups(roll, _cfg())
    (pool,) = r.pools
    rs = pool.right_size
    assert isinstance(rs, RightSize)
    assert rs.model == "h100-sxm-80gb" and rs.headroom == pytest.approx(0.8)
    assert rs.held_gpu_hours == pytest.approx(4 * 48)
    assert rs.usd_per_gpu_hour == pytest.approx(H100_LIST * FLEX)
    by = {t.model: t for t in rs.targets}
    assert set(by) == {"t4", "l4", "h100-pcie-80gb"}  # GPU-d (70 % SM activity) moves nowhere
    for key, price in (("t4", T4_LIST), ("l4", L4_LIST), ("h100-pcie-80gb", H100_PCIE_LIST)):
        t = by[key]
        assert t.gpu_hours == pytest.approx(48.0), key
        assert t.usd_per_gpu_hour == pytest.approx(price * FLEX), key
        assert t.usd_today == pytest.approx(48 * H100_LIST * FLEX), key
        assert t.usd_on_target == pytest.approx(48 * price * FLEX), key
        assert t.saving_usd == pytest.approx(48 * (H100_LIST - price) * FLEX), key
    assert by["t4"].throughput_ratio == pytest.approx(989.4 / 65.0)
    assert rs.movable_gpu_hours == pytest.approx(3 * 48)
    assert rs.saving_usd == pytest.approx(48 * (3 * H100_LIST - T4_LIST - L4_LIST - H100_PCIE_LIST) * FLEX)
    assert "as fast" in rs.assumption and "0.8" in rs.assumption and "peak memory" in rs.assumption
    # the flexible price is the cost model's own, for a config priced at that model
    t4_cfg = load_config().replace("cloud", instance_usd_per_hour=T4_LIST, gpus_per_instance=1)
    assert by["t4"].usd_per_gpu_hour == pytest.approx(costs.cloud_prices(t4_cfg).flexible)


def test_memory_and_headroom_decide(roll: Any) -> None:
    tight = analyze_rollups(roll, _cfg(right_size_headroom=0.5)).pools[0].right_size
    assert tight is not None
    # GPU-a: 0.61 on a T4 no longer fits, 4 % × 989.4 / 121 = 0.33 on an L4 does; GPU-b: 0.65 on an L4 and
    # 8 % × 989.4 / 125 = 0.63 on an A10 do not, 8 % × 989.4 / 362.05 = 0.22 on an L40S does; GPU-c: H100 PCIe
    by = {t.model: t.gpu_hours for t in tight.targets}
    assert by == {"l4": pytest.approx(48.0), "l40s": pytest.approx(48.0), "h100-pcie-80gb": pytest.approx(48.0)}
    none = analyze_rollups(roll, _cfg(right_size_headroom=0.001)).pools[0].right_size
    assert none is not None and none.targets == () and none.movable_gpu_hours == 0 and none.saving_usd == 0


def test_the_lever_never_changes_the_cheapest_plan_or_the_recommendation(roll: Any) -> None:
    base = analyze_rollups(roll, _cfg(right_size_headroom=0.001))
    moved = analyze_rollups(roll, _cfg(right_size_headroom=1.0))
    assert moved.pools[0].right_size is not None and moved.pools[0].right_size.saving_usd > 0
    assert moved.costs.cheapest == base.costs.cheapest
    assert moved.decision.recommendation == base.decision.recommendation
    assert moved.decision.recommended_scenario == base.decision.recommended_scenario
    assert [(s.id, s.total.value) for s in moved.costs.scenarios] == [
        (s.id, s.total.value) for s in base.costs.scenarios
    ]


def test_json_and_text_state_the_figure_with_its_assumption(roll: Any) -> None:
    r = analyze_rollups(roll, _cfg())
    d = r.to_dict()["pools"][0]["right_size"]
    assert d["model"] == "h100-sxm-80gb" and d["what_if"] is True
    assert {t["model"] for t in d["targets"]} == {"t4", "l4", "h100-pcie-80gb"}
    assert set(d["targets"][0]) == {
        "model",
        "gpu_hours",
        "usd_per_gpu_hour",
        "usd_today",
        "usd_on_target",
        "saving_usd",
        "throughput_ratio",
        "memory_bytes",
        "dense_fp16_tflops",
    }
    text = summary(r)
    line = next(ln for ln in text.splitlines() if ln.startswith("right-size h100-sxm-80gb"))
    assert "what-if, never counted as cheapest" in line and "144.0 of 192.0 held GPU-hours" in line
    assert "if the work runs as fast" in line


def test_a_target_in_the_fleet_is_priced_at_its_pool_price() -> None:
    rows = _gpu("GPU-a", 0.04, 10 * 10**9) + _gpu("GPU-t", 0.3, 10**9, name=T4, total=16 * 2**30)
    cfg = load_config().replace("analysis", bootstrap_resamples=0)
    cfg = _with_t4_price(cfg, 0.40)
    r = analyze_rollups(rollups(rows), cfg)
    pools = {p.model: p for p in r.pools}
    h = pools["h100-sxm-80gb"].right_size
    assert h is not None
    (t,) = h.targets
    assert t.model == "t4" and t.usd_per_gpu_hour == pytest.approx(0.40 * FLEX)
    t4 = pools["t4"].right_size  # the cheapest model: nothing is cheaper to move to
    assert t4 is not None and t4.targets == ()
    assert any(ln.startswith("right-size h100-sxm-80gb") for ln in summary(r).splitlines())
    assert not any(ln.startswith("right-size t4") for ln in summary(r).splitlines())


def _with_t4_price(cfg: Config, usd: float) -> Config:
    import dataclasses

    models = dict(cfg.models)
    models["t4"] = models["t4"].replace(instance_usd_per_hour=usd)
    sources = {**cfg.sources, "models.t4.instance_usd_per_hour": "test"}
    return dataclasses.replace(cfg, models=models, sources=sources)


def test_config_sets_a_throughput_and_bounds_it(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('[models."a10g"]\ndense_fp16_tflops = 70\n[analysis]\nright_size_headroom = 0.6\n', encoding="utf-8")
    cfg = load_config(p)
    assert cfg.models["a10g"].dense_fp16_tflops == pytest.approx(70.0)
    assert cfg.analysis.right_size_headroom == pytest.approx(0.6)
    for bad in ('[models."a10g"]\ndense_fp16_tflops = 0\n', "[analysis]\nright_size_headroom = 1.5\n"):
        p.write_text(bad, encoding="utf-8")
        with pytest.raises(GpuauditError, match="config error") as e:
            load_config(p)
        assert "\n" not in str(e.value)
