"""Per-model pools: a fleet that mixes GPU models is priced, sized and recommended per model, each at its own
model's prices, with the fleet-level fixed costs counted once.

Guards the defect where a 40-GPU fleet (8 H100s held around the clock at 70 % SM activity, 32 T4s held 15 % of
the hours at 30 %) priced every T4 as an H100 ($6.88 per GPU-hour, $46,900 to own) and answered "move to the
cloud", when the eight busy H100s are the part worth owning and the T4 work is the part worth renting.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from tests.analysis_helpers import T0, gpu_rows, write

from gpuaudit.analysis import costs
from gpuaudit.analysis.config import load_config
from gpuaudit.analysis.pipeline import analyze

H100, T4 = "NVIDIA H100 80GB HBM3", "Tesla T4"
DAYS, STEP = 8, 900.0
N = int(DAYS * 86400 / STEP)
# The catalogue has no traceable T4 purchase price: the operator gives one. The staff base is stated too (half a
# loaded engineer): whether owning 8 GPUs pays for a base staff at all is the operator's figure, not the pools'.
T4_CONFIG = '[models."t4"]\nhardware_usd_per_gpu = 2500\n[on_prem]\nstaff_usd_per_month = 7500\n'


def _t4_held(gpu: int) -> Any:
    # 3 hours in every 20 (15 %), staggered so the T4 pool's demand is spread over the day
    return lambda i: int((int(i * STEP // 3600) + 7 * gpu) % 20 < 3)


def fleet_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for g in range(8):
        for r in gpu_rows("h100-node", f"GPU-h{g}", N, interval_s=STEP, sm=0.7, procs=1, power_w=600.0):
            rows.append({**r, "gpu_index": g, "gpu_name": H100, "mem_total_bytes": 80 * 2**30})
    for g in range(32):
        held = _t4_held(g)
        for i, r in enumerate(gpu_rows(f"t4-node-{g // 8}", f"GPU-t{g}", N, interval_s=STEP,
                                       sm=lambda i, h=held: 0.3 if h(i) else 0.0, procs=held, power_w=40.0)):
            rows.append({**r, "gpu_index": g % 8, "gpu_name": T4, "mem_total_bytes": 16 * 2**30,
                         "power_w": 70.0 if held(i) else 15.0,
                         "energy_j": (70.0 if held(i) else 15.0) * STEP})
    return rows


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("pools")
    write(root / "data", fleet_rows())
    cfg = root / "t4.toml"
    cfg.write_text(T4_CONFIG, encoding="utf-8")
    return root / "data", cfg


@pytest.fixture(scope="module")
def result(mixed: tuple[Path, Path]) -> dict[str, Any]:
    data, cfg = mixed
    return analyze(data, load_config(cfg)).to_dict()


def _scenario(pool_or_costs: dict[str, Any], sid: str) -> dict[str, Any]:
    return next(s for s in pool_or_costs["scenarios"] if s["id"] == sid)


def test_each_model_is_priced_at_its_own_prices(result: dict[str, Any]) -> None:
    pools = {p["model"]: p for p in result["pools"]}
    assert set(pools) == {"h100-sxm-80gb", "t4"}
    t4, h100 = pools["t4"], pools["h100-sxm-80gb"]
    assert (t4["gpus"], h100["gpus"]) == (32, 8)
    assert t4["gpu_name"] == T4 and h100["gpu_name"] == H100
    assert t4["usd_per_gpu_hour"] == pytest.approx(0.526) and t4["hardware_usd_per_gpu"] == 2500
    assert h100["usd_per_gpu_hour"] == pytest.approx(55.04 / 8) and h100["hardware_usd_per_gpu"] == 46900
    assert t4["held_utilization"] == pytest.approx(0.15, abs=0.01)
    assert t4["real_utilization"] == pytest.approx(0.045, abs=0.005)
    assert h100["held_utilization"] == pytest.approx(1.0) and h100["real_utilization"] == pytest.approx(0.7)
    assert t4["branch"] == "cloud" and h100["branch"] != "cloud"


def _cheapest_mix(result: dict[str, Any]) -> tuple[float, tuple[str, ...]]:
    """Brute force over every pool's allowed plans, the fleet's fixed costs added once where anything is owned
    or rented: the fleet hybrid must be this."""
    import itertools

    fixed = result["fleet_fixed_usd"]
    owned_fixed = fixed["staff"] + fixed["networking"] + fixed["residual_value"]
    rented_fixed = fixed["egress"] + fixed["managed_services"]
    options = [[s for s in p["scenarios"] if s["allowed"] and not s["what_if"]] for p in result["pools"]]
    best: tuple[float, tuple[str, ...]] | None = None
    for combo in itertools.product(*options):
        total = sum(s["total"]["value"] for s in combo)
        total += owned_fixed if any(s["owned_gpus"] for s in combo) else 0.0
        total += rented_fixed if any(s["cloud_gpu_hours"] > 0 for s in combo) else 0.0
        if best is None or total < best[0] - 0.01:
            best = (total, tuple(s["id"] for s in combo))
    assert best is not None
    return best


def test_the_fleet_keeps_the_busy_h100s(result: dict[str, Any]) -> None:
    """The defect: every T4 priced as an H100 made "all cloud" the answer. Priced per model, the eight busy
    H100s are kept, and the fleet's per-model plan is the cheapest combination of the pools' plans."""
    c, d = result["costs"], result["decision"]
    assert d["recommended_scenario"] != "all-cloud"
    pools = {p["model"]: p for p in result["pools"]}
    assert pools["h100-sxm-80gb"]["owned_gpus"] == 8
    assert pools["h100-sxm-80gb"]["action"] == "keep the 8 h100-sxm-80gb"
    total, picks = _cheapest_mix(result)
    hybrid = _scenario(c, "hybrid")
    assert hybrid["total"]["value"] == pytest.approx(total)
    formula = hybrid["total"]["formula"]
    assert all(f"{p['model']}: {pick}" in formula for p, pick in zip(result["pools"], picks, strict=True))


def test_without_cloud_overheads_the_t4_work_is_rented(mixed: tuple[Path, Path], tmp_path: Path) -> None:
    """With no managed services to pay for, renting the T4s' 4.8 GPUs of demand beats keeping a node of them:
    the fleet plan owns one model and rents the other, in counts per model."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(T4_CONFIG + "[cloud]\nmanaged_services_usd_per_month = 0\nmanaged_services_usd_once = 0\n",
                   encoding="utf-8")
    d = analyze(mixed[0], load_config(cfg)).to_dict()
    assert d["decision"]["recommended_scenario"] == "hybrid", d["costs"]["cheapest"]
    hybrid = _scenario(d["costs"], "hybrid")
    assert hybrid["description"] == "Rent the t4 work, sell the 32 t4; keep the 8 h100-sxm-80gb."
    assert hybrid["owned_gpus"] == 8
    pools = {p["model"]: p for p in d["pools"]}
    assert (pools["t4"]["recommendation"], pools["t4"]["owned_gpus"]) == ("all-cloud", 0)
    assert pools["t4"]["action"] == "rent the t4 work, sell the 32 t4"
    assert hybrid["total"]["value"] == pytest.approx(_cheapest_mix(d)[0])


def test_a_pools_all_cloud_bill_is_its_demand_at_its_own_flexible_price(result: dict[str, Any],
                                                                        mixed: tuple[Path, Path]) -> None:
    """Hand-computed: the T4s hold 4.8 GPUs on average (32 × 15 %); a reserved hour costs more than the
    flexible mix, so nothing is reserved and the whole bill is flexible: 4.8 × 730 h × flexible × PV months."""
    cfg = load_config(mixed[1])
    c = cfg.cloud
    rest = 1 - c.reserved_share
    on_demand = max(0.0, rest - c.spot_share - c.capacity_block_share)
    spot = c.spot_multiplier * (1 + c.spot_interruptions_per_hour * c.spot_lost_hours_per_interruption)
    flexible = 0.526 * (c.spot_share * spot + c.capacity_block_share * c.capacity_block_multiplier + on_demand) / rest
    assert 0.526 * c.reserved_multiplier > flexible  # why nothing is reserved
    tl = costs.timeline(cfg)
    t4 = next(p for p in result["pools"] if p["model"] == "t4")
    bill = _scenario(t4, "all-cloud")["components"]
    mean_held = t4["held_gpu_hours"] / (DAYS * 24)
    assert mean_held == pytest.approx(4.8, rel=0.02)
    assert bill["cloud_reserved"] == 0
    assert bill["cloud_flexible"] == pytest.approx(mean_held * 730 * flexible * tl.annuity, rel=1e-6)
    # the fleet's egress and managed services are not the pool's
    assert bill["egress"] == 0 and bill["managed_services"] == 0


def test_a_pools_owned_value_is_at_its_own_hardware_price(result: dict[str, Any], mixed: tuple[Path, Path]) -> None:
    cfg = load_config(mixed[1])
    resale = costs.resale_value(cfg, cfg.on_prem.owned_age_years)
    pools = {p["model"]: p for p in result["pools"]}
    assert _scenario(pools["t4"], "stay-as-is")["components"]["owned_value_kept"] == pytest.approx(
        32 * 2500 * resale)
    assert _scenario(pools["h100-sxm-80gb"], "stay-as-is")["components"]["owned_value_kept"] == pytest.approx(
        8 * 46900 * resale)


def test_fleet_fixed_costs_are_counted_once(result: dict[str, Any], mixed: tuple[Path, Path]) -> None:
    cfg = load_config(mixed[1])
    tl = costs.timeline(cfg)
    base_staff = cfg.on_prem.staff_usd_per_month * tl.annuity
    c = result["costs"]
    for sid in ("stay-as-is", "all-on-prem", "hybrid"):
        fleet = _scenario(c, sid)
        per_pool = sum(_scenario(p, pid)["components"]["staff"] for p in result["pools"]
                       for pid in [sid if sid != "hybrid" else p["recommendation"]])
        assert fleet["components"]["staff"] == pytest.approx(per_pool + base_staff), sid
        assert fleet["total"]["value"] == pytest.approx(sum(fleet["components"].values()))
    assert result["fleet_fixed_usd"]["staff"] == pytest.approx(base_staff)
    every = _scenario(c, "all-cloud")
    rented = sum(_scenario(p, "all-cloud")["total"]["value"] for p in result["pools"])
    assert every["total"]["value"] == pytest.approx(rented + result["fleet_fixed_usd"]["egress"]
                                                    + result["fleet_fixed_usd"]["managed_services"])


def test_a_single_model_fleet_has_one_pool_with_the_fleets_figures(tmp_path: Path) -> None:
    rows = [r for r in fleet_rows() if r["gpu_name"] == H100]
    d = analyze(write(tmp_path / "h100", rows)).to_dict()
    assert [p["model"] for p in d["pools"]] == ["h100-sxm-80gb"]
    assert d["pools"][0]["scenarios"] == d["costs"]["scenarios"]
    assert d["fleet_fixed_usd"] == {}
    assert d["pools"][0]["recommendation"] == d["decision"]["recommended_scenario"]
    ci = d["confidence"]["real_utilization"]
    assert (d["pools"][0]["real_low"], d["pools"][0]["real_high"]) == (ci["low"], ci["high"])
    assert ci["low"] is not None


def test_a_single_t4_fleet_is_priced_as_t4s(tmp_path: Path, mixed: tuple[Path, Path]) -> None:
    """A fleet of one model the config says nothing about is priced from the catalogue, and the assumptions
    list says where the price came from."""
    rows = [r for r in fleet_rows() if r["gpu_name"] == T4]
    d = analyze(write(tmp_path / "t4", rows), load_config(mixed[1])).to_dict()
    assert d["costs"]["cloud_usd_per_gpu_hour"]["value"] == pytest.approx(0.526)
    row = next(a for a in d["assumptions"] if a["key"] == "cloud.instance_usd_per_hour")
    assert row["value"] == pytest.approx(0.526) and "catalogue t4" in row["source"]


def test_a_stated_fleet_price_prices_a_single_model_fleet(tmp_path: Path) -> None:
    """A price the operator stated ([cloud] in a file) wins over the catalogue when the fleet has one model."""
    rows = [r for r in fleet_rows() if r["gpu_name"] == H100]
    cfg = tmp_path / "c.toml"
    cfg.write_text("[cloud]\ninstance_usd_per_hour = 40.0\n", encoding="utf-8")
    d = analyze(write(tmp_path / "h", rows), load_config(cfg)).to_dict()
    assert d["costs"]["cloud_usd_per_gpu_hour"]["value"] == pytest.approx(5.0)


def test_a_stated_fleet_price_in_a_mixed_fleet_is_named_in_a_warning(tmp_path: Path,
                                                                     mixed: tuple[Path, Path]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[models."t4"]\nhardware_usd_per_gpu = 2500\n[cloud]\ninstance_usd_per_hour = 40.0\n',
                   encoding="utf-8")
    d = analyze(mixed[0], load_config(cfg)).to_dict()
    assert any(w.startswith("cloud.instance_usd_per_hour = 40") and "per model" in w for w in d["warnings"])


def test_pool_json_has_the_documented_fields(result: dict[str, Any]) -> None:
    pool = result["pools"][0]
    for key in ("model", "gpu_name", "gpus", "held_utilization", "real_utilization", "scenarios",
                "recommendation", "owned_gpus", "real_low", "real_high", "break_even_billed_utilization"):
        assert key in pool, key
    assert {"id", "total", "components", "cloud_gpu_hours", "owned_gpus"} <= set(pool["scenarios"][0])
    json.dumps(result)  # plain JSON
    assert dt.datetime.fromisoformat(result["trial"]["start"]) >= T0


def _no_overheads(tmp_path: Path) -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text(T4_CONFIG + "[cloud]\nmanaged_services_usd_per_month = 0\nmanaged_services_usd_once = 0\n",
                   encoding="utf-8")
    return cfg


def test_the_report_shows_each_model_beside_the_fleet_answer(mixed: tuple[Path, Path], tmp_path: Path) -> None:
    """Item 5: a per-model table (GPUs, held, real, the plan for that model, its cost under each plan) next to
    the fleet answer, and the headline's action in counts per model."""
    from gpuaudit.report.render import render_markdown
    from gpuaudit.report.sections import build_report

    r = analyze(mixed[0], load_config(_no_overheads(tmp_path)))
    assert r.decision.headline.endswith("Per model: rent the t4 work, sell the 32 t4; keep the 8 h100-sxm-80gb.")
    md = render_markdown(build_report(r, version="test"))
    assert "Per model: rent the t4 work, sell the 32 t4; keep the 8 h100-sxm-80gb." in md
    table = md[md.index("**Per GPU model, each at its own prices"):]
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()[4:6]}
    assert "| 32 | 15 % | 4.5 % | cloud | rent the t4 work, sell the 32 t4 | 0.53 | 2,500 |" in rows["t4"]
    assert "| 8 | 100 % | 70 % |" in rows["h100-sxm-80gb"] and "| 6.88 | 46,900 |" in rows["h100-sxm-80gb"]
    t4 = next(p for p in r.pools if p.model == "t4")
    cloud = next(s for s in t4.scenarios if s.id == "all-cloud")
    assert f"\\${cloud.total.value:,.0f}" in rows["t4"]


def test_chargeback_prices_idle_hours_at_each_models_own_price(tmp_path: Path) -> None:
    """An idle hour on a T4 is worth a T4's flexible price, not an H100's: two users each hold one GPU idle
    for the whole trial, one on an H100, one on a T4."""
    from tests.analysis_helpers import ends, proc_rows

    rows, procs = [], []
    for uuid, name, host, user in (("GPU-h", H100, "h-node", "hana"), ("GPU-t", T4, "t-node", "tom")):
        g = [{**r, "gpu_name": name} for r in gpu_rows(host, uuid, N, interval_s=STEP, sm=0.0, procs=1)]
        rows += g
        procs += proc_rows(host, uuid, ends(g), user=user)
    r = analyze(write(tmp_path / "d", rows, procs))
    flexible = {p.model: p.flexible_usd_per_gpu_hour for p in r.pools}
    assert r.chargeback is not None
    by_user = {row["user"]: row for row in r.chargeback.by_user.rows}
    hours = DAYS * 24
    assert by_user["tom"]["unused_gpu_hours"] == pytest.approx(hours)
    assert by_user["tom"]["unused_usd"] == pytest.approx(hours * flexible["t4"])
    assert by_user["hana"]["unused_usd"] == pytest.approx(hours * flexible["h100-sxm-80gb"])
    assert flexible["t4"] < flexible["h100-sxm-80gb"] / 10


def test_the_mixed_model_simulation_is_measured_per_model_at_its_truth(tmp_path: Path) -> None:
    """`simulate --scenario mixed-models` writes its truth per model: each pool's held and real utilization
    equal it (allocations and all), and each pool is priced at its own model's list price."""
    from gpuaudit.sim import bulk
    from gpuaudit.store import read_json

    bulk.simulate(tmp_path, "mixed-models", None, 7, 900, seed=1, start=dt.datetime(2026, 9, 7, tzinfo=dt.UTC))
    truth = read_json(tmp_path, "simulation.json")["models"]
    r = analyze(tmp_path, load_config(_no_overheads(tmp_path)))
    pools = {p.gpu_name: p for p in r.pools}
    assert set(pools) == set(truth)
    for name, t in truth.items():
        assert pools[name].gpus == t["gpus"]
        assert pools[name].held_utilization == pytest.approx(t["runtime_util"], abs=1e-6)
        assert pools[name].real_utilization == pytest.approx(t["real_util"], abs=1e-6)
    assert pools["Tesla T4"].usd_per_gpu_hour == pytest.approx(0.526)
    assert pools["NVIDIA H100 80GB HBM3"].owned_gpus == 8
