"""The report prints and reads on a phone. A real headless Chromium lays it out at 1280 px, at 390 px (a phone)
and as printed (print stylesheet at the A4 page's printable width), and prints it to PDF: no element is wider
than the page (tables fit or stack instead of being clipped or scrolled), chart text stays readable on a phone,
and the page count is recorded in test-artifacts/report-layout.txt."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import run_cli
from report_helpers import artifact, open_in_chromium, write_fixed_dataset

pytestmark = pytest.mark.chromium

# Every element whose box reaches past the viewport, or a page that scrolls sideways.
OVERFLOW = """(() => {
  const w = document.documentElement.clientWidth;
  const bad = [];
  for (const e of document.querySelectorAll('body *')) {
    const r = e.getBoundingClientRect();
    if (r.width > 0 && (r.right > w + 1 || r.left < -1)) {
      bad.push(e.tagName.toLowerCase() + (e.className && typeof e.className === 'string' ? '.' + e.className : '')
               + ' ' + Math.round(r.left) + '-' + Math.round(r.right));
    }
  }
  if (document.documentElement.scrollWidth > w + 1) bad.push('page scrolls to ' + document.documentElement.scrollWidth);
  return bad.slice(0, 20);
})()"""
# Table cells whose content is cut off (a scroll box or clipped cell).
CLIPPED = """Array.from(document.querySelectorAll('.scroll, td, th')).filter(e => e.scrollWidth > e.clientWidth + 1)
  .map(e => e.tagName.toLowerCase() + ': ' + (e.innerText || '').slice(0, 40)).slice(0, 20)"""
# The rendered size of every visible chart text: its font size in the SVG's units × the SVG's scale on screen.
CHART_TEXT = """Array.from(document.querySelectorAll('figure.chart svg text')).filter(t => {
    const r = t.getBoundingClientRect(); return r.width > 0 && r.height > 0;
  }).map(t => {
    const m = t.getScreenCTM();
    const px = parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b);
    return [Math.round(px * 10) / 10, (t.textContent || '').slice(0, 30)];
  })"""
LEGIBLE_PX = 10.0  # the smallest chart text a reader can take in on a phone without zooming
A4_PRINTABLE_PX = 718  # 8.27 in × 96 px minus Chromium's default margins


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("layout")
    write_fixed_dataset(base / "data", hostile=True)  # long unbreakable names: the hardest case for a table
    proc = run_cli("report", "--data", str(base / "data"), "--out", str(base / "out"), "--format", "html")
    assert proc.returncode == 0, proc.stderr
    return base / "out" / "report.html"


@pytest.mark.parametrize(("width", "media"), [(1280, ""), (390, ""), (A4_PRINTABLE_PX, "print")],
                         ids=["desktop", "phone", "print"])
def test_no_element_is_wider_than_the_page(report: Path, width: int, media: str) -> None:
    name = f"report-layout-{width}{'-print' if media else ''}"
    pdf = artifact(f"{name}.pdf") if media else None
    visit = open_in_chromium(report, artifact(f"{name}.png"), width=width, media=media, pdf=pdf,
                             probes={"overflow": OVERFLOW, "clipped": CLIPPED, "chart_text": CHART_TEXT})
    assert visit.probes["overflow"] == [], visit.probes["overflow"]
    texts = visit.probes["chart_text"]
    assert len(texts) > 50, texts  # every chart's labels are measured (the probe sees the visible charts)
    small = [t for t in texts if t[0] < LEGIBLE_PX]
    assert small == [], f"{len(small)} chart texts under {LEGIBLE_PX} px: {small[:10]}"
    assert visit.probes["clipped"] == [], visit.probes["clipped"]
    if pdf is not None:
        data = pdf.read_bytes()
        pages = data.count(b"/Type /Page") - data.count(b"/Type /Pages")
        with artifact("report-layout.txt").open("a") as f:
            f.write(f"fixed dataset (hostile names): {pages} A4 pages\n")
        assert data.startswith(b"%PDF") and pages >= 2
