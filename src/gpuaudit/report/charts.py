"""Static SVG charts for the report, drawn with matplotlib's SVG backend.

`draw(spec)` draws a `model.ChartSpec` (what the sections build) at the wide or the phone's width; each drawing
function under it takes plain data (lists, numbers) and returns one standalone SVG document as text. The
charts sit on an explicit white card with dark ink so they read the same in light and dark mail
clients and in print. Names in labels are untrusted: mathtext is off (a `$` in a user name must not
become a formula) and the SVG writer escapes markup.
"""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from gpuaudit.report.model import ChartKind, ChartSpec

if TYPE_CHECKING:  # matplotlib is imported when a chart is drawn, never by importing the report
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

_INK = "#1f2933"
_GRID = "#d9dee4"
BELIEVED = "#9aa5b1"  # runtime-hour figures: what people believe
REAL = "#1d5fa8"  # SM-active figures: what the GPUs did
_WASTE = "#c2410c"
CLOUD = "#7c3aed"
_ONPREM = "#0f766e"
_TODAY = "#b91c1c"

_STYLE: dict[Any, Any] = {  # matplotlib types rc keys as a Literal of every name
    "svg.fonttype": "none",  # real <text>: selectable, searchable, small
    "svg.hashsalt": "gpuaudit",  # deterministic ids, so the same data gives the same file
    "text.parse_math": False,
    "text.usetex": False,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],  # ships with matplotlib: same metrics everywhere
    "font.size": 9,
    "axes.edgecolor": _GRID,
    "axes.labelcolor": _INK,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.titlecolor": _INK,
    "axes.titlelocation": "left",
    "xtick.color": _INK,
    "ytick.color": _INK,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
}

_WIDTH_IN = 7.2
# A phone's chart: drawn this wide, a 390 px screen shows it at ~1.34 px per point, so the smallest text (8 pt)
# reads at ~10.7 px; the 7.2 in chart scaled down to the phone would show it at ~5.4 px.
_NARROW_WIDTH_IN = 3.6
_NARROW: ContextVar[bool] = ContextVar("gpuaudit_chart_narrow", default=False)


def narrow(draw: Callable[..., str], *args: Any, **kwargs: Any) -> str:
    """The chart `draw(*args, **kwargs)` drawn for a phone's width: the same fonts on a narrower figure, long
    labels and titles wrapped, fewer ticks and legend columns (the HTML report shows it below 760 px)."""
    token = _NARROW.set(True)
    try:
        return draw(*args, **kwargs)
    finally:
        _NARROW.reset(token)


def _is_narrow() -> bool:
    return _NARROW.get()


def _figure(
    height_in: float, name: str, narrow_height_in: float | None = None
) -> tuple[Figure, AbstractContextManager[Any]]:
    import matplotlib

    matplotlib.use("svg")
    from matplotlib.figure import Figure

    ctx = matplotlib.rc_context()
    ctx.__enter__()
    # matplotlib's defaults under our style, whatever a matplotlibrc (in the working directory, $MATPLOTLIBRC,
    # $MPLCONFIGDIR) says: the same spec gives the same bytes anywhere (report/chartcache.py relies on it).
    matplotlib.rcdefaults()
    matplotlib.rcParams.update({**_STYLE, "svg.hashsalt": f"gpuaudit-{name}"})
    size = (_NARROW_WIDTH_IN, narrow_height_in or height_in) if _is_narrow() else (_WIDTH_IN, height_in)
    fig = Figure(figsize=size, layout="constrained")
    return fig, ctx


def _title(ax: Any, text: str) -> None:
    """The chart's title over its axes; on a phone's chart over the whole figure (the axes start past the
    labels), wrapped at 40 characters (10 pt bold: about what 3.6 in holds)."""
    if not _is_narrow():
        ax.set_title(text)
        return
    ax.figure.suptitle(
        textwrap.fill(text, 40),
        x=0.01,
        ha="left",
        fontsize=_STYLE["axes.titlesize"],
        fontweight=_STYLE["axes.titleweight"],
        color=_INK,
    )


def _legend(ax: Any, *, ncols: int, narrow_cols: int = 1, **kwargs: Any) -> None:
    """The legend where it is on the wide chart; on a phone's chart below the figure, in `narrow_cols` columns
    (beside the plot it would cover the data or run past the edge)."""
    if _is_narrow():
        handles = kwargs.pop("handles", None)
        for key in ("loc", "bbox_to_anchor"):
            kwargs.pop(key, None)
        if handles is None:
            handles = ax.get_legend_handles_labels()[0]
        ax.figure.legend(handles=handles, loc="outside lower left", ncols=narrow_cols, **kwargs)
        return
    ax.legend(ncols=ncols, **kwargs)


def _ticks(n: int, wide: int = 10, narrow_: int = 4) -> int:
    """Every how many categories a tick label goes, for at most `wide` (`narrow_` on a phone) labels."""
    most = narrow_ if _is_narrow() else wide
    return max(1, -(-n // most))


def _svg(fig: Figure, ctx: AbstractContextManager[Any], title: str) -> str:
    """The figure as SVG, laid out and drawn once: `savefig` draws it a second time first, with output off, only
    to run the layout engine, which the SVG canvas's own draw runs anyway (the same bytes, a third less time)."""
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    buf = io.StringIO()
    try:
        FigureCanvasSVG(fig).print_svg(buf, metadata={"Date": None, "Creator": None, "Title": title})
    finally:
        ctx.__exit__(None, None, None)
    return buf.getvalue()


def warm() -> None:
    """Import what drawing needs (about half a second: a worker does it while the analysis runs)."""
    import matplotlib

    matplotlib.use("svg")
    import matplotlib.backends.backend_svg
    import matplotlib.figure


def inline(svg: str, label: str, prefix: str = "c", css_class: str = "") -> str:
    """The SVG without its XML prolog, sized by CSS, labelled for screen readers, its ids prefixed (several
    charts share one HTML document, and matplotlib numbers ids per figure): ready to paste into HTML."""
    from markupsafe import escape

    body = svg[svg.index("<svg") :]
    body = re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r"<svg\1", body, count=1)

    def tag(m: re.Match[str]) -> str:
        """Ids and references are rewritten in tags only: a label's text (`bob id="x"`, quotes are not escaped
        in text) is data and stays as it is. A text node holds no `<` (the writer escapes it), so every
        `<...>` is a tag."""
        t = m.group(0)
        if 'id="' not in t and "url(#" not in t and 'href="#' not in t:  # most of a report's 17k tags
            return t
        t = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', t)
        t = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", t)
        return re.sub(r'\b((?:xlink:)?href)="#([^"]+)"', rf'\1="#{prefix}-\2"', t)

    body = re.sub(r"<[^>]*>", tag, body)
    cls = f' class="{escape(css_class)}"' if css_class else ""
    return body.replace("<svg", f'<svg{cls} role="img" aria-label="{escape(label)}"', 1)


def _pct_axis(axis: Axis, decimals: int = 0) -> None:
    from matplotlib.ticker import PercentFormatter

    axis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=decimals))


def _nice_ticks(lo: float, hi: float, most: int = 4) -> tuple[list[float], int]:
    """At most `most` + 1 ticks on [lo, hi] (fractions) at a step of 1, 2 or 5 × 10^k, and the decimals that
    show each as a percentage exactly (matplotlib's default for a short colour bar stepped 2.5 % and rounded
    the labels to whole percents: 30/32/35/38 %)."""
    import math

    from matplotlib.ticker import MaxNLocator

    ticks = [float(t) for t in MaxNLocator(nbins=most, steps=[1, 2, 5, 10]).tick_values(lo, hi)]
    span = (hi - lo) * 1e-9
    inside = [t for t in ticks if lo - span <= t <= hi + span] or [lo, hi]
    step_pct = (inside[1] - inside[0]) * 100 if len(inside) > 1 else 1.0
    return inside, max(0, math.ceil(-math.log10(step_pct) - 1e-9))


def _short(label: str, limit: int = 28) -> str:
    """A category label cut to `limit` characters; on a phone's chart wrapped onto two lines of 18."""
    from gpuaudit.util.textsafe import printable

    label = printable(label)  # a name with control characters: shown escaped, not as missing glyphs
    if _is_narrow():
        return _wrap2(label, 18)
    return label if len(label) <= limit else label[: limit - 1] + "…"


# One visible escape (printable's `\x1b`, `\u202e`, `\U0001f600`) or one other character: the units a label is
# wrapped in, so that no line break splits an escape into what reads as another name.
_UNIT = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})|.", re.S)


def _wrap2(label: str, width: int) -> str:
    """`label` on at most two lines of about `width` characters: broken at a space where one is near, else
    anywhere between two units (an escape is one unit), the rest cut with "…"."""
    units = _UNIT.findall(label)
    lines: list[str] = []
    while units and len(lines) < 2:
        size, cut = 0, 0
        for i, u in enumerate(units):
            if size + len(u) > width and i > 0:
                break
            size += len(u)
            cut = i + 1
        spaces = [i for i in range(cut) if units[i] == " "] if cut < len(units) else []
        if spaces and spaces[-1] > 0:
            cut = spaces[-1] + 1  # break after the last space that fits
        lines.append("".join(units[:cut]).strip())
        units = units[cut:]
    if units:  # more than two lines' worth
        last = _UNIT.findall(lines[-1])
        while last and sum(map(len, last)) > width - 1:
            last.pop()
        lines[-1] = "".join(last) + "…"
    return "\n".join(lines) or ""


def utilization_bars(
    runtime_util: float,
    real_util: float,
    busy_util: float | None = None,
    allocated_util: float | None = None,
    title: str = "",
) -> str:
    """Believed (runtime-hour) vs real (SM-active) utilization as horizontal bars, the phantom gap (believed −
    real) shaded; with scheduler allocations, the allocated share on top as what is believed and runtime hours as
    held. `title` is the headline's phantom gap (analysis.headline), one name and one value in every output;
    without it the title computes believed − real from the bars."""
    fig, ctx = _figure(2.0 if allocated_util is None else 2.3, "utilization", 2.8 if allocated_util is None else 3.3)
    ax = fig.add_subplot()
    rows = [("Runtime hours (believed)", runtime_util, BELIEVED)]
    if allocated_util is not None:
        rows = [("Allocated (believed)", allocated_util, "#7b8794"), ("Runtime hours (held)", runtime_util, BELIEVED)]
    if busy_util is not None:
        rows.append(("Kernel busy (duty cycle)", busy_util, "#6b8fb8"))
    rows.append(("SM active (real)", real_util, REAL))
    rows.reverse()
    for i, (_name, value, color) in enumerate(rows):
        ax.barh(i, value, color=color, height=0.6)
        ax.text(value + 0.01, i, f"{value * 100:.1f} %", va="center", color=_INK, fontweight="bold")
    ax.set_yticks(range(len(rows)), [_short(r[0]) for r in rows])
    believed = runtime_util if allocated_util is None else allocated_util
    if believed > real_util:  # the band is the gap the title names: believed − real
        ax.axvspan(real_util, believed, color=_WASTE, alpha=0.08, lw=0)
    ax.set_xlim(0, 1.0)
    _pct_axis(ax.xaxis)
    ax.grid(axis="x", color=_GRID, lw=0.6)
    ax.set_axisbelow(True)
    _title(ax, title or f"Phantom gap: believed − real = {(believed - real_util) * 100:.1f} pp")
    return _svg(fig, ctx, "Believed vs real utilization")


_LEDGER_COLORS = {"productive": REAL, "held_idle": _WASTE, "allocated_no_process": "#f59e0b", "unallocated": "#cbd2d9"}
LEDGER_LABELS = {
    "productive": "productive (SM active)",
    "held_idle": "held, SMs idle",
    "allocated_no_process": "allocated, no process",
    "unallocated": "unallocated",
}


def _ledger_weekly(weeks: Sequence[str], states: Mapping[str, Sequence[float]]) -> str:
    """The four-state ledger per week as stacked bars (GPU-hours): productive at the bottom."""
    fig, ctx = _figure(2.6, "ledger", 3.9)
    ax = fig.add_subplot()
    xs = list(range(len(weeks)))
    bottom = [0.0] * len(weeks)
    for key in ("productive", "held_idle", "allocated_no_process", "unallocated"):
        values = [float(v) for v in states.get(key, [0.0] * len(weeks))]
        ax.bar(xs, values, bottom=bottom, color=_LEDGER_COLORS[key], width=0.75, label=LEDGER_LABELS[key])
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    step = _ticks(len(weeks), narrow_=3)
    ax.set_xticks(xs[::step], [str(w) for w in weeks][::step])
    ax.set_xlabel("week starting (UTC)")
    ax.set_ylabel("GPU-hours")
    ax.yaxis.set_major_formatter(_thousands_formatter())
    ax.grid(axis="y", color=_GRID, lw=0.6)
    ax.set_axisbelow(True)
    _legend(ax, ncols=4, frameon=False, loc="upper left", fontsize=8, bbox_to_anchor=(0, -0.28))
    _title(ax, "Where every observed GPU-hour went, per week")
    return _svg(fig, ctx, "Ledger per week")


def top_bars(labels: Sequence[str], values: Sequence[float], title: str, unit: str, color: str = _WASTE) -> str:
    """A ranked horizontal bar chart (largest on top), e.g. idle-held GPU-hours by user."""
    n = max(len(labels), 1)
    fig, ctx = _figure(0.9 + 0.28 * n, "top-" + title, 1.2 + 0.4 * n)
    ax = fig.add_subplot()
    ys = list(range(len(labels)))[::-1]
    ax.barh(ys, list(values), color=color, height=0.65)
    ax.set_yticks(ys, [_short(str(label)) for label in labels])
    top = max(values, default=0) or 1
    for y, v in zip(ys, values, strict=True):
        ax.text(v + top * 0.01, y, f"{v:,.0f}", va="center", color=_INK, fontsize=8)
    ax.set_xlim(0, top * (1.3 if _is_narrow() else 1.15))
    ax.set_xlabel(unit)
    ax.grid(axis="x", color=_GRID, lw=0.6)
    ax.set_axisbelow(True)
    _title(ax, title)
    return _svg(fig, ctx, title)


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def hour_of_week_heatmap(matrix: Sequence[Sequence[float | None]], title: str) -> str:
    """7 × 24 grid (Monday first, hours in UTC) of a 0-1 fraction; missing cells stay blank."""
    import numpy as np

    data = np.array([[np.nan if v is None else float(v) for v in row] for row in matrix], dtype=float)
    fig, ctx = _figure(2.6, "heatmap", 2.9)
    ax = fig.add_subplot()
    # pcolormesh, not imshow: vector cells (crisp in print, no embedded bitmap).
    # The colour scale spans the data (on a fixed 0-100 % scale a fleet at 5-15 % is one pale shade); the
    # colour bar's ticks say what the shades mean.
    finite = data[np.isfinite(data)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if hi - lo < 1e-6:
        lo, hi = max(0.0, lo - 0.01), hi + 0.01
    im = ax.pcolormesh(np.ma.masked_invalid(data), cmap="Blues", vmin=lo, vmax=hi, edgecolors="white", linewidth=0.3)
    ax.invert_yaxis()
    ax.set_yticks([d + 0.5 for d in range(7)], _DAYS)
    every = 6 if _is_narrow() else 3
    ax.set_xticks([h + 0.5 for h in range(0, 24, every)], [f"{h:02d}:00" for h in range(0, 24, every)])
    ax.set_xlabel("hour of day (UTC)")
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)
    bar = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.01)
    if bar.solids is not None:  # drawn once the colorbar has a mappable (always, here)
        bar.solids.set_rasterized(False)
        bar.solids.set_edgecolor("face")
    ticks, decimals = _nice_ticks(lo, hi)
    bar.set_ticks(ticks)
    _pct_axis(bar.ax.yaxis, decimals)
    bar.outline.set_visible(False)
    _title(ax, title)
    return _svg(fig, ctx, title)


def weekly_trend(weeks: Sequence[str], runtime: Sequence[float], real: Sequence[float]) -> str:
    """Runtime-hour and real utilization per week, as two lines."""
    fig, ctx = _figure(2.4, "weekly", 2.9)
    ax = fig.add_subplot()
    xs = list(range(len(weeks)))
    ax.plot(xs, list(runtime), color=BELIEVED, lw=2, marker="o", ms=3, label="runtime hours (held)")
    ax.plot(xs, list(real), color=REAL, lw=2, marker="o", ms=3, label="SM active (real)")
    ax.fill_between(xs, list(real), list(runtime), color=_WASTE, alpha=0.08, lw=0)
    labels = [str(w) for w in weeks]
    iso = all(len(w) == 8 and w[4:6] == "-W" for w in labels)
    if iso:  # ISO weeks: "W07" is enough on an axis
        labels = [w[5:] for w in labels]
    # A date ("2026-08-31") is ~3x as wide as "W07": a phone's chart holds three side by side, the wide one seven.
    step = _ticks(len(weeks), narrow_=6) if iso else _ticks(len(weeks), wide=7, narrow_=3)
    ax.set_xticks(xs[::step], labels[::step])
    ax.set_xlabel("ISO week" if labels and labels[0].startswith("W") else "week")
    ax.set_ylim(0, 1)
    _pct_axis(ax.yaxis)
    ax.grid(axis="y", color=_GRID, lw=0.6)
    _legend(ax, ncols=2, frameon=False, loc="upper left")
    _title(ax, "Weekly trend")
    return _svg(fig, ctx, "Weekly trend")


DURATION_POINTS = 400  # a duration curve drawn at more x values than this is resampled (the plot is ~500 pt wide)


def _mark(ax: Any, x: float, height: float, text: str, color: str, *, lw: float, ls: str = "-",
          bold: bool = False) -> None:
    """A vertical line at data x, labelled at `height` of the axes (0-1, whatever the y range)."""
    ax.axvline(x, color=color, lw=lw, ls=ls)
    ax.text(x, height, text, transform=ax.get_xaxis_transform(), va="top", color=color,
            fontweight="bold" if bold else "normal")


def _thin_survival(gpus: Sequence[float], share: Sequence[float]) -> tuple[list[float], list[float]]:
    """The curve at no more than DURATION_POINTS levels: on an even grid of x, each point the share at the first
    level at or above it (the pre-step's value there), the first and last levels kept. A fleet's hourly demand has
    thousands of distinct levels: drawn twice (the wide and the phone chart) they made the HTML report 77 % larger
    for detail no screen shows."""
    import numpy as np

    x, y = np.asarray(gpus, dtype=float), np.asarray(share, dtype=float)
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    if x.size <= DURATION_POINTS:
        return list(map(float, x)), list(map(float, y))
    grid = np.unique(np.concatenate([np.linspace(x[0], x[-1], DURATION_POINTS), [x[0], x[-1]]]))
    idx = np.minimum(np.searchsorted(x, grid - 1e-9, side="left"), x.size - 1)
    return list(map(float, grid)), list(map(float, y[idx]))


def demand_duration(
    gpus: Sequence[float],
    share_of_time: Sequence[float],
    n_owned: float | None,
    fleet: float | None,
    xlabel: str = "GPUs in demand",
) -> str:
    """Demand as a duration curve: for each GPU count, the share of time demand was at least that high.
    The hybrid's owned count (its best N >= 1, not N*, the best N >= 0) and the fleet size are marked."""
    from matplotlib.ticker import MaxNLocator

    fig, ctx = _figure(2.6, "demand", 3.0)
    ax = fig.add_subplot()
    # Share of time demand >= x, known at each level x[i]: for x in (x[i-1], x[i]] demand >= x means demand
    # >= x[i], so the curve takes the right-hand value ("pre"); a post-step showed x[i-1]'s larger share.
    xs, ys = _thin_survival(gpus, share_of_time)
    ax.step(xs, ys, where="pre", color=REAL, lw=2)
    ax.fill_between(xs, ys, step="pre", color=REAL, alpha=0.12, lw=0)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5 if _is_narrow() else 10, integer=True))  # GPUs are counts
    if n_owned is not None:
        ax.axvline(n_owned, color=_ONPREM, lw=1.5, ls="--")
        # Near the right edge the words go to the line's left, or they run past the chart.
        right = n_owned > 0.6 * max([*gpus, fleet or 0.0, 1.0])
        words = f"hybrid owns N = {n_owned:,.0f}"
        ax.text(
            n_owned,
            1.02,
            f"{words} " if right else f" {words}",
            color=_ONPREM,
            va="bottom",
            ha="right" if right else "left",
            fontweight="bold",
        )
    if fleet is not None:
        ax.axvline(fleet, color=BELIEVED, lw=1, ls=":")
        ax.text(fleet, 0.5, f" fleet {fleet:,.0f}", color=_INK, rotation=90, va="center", fontsize=8)
    ax.set_ylim(0, 1.1)
    ax.set_xlim(left=0)
    _pct_axis(ax.yaxis)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("share of time ≥ x")
    ax.grid(color=_GRID, lw=0.6)
    _title(ax, "Demand: how often the fleet needed at least x GPUs")
    return _svg(fig, ctx, "Demand duration curve")


def break_even_curve(
    utilization: Sequence[float],
    cloud_cost: Sequence[float],
    onprem_cost: Sequence[float],
    today_util: float,
    break_even_util: float | None,
    unit: str,
    x_label: str = "billed-hour utilization",
) -> str:
    """Cost of each option against utilization (the basis the cloud bills), the crossing and today's point."""
    fig, ctx = _figure(2.8, "breakeven", 3.2)
    ax = fig.add_subplot()
    ax.plot(list(utilization), list(cloud_cost), color=CLOUD, lw=2, label="cloud")
    ax.plot(list(utilization), list(onprem_cost), color=_ONPREM, lw=2, label="on-prem")
    if break_even_util is not None:
        _mark(ax, break_even_util, 0.98, f" break-even {break_even_util * 100:.0f} %", _INK, lw=1, ls="--")
    _mark(ax, today_util, 0.85, f" today {today_util * 100:.1f} %", _TODAY, lw=2, bold=True)
    ax.set_xlim(0, 1)
    _pct_axis(ax.xaxis)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(_money_formatter())
    ax.set_xlabel(x_label)
    ax.set_ylabel(unit)
    ax.grid(color=_GRID, lw=0.6)
    _legend(ax, ncols=1, narrow_cols=2, frameon=False, loc="lower right")
    _title(ax, f"Break-even: cost against {x_label}")
    return _svg(fig, ctx, "Break-even curve")


def _cost_curve(owned: Sequence[float], total: Sequence[float], n_star: float | None, unit: str) -> str:
    """Hybrid total cost for each owned GPU count, the minimum N* marked."""
    from matplotlib.ticker import MaxNLocator

    fig, ctx = _figure(2.4, "hybrid-curve", 2.9)
    ax = fig.add_subplot()
    ax.plot(list(owned), list(total), color=REAL, lw=2)
    if n_star is not None:
        _mark(ax, n_star, 0.98, f" N* = {n_star:,.0f}", _ONPREM, lw=1.5, ls="--", bold=True)
    ax.set_xlim(left=0)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5 if _is_narrow() else 10, integer=True))  # GPUs are counts
    ax.yaxis.set_major_formatter(_money_formatter())
    ax.set_xlabel("GPUs owned (N)")
    ax.set_ylabel(unit)
    ax.grid(color=_GRID, lw=0.6)
    _title(ax, "Hybrid: total cost by number of GPUs owned")
    return _svg(fig, ctx, "Hybrid cost curve")


def _cost_scenarios(names: Sequence[str], totals: Sequence[float], highlight: int | None, unit: str) -> str:
    """Total cost of each scenario over the horizon; the recommended one highlighted."""
    n = max(len(names), 1)
    fig, ctx = _figure(0.9 + 0.32 * n, "costs", 1.2 + 0.42 * n)
    ax = fig.add_subplot()
    ys = list(range(len(names)))[::-1]
    colors = [REAL if i == highlight else BELIEVED for i in range(len(names))]
    ax.barh(ys, list(totals), color=colors, height=0.65)
    ax.set_yticks(ys, [_short(str(n), 34) for n in names])
    top = max(totals, default=0) or 1
    for y, v in zip(ys, totals, strict=True):
        ax.text(v + top * 0.01, y, _money(v), va="center", color=_INK, fontsize=8)
    ax.set_xlim(0, top * (1.45 if _is_narrow() else 1.2))
    ax.xaxis.set_major_formatter(_money_formatter())
    if _is_narrow():
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(3))
    ax.set_xlabel(unit)
    ax.grid(axis="x", color=_GRID, lw=0.6)
    ax.set_axisbelow(True)
    _title(ax, "Total cost per scenario")
    return _svg(fig, ctx, "Cost per scenario")


def tornado(
    labels: Sequence[str],
    low: Sequence[float],
    high: Sequence[float],
    base: float,
    unit: str,
    title: str,
    legend: Sequence[str],
) -> str:
    """Sensitivity: each bar spans the outcome with that input at its low and its high value."""
    n = max(len(labels), 1)
    fig, ctx = _figure(0.9 + 0.3 * n, "tornado", 1.6 + 0.42 * n)
    ax = fig.add_subplot()
    order = sorted(range(len(labels)), key=lambda i: abs(high[i] - low[i]))
    ys = list(range(len(order)))
    for y, i in zip(ys, order, strict=True):
        lo, hi = low[i], high[i]
        ax.barh(y, lo - base, left=base, color=_ONPREM, height=0.6)
        ax.barh(y, hi - base, left=base, color=CLOUD, height=0.6)
    ax.axvline(base, color=_INK, lw=1)
    lo_x, hi_x = min([base, *low, *high]), max([base, *low, *high])
    if lo_x <= 0 <= hi_x:  # where the two options cost the same
        ax.axvline(0, color=_TODAY, lw=1, ls="--")
        # In a lane of its own below the lowest bar: over the axes it sat on the title, beside a bar on the bar.
        ax.set_ylim(-1.2, len(order) - 0.5)
        right = 0 - lo_x > (hi_x - lo_x) / 2  # the line is in the right half: the words go to its left
        ax.text(
            0,
            -0.85,
            "equal cost " if right else " equal cost",
            color=_TODAY,
            va="center",
            ha="right" if right else "left",
            fontsize=8,
        )
    ax.set_yticks(ys, [_short(str(labels[i]), 34) for i in order])
    ax.xaxis.set_major_formatter(_money_formatter() if ("$" in unit or "USD" in unit) else _plain_formatter())
    if _is_narrow():
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(3))
    # On a phone's chart the label is centred under axes ~2.2 in wide (the bar labels take the rest): 30
    # characters of 9 pt fit; 44 ran past the figure's right edge.
    ax.set_xlabel(textwrap.fill(unit, 30) if _is_narrow() else unit)
    ax.grid(axis="x", color=_GRID, lw=0.6)
    ax.set_axisbelow(True)
    from matplotlib.patches import Patch

    _legend(
        ax,
        ncols=1,
        narrow_cols=2,
        handles=[Patch(color=_ONPREM, label=legend[0]), Patch(color=CLOUD, label=legend[1])],
        frameon=False,
        loc="lower right",
        fontsize=8,
    )
    _title(ax, title)
    return _svg(fig, ctx, title)


def _money(v: float) -> str:
    a = abs(v)
    sign = "−" if v < 0 else ""
    if a >= 1e6:
        return f"{sign}${a / 1e6:,.2f}M"
    if a >= 1e3:
        return f"{sign}${a / 1e3:,.0f}k"
    return f"{sign}${a:,.0f}"


def _money_formatter() -> FuncFormatter:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: _money(v))


def _plain_formatter() -> FuncFormatter:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: f"{v:,.3g}")


def _thousands_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: f"{v:,.0f}")


# -- specs ---------------------------------------------------------------------------------------------------------


def draw(spec: ChartSpec, *, narrow: bool = False) -> str:
    """The chart `spec` as one standalone SVG document, drawn for a phone's width when `narrow`."""
    token = _NARROW.set(narrow)
    try:
        return _DRAW[spec.kind](spec)
    finally:
        _NARROW.reset(token)


def _series(spec: ChartSpec, key: str) -> list[float]:
    """The series `key` as floats (a missing value counts 0), empty if the spec has no such series."""
    return [0.0 if v is None else float(v) for v in spec.values(key) or ()]


def _one(spec: ChartSpec, key: str) -> float | None:
    values = spec.values(key)
    return None if not values or values[0] is None else float(values[0])


def _need(value: float | None, spec: ChartSpec, what: str) -> float:
    if value is None:
        raise ValueError(f"a {spec.kind} chart needs {what}")
    return value


def _draw_tornado(s: ChartSpec) -> str:
    base = _need(s.threshold("base"), s, "a base threshold")
    return tornado(
        s.labels,
        _series(s, "low"),
        _series(s, "high"),
        base,
        s.unit,
        s.title,
        tuple(x.label for x in s.series if x.key in ("low", "high")),
    )


_DRAW: dict[ChartKind, Callable[[ChartSpec], str]] = {
    "utilization": lambda s: utilization_bars(
        _need(_one(s, "runtime"), s, "a runtime series"),
        _need(_one(s, "real"), s, "a real series"),
        _one(s, "busy"),
        _one(s, "allocated"),
        s.title,
    ),
    "ledger": lambda s: _ledger_weekly(s.labels, {x.key: _series(s, x.key) for x in s.series}),
    "ranked-bars": lambda s: top_bars(s.labels, _series(s, "value"), s.title, s.unit),
    "heatmap": lambda s: hour_of_week_heatmap([x.values for x in s.series], s.title),
    "trend": lambda s: weekly_trend(s.labels, _series(s, "runtime"), _series(s, "real")),
    "duration": lambda s: demand_duration(
        s.x, _series(s, "share"), s.threshold("owned"), s.threshold("fleet"), s.x_label
    ),
    "break-even": lambda s: break_even_curve(
        s.x,
        _series(s, "cloud"),
        _series(s, "on-prem"),
        _need(s.threshold("today"), s, "a today threshold"),
        s.threshold("break-even"),
        s.unit,
        s.x_label,
    ),
    "cost-curve": lambda s: _cost_curve(s.x, _series(s, "total"), s.threshold("n-star"), s.unit),
    "scenarios": lambda s: _cost_scenarios(s.labels, _series(s, "total"), s.highlight, s.unit),
    "tornado": _draw_tornado,
}
