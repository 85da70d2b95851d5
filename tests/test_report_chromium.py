"""A real headless Chromium opens the generated report: no console errors, no network requests, the
verdict and key figures in the rendered text, untrusted names shown as text; screenshots go to
test-artifacts/ (look at them: they are the report a CFO gets)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers import run_cli
from tests.report_helpers import HOSTILE_NAMES, artifact, open_in_chromium, simulate_small, write_fixed_dataset

from gpuaudit.util import fmt

pytestmark = pytest.mark.chromium


@pytest.fixture(scope="module")
def phantom_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("phantom")
    simulate_small(base / "data", "phantom", gpus=16, days=7, interval_s=600)
    proc = run_cli("report", "--data", str(base / "data"), "--out", str(base / "out"))
    assert proc.returncode == 0, proc.stderr
    return base / "out"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_report_opens_cleanly_in_chromium(phantom_report: Path, scheme: str) -> None:
    pdf = artifact("report-phantom.pdf") if scheme == "light" else None
    visit = open_in_chromium(phantom_report / "report.html", artifact(f"report-phantom-{scheme}.png"),
                             dark=scheme == "dark", pdf=pdf)
    assert visit.console_errors == []
    assert visit.requests == [visit.url]  # the file itself, nothing else (no fonts, CDN, images)
    result = json.loads((phantom_report / "report.json").read_text())
    text = visit.text
    assert "RECOMMENDATION" in text.upper()
    assert result["decision"]["headline"] in text
    u = result["utilization"]
    for key in ("real_utilization", "runtime_utilization"):
        assert fmt.pct(u[key]["value"]) in text
    assert fmt.pp(u["phantom_gap"]["value"]) in text
    assert result["decision"]["reevaluate_on"] in text
    for title in ("Believed vs real utilization", "Where the waste is", "Demand and sizing", "Sensitivity",
                  "Method and assumptions"):
        assert title in text
    assert visit.screenshot is not None and visit.screenshot.stat().st_size > 50_000
    assert "GPU utilization audit" in visit.title
    if pdf is not None:
        data = pdf.read_bytes()
        assert data.startswith(b"%PDF") and data.count(b"/Type /Page") >= 4  # prints, on several pages


def test_hostile_names_render_as_text_in_chromium(tmp_path: Path) -> None:
    write_fixed_dataset(tmp_path / "data", hostile=True)
    proc = run_cli("report", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out"), "--format", "html")
    assert proc.returncode == 0, proc.stderr
    visit = open_in_chromium(
        tmp_path / "out" / "report.html", artifact("report-hostile-names.png"),
        probes={
            "pwned": "typeof window.__pwned",
            "scripts": "document.querySelectorAll('script').length",
            "imgs": "document.querySelectorAll('img').length",
        },
    )
    assert visit.probes == {"pwned": "undefined", "scripts": 0, "imgs": 0}
    assert visit.console_errors == [] and visit.requests == [visit.url]
    for field in ("host", "user", "job_id", "k8s_pod", "gpu_uuid"):
        marker = HOSTILE_NAMES[field].split("<", 1)[0]
        assert f"{marker}<script>window.__pwned=1</script>" in visit.text, field
