"""Report building blocks with real matplotlib, real jinja2 templates loaded through importlib.resources."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from tests.report_helpers import EVIL

from gpuaudit.errors import GpuauditError
from gpuaudit.report import charts
from gpuaudit.report.render import md_escape
from gpuaudit.report.writer import parse_formats
from gpuaudit.util import fmt

SVG_NS = "{http://www.w3.org/2000/svg}"


def _texts(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    return ["".join(t.itertext()) for t in root.iter(f"{SVG_NS}text")]


def test_chart_labels_with_markup_stay_text() -> None:
    labels = ["alice", "eviluser" + EVIL, "$x^2$ \"q\" 'a' & b"]
    svg = charts.top_bars(labels, [3.0, 2.0, 1.0], "Idle-held GPU-hours by user", "GPU-hours")
    root = ET.fromstring(svg)  # well-formed XML: the markup was escaped, not injected
    assert not [e for e in root.iter() if e.tag.endswith(("script", "img", "foreignObject"))]
    texts = _texts(svg)
    assert any("eviluser<script>" in t for t in texts)  # shortened, but literal
    assert "$x^2$ \"q\" 'a' & b" in texts  # mathtext off: the dollars stay dollars


def test_charts_are_deterministic_and_inline_cleanly() -> None:
    a = charts.utilization_bars(0.6, 0.23, 0.36)
    b = charts.utilization_bars(0.6, 0.23, 0.36)
    assert a == b
    assert "60.0 %" in _texts(a) and "23.0 %" in _texts(a)
    inline = charts.inline(a, 'Believed "vs" real')
    assert inline.startswith("<svg") and "<?xml" not in inline and "DOCTYPE" not in inline
    assert 'aria-label="Believed &#34;vs&#34; real"' in inline
    ET.fromstring(inline)


def test_heatmap_is_vector_only() -> None:
    grid = [[(d * 24 + h) / 168 for h in range(24)] for d in range(7)]
    grid[6][23] = None
    svg = charts.hour_of_week_heatmap(grid, "Real utilization by hour of week")
    assert "<image" not in svg and "data:" not in svg  # no embedded bitmaps: crisp in print
    assert {"Mon", "Sun", "00:00", "21:00"} <= set(_texts(svg))


@pytest.mark.parametrize("text", [EVIL, "a|b", "*bold* _it_ [l](u) `c` # h ![i](x) ~s~", "line\nbreak"])
def test_md_escape_leaves_no_markup(text: str) -> None:
    out = md_escape(text)
    assert "<" not in out and ">" not in out and "\n" not in out
    for ch in "|*_[]`#!~":
        assert ch not in out.replace("\\" + ch, "")  # every special is backslash-escaped


def test_parse_formats() -> None:
    assert parse_formats("html, md,json,html") == ["html", "md", "json"]
    assert parse_formats("markdown") == ["md"]
    with pytest.raises(GpuauditError, match="unknown report format 'pdf'"):
        parse_formats("html,pdf")
    with pytest.raises(GpuauditError, match="no report format"):
        parse_formats(" , ")


def test_number_formats() -> None:
    assert fmt.pct(0.2345) == "23.4 %"
    assert fmt.pp(0.37) == "37.0 pp"
    assert fmt.money(2_916_600) == "$2.92M"
    assert fmt.money(2_916_600, exact=True) == "$2,916,600"
    assert fmt.money(-45_000) == "−$45k"
    assert fmt.unit_value(5.0, "USD/GPU-h") == "$5.00/GPU-h"
    assert fmt.unit_value(3.0, "count") == "3"
    assert fmt.unit_value(None, "fraction") == "n/a"
    assert fmt.hours(82_944.4) == "82,944 GPU-h"


def test_templates_ship_in_the_package() -> None:
    from gpuaudit.util.resources import templates_dir

    names = {p.name for p in templates_dir().iterdir()}
    assert {"report.html.j2", "report.md.j2"} <= names


def test_report_package_stays_out_of_the_cli_and_nvml() -> None:
    """The report library never imports typer or pynvml; the CLI never imports matplotlib at start-up."""
    import subprocess
    import sys

    code = (
        "import sys, gpuaudit.report.sections, gpuaudit.report.writer, "
        "gpuaudit.report.terminal, gpuaudit.report.render;"
        "print(sorted(m for m in ('typer', 'pynvml') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    code = "import sys, gpuaudit.cli.report; print('matplotlib' in sys.modules, 'jinja2' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False False"


def test_inlining_a_chart_leaves_its_labels_text_alone() -> None:
    """A user named `bob id="x" url(#y)` showed in the HTML chart as `bob id="chart-idle-by-user-x" ...`: the id
    prefixing ran over text too (text escapes & < > but not quotes). Ids are prefixed in tags only."""
    from gpuaudit.report import charts

    name = 'bob id="x" url(#y) href="#z"'
    svg = charts.top_bars([name], [5.0], "Idle-held GPU-hours by user", "GPU-hours")
    html = charts.inline(svg, "t", prefix="chart-p")
    assert 'bob id="x" url(#y) href="#z"' in html.replace("&quot;", '"')
    assert 'id="chart-p-x"' not in html and "url(#chart-p-y)" not in html and "#chart-p-z" not in html
    ids = re.findall(r'<[^>]*\bid="([^"]+)"', html)
    assert ids and all(i.startswith("chart-p-") for i in ids)  # the chart's own ids are still prefixed


def test_a_phone_charts_label_never_splits_a_visible_escape() -> None:
    """A user `ml-research-alpha\\u202egnp.exe` (a bidi override, shown escaped) wrapped on the phone chart into
    `ml-research-alpha\\` / `u202egnp.exe`: read as another name. An escape is one unit of the wrap."""
    from gpuaudit.report import charts

    for raw, escape in (("ml-research-alpha\u202egnp.exe", "\\u202e"), ("abcdefghijklmnop\x1bq", "\\x1b")):
        wrapped = charts.narrow(charts._short, raw)
        assert escape in wrapped.replace("\n", "") and all(
            escape in line or "\\" not in line for line in wrapped.split("\n")), wrapped
        assert len(wrapped.split("\n")) <= 2


def test_a_duration_curve_of_thousands_of_levels_is_drawn_at_a_few_hundred() -> None:
    """The demo's demand curve (about 2,000 hourly levels) was 182 KB of SVG, drawn twice (wide and phone): the
    HTML report grew 77 %. It is resampled to at most DURATION_POINTS points, each the true share of time at or
    above its x (the survival curve's pre-step value), both ends kept."""
    import numpy as np

    from gpuaudit.report import charts

    levels = np.linspace(0.0, 64.0, 3000)
    share = 1.0 - levels / 64.0  # share of time demand >= x
    xs, ys = charts._thin_survival(levels, share)
    assert len(xs) <= charts.DURATION_POINTS + 2 and xs[0] == 0.0 and xs[-1] == 64.0
    for x, y in zip(xs, ys, strict=True):
        first = int(np.searchsorted(levels, x - 1e-9))
        assert y == share[first]  # the share at the first level at or above x: never more than the truth
    full = charts.demand_duration(list(levels[:400]), list(share[:400]), 10.0, 64.0)
    many = charts.demand_duration(list(levels), list(share), 10.0, 64.0)
    assert len(many) < 1.5 * len(full)
