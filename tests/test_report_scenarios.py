"""Every simulated scenario's report renders, with the analyzer's verdict at the top."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.report_helpers import simulate_small

from gpuaudit.sim.workload import SCENARIOS


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_scenario_renders(scenario: str, tmp_path: Path) -> None:
    from gpuaudit.flows import analyze
    from gpuaudit.report.writer import write_report

    gpus = 24 if scenario == "bursty-agents" else 16
    simulate_small(tmp_path / "data", scenario, gpus=gpus, days=3, interval_s=900)
    result = analyze(tmp_path / "data")
    written = write_report(result, tmp_path / "out")
    html = written.files["html"].read_text()
    md = written.files["md"].read_text()
    verdict = written.report.verdict
    assert verdict.branch == result.decision.recommendation
    # The verdict box comes first, before any section.
    assert html.index(f'class="verdict {verdict.branch}"') < html.index('id="believed-vs-real"')
    assert md.index("## Recommendation") < md.index("## 1. Believed vs real utilization")
    assert len(written.report.sections) == 7
    assert {c.name for c in written.report.charts()} >= {"utilization", "hour-of-week", "demand", "costs",
                                                         "sensitivity"}
    assert json.loads(written.files["json"].read_text())["decision"]["recommendation"] == verdict.branch
    assert verdict.provisional  # 3 days < 90: the report must say so
    assert "PROVISIONAL" in html and "(provisional)" in md
