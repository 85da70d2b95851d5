"""Charts as data: the sections build chart specs (plain frozen data), the renderers draw them, each drawing laid
out and drawn once, and a chart pool draws them in worker processes beside the analysis with the same bytes."""

from __future__ import annotations

import pickle
from dataclasses import fields

import pytest
from tests.analysis_helpers import gpu_rows, rollups
from tests.report_helpers import count_figures

from gpuaudit.analysis import analyze_rollups
from gpuaudit.analysis.config import load_config
from gpuaudit.report import charts, render
from gpuaudit.report.chartpool import ChartPool
from gpuaudit.report.model import ChartSpec, Series, Threshold
from gpuaudit.report.sections import build_report


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    """8 GPUs for two days: 4 held at 60 % SM activity by a user, 4 never used."""
    busy = [r for g in range(4) for r in gpu_rows("n1", f"B-{g}", 48 * 12, interval_s=300, sm=0.6, procs=1)]
    idle = [r for g in range(4) for r in gpu_rows("n1", f"I-{g}", 48 * 12, interval_s=300, sm=0.0)]
    return build_report(analyze_rollups(rollups(busy + idle), load_config()), version="t")


def test_building_the_report_draws_nothing_rendering_draws_each_chart_at_two_widths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The model held rendered SVG and a closure: every chart was drawn while the sections were built."""
    busy = [r for g in range(4) for r in gpu_rows("n1", f"B-{g}", 48 * 12, interval_s=300, sm=0.6, procs=1)]
    made = count_figures(monkeypatch)
    rebuilt = build_report(analyze_rollups(rollups(busy), load_config()), version="t")
    assert made == [] and len(rebuilt.charts()) >= 5
    drawn = render.draw_charts(rebuilt)
    assert len(made) == 2 * len(rebuilt.charts())
    for chart in rebuilt.charts():
        assert drawn[chart.name].wide.startswith("<?xml") and drawn[chart.name].narrow.startswith("<?xml")
    html = render.render_html(rebuilt, drawn)
    assert html.count('<svg class="wide"') == html.count('<svg class="narrow"') == len(rebuilt.charts())


def test_a_chart_is_plain_data(report) -> None:  # type: ignore[no-untyped-def]
    """No field of a chart is a callable or a drawing: the model pickles, compares equal, and its kinds draw."""
    assert {c.spec.kind for c in report.charts()} >= {
        "utilization",
        "ranked-bars",
        "heatmap",
        "duration",
        "break-even",
        "cost-curve",
        "scenarios",
        "tornado",
    }
    for chart in report.charts():
        assert isinstance(chart.spec, ChartSpec)
        assert not any(callable(getattr(chart, f.name)) for f in fields(chart))
        assert "<svg" not in repr(chart)
    assert pickle.loads(pickle.dumps(report.charts())) == report.charts()


def test_each_drawing_is_laid_out_and_drawn_once(monkeypatch: pytest.MonkeyPatch, report) -> None:  # type: ignore[no-untyped-def]
    """`savefig` drew every figure twice (once with output off, only to run the layout engine)."""
    from matplotlib.figure import Figure

    draws: list[int] = []
    draw = Figure.draw

    def counted(self, renderer):  # type: ignore[no-untyped-def]
        draws.append(id(self))
        return draw(self, renderer)

    monkeypatch.setattr(Figure, "draw", counted)
    for chart in report.charts():
        for narrow in (False, True):
            draws.clear()
            charts.draw(chart.spec, narrow=narrow)
            assert len(draws) == 1, (chart.name, narrow, len(draws))


def test_the_pool_draws_the_same_bytes_in_its_workers(monkeypatch: pytest.MonkeyPatch, report) -> None:  # type: ignore[no-untyped-def]
    jobs = [(c.spec, n) for c in report.charts() for n in (False, True)]
    expected = [charts.draw(spec, narrow=n) for spec, n in jobs]
    made = count_figures(monkeypatch)
    with ChartPool(2) as pool:
        assert pool.started
        assert pool.draw(jobs) == expected
    assert made == []  # nothing was drawn in this process


def test_what_the_pool_does_not_deliver_is_drawn_here_and_errors_are_the_same(report) -> None:  # type: ignore[no-untyped-def]
    jobs = [(c.spec, n) for c in report.charts()[:2] for n in (False, True)]
    expected = [charts.draw(spec, narrow=n) for spec, n in jobs]
    pool = ChartPool(2)
    assert pool._proc is not None
    pool._proc.kill()  # the worker died before it was sent anything
    pool._proc.wait()
    assert pool.draw(jobs) == expected
    pool.close()
    broken = ChartSpec("utilization", series=(Series("real", (0.2,)),))  # no runtime series
    with pytest.raises(ValueError, match="needs a runtime series") as without:
        charts.draw(broken)
    with ChartPool(2) as pool, pytest.raises(ValueError, match="needs a runtime series") as pooled:
        pool.draw([jobs[0], (broken, False)])
    assert str(pooled.value) == str(without.value)


def test_an_unused_pool_leaves_no_process() -> None:
    pool = ChartPool(2)
    proc = pool._proc
    assert proc is not None
    pool.close()
    assert proc.poll() is not None
    with ChartPool(0) as none:  # no drawers: this process draws
        assert not none.started
        spec = ChartSpec("trend", labels=("2026-W01",), series=(Series("runtime", (0.5,)), Series("real", (0.2,))))
        assert none.draw([(spec, False)]) == [charts.draw(spec)]


def test_the_report_flow_draws_its_charts_in_the_pool(tmp_path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """`gpuaudit report` starts the chart worker before the analysis: matplotlib is imported and every chart is
    drawn there, and the files hold what this process would have drawn."""
    from tests.report_helpers import write_fixed_dataset

    from gpuaudit import flows
    from gpuaudit.report import chartpool

    write_fixed_dataset(tmp_path / "data", days=7)
    monkeypatch.setattr(chartpool, "default_drawers", lambda: 2)
    started = []
    pool_init = ChartPool.__init__

    def counted_init(self, drawers=None, **kwargs):  # type: ignore[no-untyped-def]
        started.append(drawers)
        pool_init(self, drawers, **kwargs)

    monkeypatch.setattr(ChartPool, "__init__", counted_init)
    made = count_figures(monkeypatch)
    written = flows.report_dataset(tmp_path / "data", tmp_path / "out", formats="html,md", quiet=True)
    assert started == [2] and made == []
    for chart in written.report.charts():
        assert (tmp_path / "out" / "charts" / f"{chart.name}.svg").read_text() == charts.draw(chart.spec)
    html = (tmp_path / "out" / "report.html").read_text()
    assert html.count('<svg class="narrow"') == len(written.report.charts())
    capsys.readouterr()


def _x_tick_labels(svg: str) -> list[str]:
    """The x axis's tick labels as drawn (SVG text, svg.fonttype none): `<g id="xtick_N">` ... `<text>`."""
    import re

    return [re.sub(r"<[^>]+>", "", m).strip()
            for m in re.findall(r'<g id="xtick_\d+">.*?<text[^>]*>(.*?)</text>', svg, flags=re.S)]


@pytest.mark.parametrize("narrow", [False, True])
def test_the_hybrid_cost_curve_counts_owned_gpus_in_whole_gpus(narrow: bool) -> None:
    """A phone's hybrid chart labelled its x axis 2.5, 7.5, 12.5 GPUs owned: GPUs are counts, ticks are whole."""
    owned = tuple(float(n) for n in range(16))
    total = tuple(1e5 - 900 * n + 60 * n * n for n in owned)
    spec = ChartSpec(kind="cost-curve", x=owned, unit="$", series=(Series(key="total", label="total", values=total),),
                     thresholds=(Threshold(key="n-star", label="N*", value=7.0),))
    labels = _x_tick_labels(charts.draw(spec, narrow=narrow))
    assert labels, "no x tick labels found in the SVG"
    assert all(lab.replace(",", "").replace("\u2212", "-").lstrip("-").isdigit() for lab in labels), labels
