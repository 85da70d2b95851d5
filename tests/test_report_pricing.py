"""Pricing a CFO can check: the mix each plan's cloud hours are actually priced at, stated wherever the price is
shown (report.md, report.html, the terminal summary, `analyze` and its JSON); the inputs that flip the answer
named in full; the staff cost's label agreeing with its figure, and shown on its own line in the verdict."""

from __future__ import annotations

import json
import re
import tomllib

import pytest
from tests.analysis_helpers import rollups
from tests.helpers import REPO, run_cli
from tests.report_helpers import write_fixed_dataset
from tests.test_latency_and_ties import _busy_fleet

from gpuaudit.analysis import analyze_rollups, cloudmix, costs
from gpuaudit.analysis.config import load_config
from gpuaudit.report.sections import build_report

# The default card: p5.48xlarge $55.04/h ÷ 8 GPUs; spot 0.45 × (1 + 0.1 interruptions/h × 0.25 h lost)
LIST = 55.04 / 8
SPOT = LIST * 0.45 * (1 + 0.1 * 0.25)
ALL_SPOT = f"priced as 100 % spot at ${SPOT:.2f}/GPU-h; on demand ${LIST:.2f}/GPU-h"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The fixed fleet (all cloud cheapest, renting flexibly) through every output."""
    root = tmp_path_factory.mktemp("pricing") / "data"
    write_fixed_dataset(root)
    out = root.parent / "out"
    rep = run_cli("report", "--data", str(root), "--out", str(out))
    assert rep.returncode == 0, rep.stderr
    text = run_cli("analyze", "--data", str(root))
    assert text.returncode == 0, text.stderr
    return {
        "terminal": rep.stdout,
        "analyze": text.stdout,
        "md": (out / "report.md").read_text(),
        "html": (out / "report.html").read_text(),
        "json": (out / "report.json").read_text(),
    }


def test_the_default_mix_is_worked_out_by_hand() -> None:
    """70 % spot / 30 % reserved configured, but a reserved hour ($4.27) costs more than a flexible one ($3.17):
    nothing is reserved, and every flexible hour is spot (the spot share of what is not reserved is 0.7 / 0.7)."""
    cfg = load_config()
    prices = costs.cloud_prices(cfg)
    assert prices.reserved > prices.flexible
    mix = cloudmix.priced_mix(prices, cfg.cloud, 0.0, 1000.0)
    assert mix is not None
    assert (mix.reserved_share, mix.spot_share, mix.capacity_block_share, mix.on_demand_share) == (0, 1, 0, 0)
    assert mix.usd_per_gpu_hour == pytest.approx(SPOT)
    assert mix.text == ALL_SPOT
    assert cloudmix.priced_mix(prices, cfg.cloud, 0.0, 0.0) is None  # renting nothing has no mix


def test_a_mix_with_reserved_and_on_demand_hours_is_worked_out_by_hand() -> None:
    """Half spot, a fifth reserved, the rest on demand; a quarter of the plan's hours reserved 24/7: the other
    three quarters split 0.5/0.8 spot and 0.3/0.8 on demand."""
    cfg = load_config().replace(
        "cloud", spot_share=0.5, reserved_share=0.2, capacity_block_share=0.0, reserved_multiplier=0.3
    )
    prices = costs.cloud_prices(cfg)
    mix = cloudmix.priced_mix(prices, cfg.cloud, 250.0, 1000.0)
    assert mix is not None
    assert mix.reserved_share == pytest.approx(0.25)
    assert mix.spot_share == pytest.approx(0.75 * 0.5 / 0.8)
    assert mix.on_demand_share == pytest.approx(0.75 * 0.3 / 0.8)
    flexible = LIST * (0.5 * 0.45 * 1.025 + 0.3) / 0.8
    assert mix.usd_per_gpu_hour == pytest.approx(0.25 * LIST * 0.3 + 0.75 * flexible)
    assert mix.text == (
        f"priced as 25 % reserved 24/7, 47 % spot, 28 % on demand at "
        f"${0.25 * LIST * 0.3 + 0.75 * flexible:.2f}/GPU-h on average; on demand ${LIST:.2f}/GPU-h"
    )


def test_every_output_states_the_mix_all_cloud_is_priced_at(outputs: dict[str, str]) -> None:
    assert ALL_SPOT in outputs["md"].replace("\\$", "$")
    assert ALL_SPOT in outputs["html"]
    assert ALL_SPOT in outputs["terminal"]
    assert ALL_SPOT in outputs["analyze"]


def test_the_json_names_the_mix_of_every_plan_that_rents(outputs: dict[str, str]) -> None:
    result = json.loads(outputs["json"])
    by_id = {s["id"]: s for s in result["costs"]["scenarios"]}
    mix = by_id["all-cloud"]["priced_mix"]
    assert mix["spot_share"] == 1.0 and mix["reserved_share"] == mix["on_demand_share"] == 0.0
    assert mix["usd_per_gpu_hour"] == pytest.approx(SPOT)
    assert mix["on_demand_usd_per_gpu_hour"] == pytest.approx(LIST)
    assert mix["text"] == ALL_SPOT
    assert by_id["all-on-prem"]["priced_mix"] is None  # it rents nothing


def test_the_caveats_say_spot_assumes_interruptions(outputs: dict[str, str]) -> None:
    result = json.loads(outputs["json"])
    spot = [c for c in result["decision"]["caveats"] if "spot" in c]
    assert len(spot) == 1, result["decision"]["caveats"]
    assert "long training jobs on spot" in spot[0] and "0.1 times per hour" in spot[0]
    assert "cloud.spot_interruptions_per_hour" in spot[0]
    assert "long training jobs on spot" in outputs["md"] and "long training jobs on spot" in outputs["analyze"]


def test_every_input_that_flips_the_answer_is_named_in_full() -> None:
    """A near tie of renting and owning: more than three inputs flip the cheapest plan at ±30 %, and the
    confidence reason named three and an ellipsis."""
    r = analyze_rollups(
        rollups(_busy_fleet(0.1)),
        load_config().replace("analysis", bootstrap_resamples=0).replace("cloud", instance_usd_per_hour=60.0),
    )
    flips = [row for row in r.sensitivity.tornado.rows if row["changes_cheapest"]]
    assert len(flips) > 3, [row["parameter"] for row in flips]
    reason = next(x for x in r.decision.confidence.reasons if "changes the cheapest scenario" in x)
    assert "…" not in reason
    for row in flips:
        assert f"{row['parameter']} ({row['key']})" in reason
    verdict = build_report(r, version="t").verdict
    assert reason in verdict.confidence
    # "What decides this" gives each of them its own line (staff on the staff line), a capped end said as such
    for row in flips:
        if row["key"].startswith("on_prem.staff"):
            continue
        line = next(x for x in verdict.decides if x.startswith(f"{row['parameter']} ({row['key']})"))
        assert ("capped" in line) == bool(row["limit"]), line
    assert sum(x.startswith("Staff:") for x in verdict.decides) == 1


def _comment_above(key: str, text: str) -> str:
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith(f"{key} ="))
    out = []
    while lines[i - 1].startswith("#"):
        i -= 1
        out.insert(0, lines[i].lstrip("# "))
    return " ".join(out)


def test_the_staff_label_agrees_with_its_figure() -> None:
    """$15,000 a month is $180k a year: the loaded cost of the full engineer the per-node row prices, not "one
    part-time engineer"."""
    text = (REPO / "src" / "gpuaudit" / "analysis" / "presets" / "default.toml").read_text()
    on_prem = tomllib.loads(text)["on_prem"]
    base, per_node = _comment_above("staff_usd_per_month", text), _comment_above("staff_usd_per_node_per_month", text)
    year = on_prem["staff_usd_per_month"] * 12
    assert "part-time" not in base
    assert "full-time" in base and f"${year / 1000:,.0f}k/year" in base
    assert f"${year / 1000:,.0f}k/year" in per_node  # the same engineer, the same figure
    docs = (REPO / "docs" / "analyzer.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| `on_prem.staff_usd_per_month`"))
    assert "full-time" in row and "part-time engineer;" not in row


def test_the_verdict_shows_staff_on_its_own_line(outputs: dict[str, str]) -> None:
    md = outputs["md"].replace("\\", "")
    block = md[md.index("What decides this") : md.index("## 1.")]
    staff = [line for line in block.splitlines() if line.startswith("- Staff")]
    assert len(staff) == 1, block
    assert "$15,000/month" in staff[0] and "on_prem.staff_usd_per_month" in staff[0]
    assert re.search(r"\d+ % of staying as is", staff[0]), staff[0]
    assert "What decides this" in outputs["html"]


def test_the_staff_line_prices_staying_when_staying_is_recommended() -> None:
    """rv2: when the recommended plan was staying as is, the staff line skipped both plans and read "paid while
    anything is owned, over 36 months: ; ±30 % on it ...": no dollar figure at all."""
    r = analyze_rollups(
        rollups(_busy_fleet(0.9)),
        load_config().replace("analysis", bootstrap_resamples=0).replace("cloud", instance_usd_per_hour=600.0),
    )
    assert (r.decision.recommended_scenario or r.costs.cheapest) == "stay-as-is"
    line = next(x for x in build_report(r, version="t").verdict.decides if x.startswith("Staff:"))
    assert "months: ;" not in line and "% of staying as is ($" in line, line
    assert line.count("of staying as is") == 1, line
