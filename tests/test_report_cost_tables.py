"""The cost tables say what a reader would otherwise have to guess: why a tornado row's moved value equals the
configured one (the spot share cannot rise past what the reserved and capacity-block shares leave), and which
part of a plan's first year of cash is the sale of the GPUs it gives up."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.report_helpers import write_fixed_dataset

from gpuaudit.analysis import analyze
from gpuaudit.analysis.config import load_config
from gpuaudit.analysis.result import AnalysisResult
from gpuaudit.report.model import ReportTable
from gpuaudit.report.sections import build_report


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> AnalysisResult:
    """The fixed fleet: 4 owned GPUs, all cloud cheapest (it sells all 4), spot share 0.7 + reserved 0.3 = 1."""
    root = tmp_path_factory.mktemp("tables") / "data"
    write_fixed_dataset(root)
    return analyze(root, load_config().replace("analysis", bootstrap_resamples=0))


def _table(r: AnalysisResult, section: str, caption: str) -> ReportTable:
    sec = next(s for s in build_report(r, version="t").sections if s.key == section)
    return next(t for t in sec.tables if t.caption.startswith(caption))


def test_the_tornado_row_says_why_the_spot_share_cannot_rise(result: AnalysisResult) -> None:
    row = next(x for x in result.sensitivity.tornado.rows if x["key"] == "cloud.spot_share")
    assert row["high_value"] == row["base_value"] == 0.7  # capped: 0.7 + 0.3 reserved + 0 capacity blocks = 1
    assert "at most 1" in row["limit"] and "0.3" in row["limit"]
    table = _table(result, "sensitivity", "Each input")
    cells = next(c for c in table.rows if c[0].startswith("spot share"))
    assert "capped" in cells[0] and "at most 1" in cells[0], cells[0]
    # a row moved the full ±30 % says nothing extra
    plain = next(c for c in table.rows if c[0].startswith("spot multiplier"))
    assert plain[0] == "spot multiplier"


def test_the_cash_table_labels_the_sale_of_the_gpus_given_up(result: AnalysisResult) -> None:
    by_id = {s.id: s for s in result.costs.scenarios}
    cloud = by_id["all-cloud"]
    assert cloud.sold_gpus == 4 and cloud.sale_usd > 0
    assert cloud.cash_usd_by_month[0] < 0  # month 0: the sale exceeds a month of renting
    assert by_id["stay-as-is"].sold_gpus == 0 and by_id["stay-as-is"].sale_usd == 0
    table = _table(result, "costs", "Cash, not present value")
    sold = table.columns.index("GPUs sold now (cash back in year 1)")
    row = next(c for c in table.rows if c[0] == cloud.label)
    assert row[sold].startswith("4 GPUs: +$") and "sale" in table.caption
    assert next(c for c in table.rows if c[0] == by_id["stay-as-is"].label)[sold] == "none"


def test_the_sale_is_what_the_gpus_are_worth_today(result: AnalysisResult, tmp_path: Path) -> None:
    """By hand: 4 GPUs × $46,900 (the catalogue's H100) × the resale share at their age."""
    from gpuaudit.analysis import costs

    cfg = load_config()
    cloud = next(s for s in result.costs.scenarios if s.id == "all-cloud")
    value = 4 * cfg.on_prem.hardware_usd_per_gpu * costs.resale_value(cfg, cfg.on_prem.owned_age_years)
    assert cloud.sale_usd == pytest.approx(value, rel=1e-9)
