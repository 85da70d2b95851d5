"""The report's charts, printed tiles and words read right:

- The demand duration curve is a pre-step: between two GPU counts it shows the share at or above the right
  count, and its marker names N* as everywhere else (the best N >= 0).
- On a phone's chart the weekly trend's dates do not run into each other, the sensitivity chart's axis label
  stays inside the chart, the heatmap's colour bar ticks are distinct, and "equal cost" does not sit on the
  title.
- Printed, every tile's "how computed" <details> is open: the PDF keeps every formula and source.
- No raw plan key ("keep-the-owned-fleet") shows in a tile or the Definitions table; "busy" means duty cycle
  everywhere.
"""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpuaudit.report import charts
from helpers import run_cli
from report_helpers import artifact, open_in_chromium, write_fixed_dataset

pytestmark = pytest.mark.chromium

SVG_NS = "{http://www.w3.org/2000/svg}"
XLINK_HREF = "{http://www.w3.org/1999/xlink}href"
REFERENCE_KEYS = ("buy-the-fleet", "keep-the-owned-fleet", "keep-owned-and-buy-the-rest")

# Every visible chart text whose box runs past its SVG's box, or intersects another text's box of the same
# chart by more than 2 px both ways (a pixel or two is the ascent/descent padding of adjacent lines).
TEXT_COLLISIONS = """(() => {
  const bad = [];
  let n = 0;
  for (const svg of document.querySelectorAll('figure.chart svg')) {
    const s = svg.getBoundingClientRect();
    if (s.width === 0 || s.height === 0) continue;
    const chart = (svg.closest('figure').id || 'chart') + (svg.classList.contains('narrow') ? ' (narrow)' : '');
    const seen = [];
    for (const t of svg.querySelectorAll('text')) {
      const r = t.getBoundingClientRect();
      const label = (t.textContent || '').trim();
      if (r.width === 0 || r.height === 0 || !label) continue;
      n++;
      if (r.left < s.left - 1 || r.right > s.right + 1 || r.top < s.top - 1 || r.bottom > s.bottom + 1)
        bad.push(chart + ': "' + label.slice(0, 50) + '" runs past its chart');
      for (const [other, q] of seen) {
        const w = Math.min(r.right, q.right) - Math.max(r.left, q.left);
        const h = Math.min(r.bottom, q.bottom) - Math.max(r.top, q.top);
        if (w > 2 && h > 2) bad.push(chart + ': "' + label.slice(0, 50) + '" overlaps "' + other.slice(0, 50)
                                     + '" by ' + Math.round(w) + ' x ' + Math.round(h) + ' px');
      }
      seen.push([label, r]);
    }
  }
  return {texts: n, bad: bad};
})()"""

# Per figure tile: the box of its source text as printed, the box of its <details>, and whether the text is the
# tile's source (its title attribute); on screen the print-only copy must take no room.
TILE_SOURCES = """Array.from(document.querySelectorAll('.figure')).map(f => {
  const p = f.querySelector('.src-print');
  const d = f.querySelector('details.src');
  const box = e => { if (!e) return 0; const r = e.getBoundingClientRect(); return r.width * r.height; };
  return {label: (f.querySelector('.k') || {}).textContent, printed: box(p),
          same: !!p && p.textContent === f.getAttribute('title'), details: box(d)};
})"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report (HTML and Markdown) of a fixed 30-day fleet: dated weeks, like the demo."""
    base = tmp_path_factory.mktemp("readability")
    write_fixed_dataset(base / "data", days=30)
    proc = run_cli("report", "--data", str(base / "data"), "--out", str(base / "out"), "--format", "html,md")
    assert proc.returncode == 0, proc.stderr
    return base / "out"


# -- reading a chart's SVG back in data coordinates ----------------------------------------------------------------

def _number(label: str) -> float | None:
    text = label.replace("−", "-").replace("%", "").replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return None


def _tick_scale(root: ET.Element, axis: str) -> tuple[float, float]:
    """(slope, offset) from data to SVG units along `axis` ("x" or "y"), read off the labelled tick marks."""
    pairs = []
    for g in root.iter(f"{SVG_NS}g"):
        if not re.fullmatch(f"{axis}tick_\\d+", g.get("id", "")):
            continue
        use = next(g.iter(f"{SVG_NS}use"))
        text = next(g.iter(f"{SVG_NS}text"))
        value = _number(text.text or "")
        if value is not None:
            pairs.append((value, float(use.get(axis, "nan"))))
    (v0, p0), (v1, p1) = pairs[0], pairs[-1]
    slope = (p1 - p0) / (v1 - v0)
    return slope, p0 - slope * v0


def _path_points(d: str, dx: float = 0.0, dy: float = 0.0) -> list[tuple[float, float]]:
    nums = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", d)]
    return [(x + dx, y + dy) for x, y in zip(nums[::2], nums[1::2], strict=True)]


def _curve_and_fill(root: ET.Element, color: str) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """The points of the line stroked in `color` and of the area filled in it (a path collection: a <use> of a
    path in <defs>, moved by the use's x and y)."""
    line = next(p for p in root.iter(f"{SVG_NS}path")
                if f"stroke: {color}; stroke-width: 2" in p.get("style", ""))
    use = next(u for u in root.iter(f"{SVG_NS}use") if f"fill: {color}; fill-opacity" in u.get("style", ""))
    target = use.get(XLINK_HREF, "").lstrip("#")
    area = next(p for p in root.iter(f"{SVG_NS}path") if p.get("id") == target)
    return (_path_points(line.get("d", "")),
            _path_points(area.get("d", ""), float(use.get("x", 0)), float(use.get("y", 0))))


def _heights_at(points: list[tuple[float, float]], x: float, *, closed: bool) -> list[float]:
    """The SVG y of every segment of the polyline (polygon if `closed`) `points` that crosses the vertical line
    at `x`."""
    ys = []
    for (x0, y0), (x1, y1) in zip(points, points[1:] + points[:1] if closed else points[1:], strict=False):
        if min(x0, x1) < x < max(x0, x1):
            ys.append(y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    return ys


def _texts(svg: str) -> list[str]:
    return [t.strip() for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]


# -- 1. the demand duration curve ---------------------------------------------------------------------------------

@pytest.mark.parametrize("draw", [charts.demand_duration, lambda *a: charts.narrow(charts.demand_duration, *a)],
                         ids=["wide", "narrow"])
def test_demand_curve_shows_the_share_of_time_at_or_above_each_count(draw) -> None:
    """Rows {0: 100 %, 1: 100 %, 2: 69 %}: at 1.5 GPUs (demand >= 1.5 means >= 2 GPUs) the line and its fill
    read 69 %, at 0.5 they read 100 %. The post-step drew 100 % all the way to 2."""
    root = ET.fromstring(draw([0.0, 1.0, 2.0], [1.0, 1.0, 0.69], 2.0, 4.0))
    (ax, bx), (ay, by) = _tick_scale(root, "x"), _tick_scale(root, "y")
    line, fill = _curve_and_fill(root, charts.REAL)
    for x, share in ((1.5, 0.69), (0.5, 1.0), (1.9, 0.69)):
        px = ax * x + bx
        for name, points in (("line", line), ("fill", fill)):
            # SVG y grows downwards: the fill's top edge is its smallest y
            top = min(_heights_at(points, px, closed=name == "fill"))
            assert (top - by) / ay == pytest.approx(share * 100, abs=1), (name, x)  # ticks read in %


def test_demand_marker_names_the_hybrids_owned_count_not_n_star() -> None:
    """The marked count is the hybrid's best N >= 1; "N*" is the best N >= 0 everywhere else."""
    for svg in (charts.demand_duration([0.0, 1.0, 2.0], [1.0, 1.0, 0.69], 2.0, 4.0),
                charts.narrow(charts.demand_duration, [0.0, 1.0, 2.0], [1.0, 1.0, 0.69], 2.0, 4.0)):
        texts = _texts(svg)
        assert "hybrid owns N = 2" in texts, texts
        assert not any("N*" in t for t in texts), texts


# -- 2. phone-width charts ------------------------------------------------------------------------------------------

def test_narrow_weekly_trend_labels_at_most_three_dates() -> None:
    weeks = ["2026-08-03", "2026-08-10", "2026-08-17", "2026-08-24", "2026-08-31", "2026-09-07"]
    svg = charts.narrow(charts.weekly_trend, weeks, [0.5] * 6, [0.2] * 6)
    dates = [t for t in _texts(svg) if re.search(r"\d{2}-\d{2}|[A-Z][a-z]{2} \d", t)]
    assert 2 <= len(dates) <= 3, dates


@pytest.mark.parametrize("narrow", [False, True], ids=["wide", "narrow"])
def test_heatmap_colour_bar_has_few_evenly_rounded_ticks(narrow: bool) -> None:
    """Cells from 30 % to 45 %: a handful of ticks, each shown exactly (30/35/40/45 %, not 30/32/35/38...)."""
    grid = [[0.30 + 0.15 * ((d * 24 + h) % 17) / 16 for h in range(24)] for d in range(7)]
    args = (grid, "Real utilization by hour of week")
    svg = charts.narrow(charts.hour_of_week_heatmap, *args) if narrow else charts.hour_of_week_heatmap(*args)
    values = [_number(t) for t in _texts(svg) if t.endswith("%")]
    assert 3 <= len(values) <= 5, values
    steps = {round(b - a, 6) for a, b in itertools.pairwise(values)}
    assert len(steps) == 1, values  # evenly spaced as labelled: no label rounded off its tick
    assert steps.pop() in (1, 2, 2.5, 5, 10, 20, 25), values


# Charts drawn from data chosen to provoke collisions: a tornado whose bars cross equal cost under its title,
# with the long axis label the sensitivity section gives it; a demand curve whose owned count and fleet size meet.
def _provoking_charts() -> list[tuple[str, str]]:
    tornado = ([f"input number {i}" for i in range(8)], [-5_000.0 - 3_000 * i for i in range(8)],
               [40_000.0 + 10_000 * i for i in range(8)], 10_000.0,
               "hybrid: margin over the next cheapest plan, USD (positive: hybrid is cheaper)",
               "What moves the answer: each input ±30%", ("input −30%", "input +30%"))
    demand = ([0.0, 1.0, 2.0, 3.0, 4.0], [1.0, 0.9, 0.7, 0.3, 0.1], 4.0, 4.0)
    weeks = [f"2026-{m:02d}-{d:02d}" for m in (8, 9, 10) for d in (1, 8, 15, 22)]
    trend = (weeks, [0.6] * 12, [0.3] * 12)
    out = []
    for name, draw, args in (("tornado", charts.tornado, tornado), ("demand", charts.demand_duration, demand),
                             ("weekly", charts.weekly_trend, trend)):
        out.append((name, charts.inline(draw(*args), name, f"{name}-w", "wide")))
        out.append((name, charts.inline(charts.narrow(draw, *args), name, f"{name}-n", "narrow")))
    return out


def test_provoking_charts_keep_their_texts_apart(tmp_path: Path) -> None:
    """Each chart at the width it is shown at (the wide one at the 1280 px report's 930 px, the phone's one at
    the 390 px report's 348 px): no text on another, none past the chart."""
    figures = "".join(
        f'<figure class="chart" id="{name}-{cls}" style="width:{930 if cls == "wide" else 348}px;margin:0">'
        f"{svg}</figure>"
        for (name, svg), cls in zip(_provoking_charts(), ["wide", "narrow"] * 3, strict=True))
    page = tmp_path / "charts.html"
    page.write_text(f"<!doctype html><meta charset='utf-8'><style>svg{{display:block;width:100%;height:auto}}"
                    f"</style><body>{figures}</body>", encoding="utf-8")
    visit = open_in_chromium(page, width=1000, probes={"texts": TEXT_COLLISIONS})
    result = visit.probes["texts"]
    assert result["texts"] > 60, result
    assert result["bad"] == [], result["bad"]


@pytest.mark.parametrize("width", [1280, 390])
def test_report_chart_texts_do_not_collide(report: Path, width: int) -> None:
    visit = open_in_chromium(report / "report.html", artifact(f"report-readability-{width}.png"), width=width,
                             probes={"texts": TEXT_COLLISIONS})
    result = visit.probes["texts"]
    assert result["texts"] > 100, result  # every visible chart's texts were measured
    assert result["bad"] == [], result["bad"]


# -- 3. print ------------------------------------------------------------------------------------------------------

def test_every_tile_prints_its_source_once(report: Path) -> None:
    printed = open_in_chromium(report / "report.html", width=718, media="print",
                               probes={"tiles": TILE_SOURCES}).probes["tiles"]
    assert len(printed) > 10, printed
    missing = [t["label"] for t in printed if not (t["printed"] > 0 and t["same"])]
    assert missing == [], f"tiles printed without their source: {missing}"
    twice = [t["label"] for t in printed if t["details"] > 0]
    assert twice == [], f"tiles whose 'how computed' also prints: {twice}"
    screen = open_in_chromium(report / "report.html", width=1280, probes={"tiles": TILE_SOURCES}).probes["tiles"]
    assert all(t["printed"] == 0 and t["details"] > 0 for t in screen), screen  # on screen: the disclosure only


# -- 4. words -----------------------------------------------------------------------------------------------------

def test_report_names_the_reference_plan_in_words(report: Path) -> None:
    for name in ("report.html", "report.md"):
        text = (report / name).read_text(encoding="utf-8")
        found = [k for k in REFERENCE_KEYS if k in text]
        assert found == [], f"{name}: {found}"
        assert "keeping the GPUs owned today" in text  # the words the key stands for (this fleet owns its GPUs)


def test_hurdle_tile_counts_gpus_held_around_the_clock(report: Path) -> None:
    """"Busy" is the duty cycle elsewhere in the report; the hurdle counts GPUs held (billed) all the time."""
    for name in ("report.html", "report.md"):
        text = (report / name).read_text(encoding="utf-8")
        assert re.search(r"~\d+\.\d GPUs held around the clock", text), name
        assert "busy GPUs" not in text and "busy around the clock" not in text, name
