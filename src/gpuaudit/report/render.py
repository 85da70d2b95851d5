"""Renderers: the report model to HTML (one self-contained file), Markdown (+ SVG files) and JSON.

Templates are read through importlib.resources (`gpuaudit.util.resources.templates_dir()`), so they load
the same from a source tree, an editable install or a zipped wheel.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuaudit.report.model import Report

if TYPE_CHECKING:
    import jinja2

    from gpuaudit.report.chartpool import ChartPool
from gpuaudit.util.textsafe import visible

_HTML_TEMPLATE = "report.html.j2"
_MD_TEMPLATE = "report.md.j2"
CHART_DIR = "charts"


def _load_template(name: str) -> str | None:
    from gpuaudit.util.resources import templates_dir

    path = templates_dir() / name
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _html_visible(value: Any) -> Any:
    """Control and format characters of a printed value made visible (`\\x1b`, `\\u202e`): autoescape only
    handles & < > " '. Markup (the inlined charts) is trusted and passes as it is."""
    from markupsafe import Markup

    if isinstance(value, str) and not isinstance(value, Markup):
        return visible(value, keep="\n\t")  # laid out as spaces by HTML
    return value


def _html_env() -> jinja2.Environment:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FunctionLoader(_load_template),
        autoescape=True,  # every value is escaped: names in the data are untrusted
        finalize=_html_visible,
        undefined=jinja2.StrictUndefined,
        trim_blocks=False,
        lstrip_blocks=False,
    )


# CommonMark specials that could start markup inside a line, plus the table separator. `&` first so
# the entities added for < and > are not escaped again.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]{}|~#!$])")


def md_escape(value: Any) -> str:
    """Text safe to drop into Markdown (inline or in a table cell): no markup, no raw HTML, one line, no raw
    control or format character (shown as `\\x1b`, `\\u202e`, whose backslash is then escaped like any)."""
    if value is None:
        return ""
    text = str(value)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = visible(re.sub(r"[\r\n\t]+", " ", text))
    return _MD_SPECIAL.sub(r"\\\1", text)


def _md_env() -> jinja2.Environment:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FunctionLoader(_load_template),
        autoescape=False,
        finalize=md_escape,  # escaping is the default for every printed value, not opt-in
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )


@dataclass(frozen=True)
class DrawnChart:
    """One chart's SVG documents: at the report's width, and (for HTML) at a phone's."""

    wide: str
    narrow: str | None = None


def draw_charts(
    report: Report, *, narrow: bool = True, progress: Callable[[str], None] | None = None, pool: ChartPool | None = None
) -> dict[str, DrawnChart]:
    """Every chart of `report` drawn from its spec, by name; `narrow`: each also at a phone's width. `pool`:
    workers that draw them (report/chartpool.py), else this process does."""
    charts = report.charts()
    if progress is not None and charts:
        progress(f"drawing {len(charts)} charts" + (" at two widths" if narrow else ""))
    jobs = [(c.spec, n) for c in charts for n in ((False, True) if narrow else (False,))]
    if pool is not None:
        svgs = iter(pool.draw(jobs))
    else:
        from gpuaudit.report.charts import draw

        svgs = iter([draw(spec, narrow=n) for spec, n in jobs])
    return {c.name: DrawnChart(next(svgs), next(svgs) if narrow else None) for c in charts}


def render_html(report: Report, drawn: dict[str, DrawnChart] | None = None) -> str:
    """The self-contained HTML report; `drawn`: its charts already drawn (`draw_charts`), else drawn here."""
    from markupsafe import Markup

    from gpuaudit.report.charts import inline

    drawn = drawn if drawn is not None else draw_charts(report)
    # matplotlib's SVG writer escapes every text node, so the chart markup itself is trusted.
    svgs, narrow = {}, {}
    for c in report.charts():
        d = drawn[c.name]
        svgs[c.name] = Markup(inline(d.wide, c.title, prefix=f"chart-{c.name}", css_class="wide" if d.narrow else ""))
        # A phone gets the chart drawn for its width (the CSS shows one of the two): scaled down, the wide chart's
        # text would be ~5 px there.
        if d.narrow is not None:
            narrow[c.name] = Markup(inline(d.narrow, c.title, prefix=f"chart-{c.name}-n", css_class="narrow"))
    return _html_env().get_template(_HTML_TEMPLATE).render(report=report, svgs=svgs, narrow=narrow)


def _chart_files(report: Report) -> dict[str, str]:
    """Relative path of each chart's SVG file next to the Markdown report."""
    return {c.name: f"{CHART_DIR}/{c.name}.svg" for c in report.charts()}


def render_markdown(report: Report) -> str:
    text = _md_env().get_template(_MD_TEMPLATE).render(report=report, chart_files=_chart_files(report))
    return re.sub(r"\n{3,}", "\n\n", text)
