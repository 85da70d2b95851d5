"""The hour-of-week heatmap's colour scale spans the data's range, not a fixed 0-100 %, so a fleet at 5-15 %
real utilization is not drawn in one pale shade, every hour alike."""

from __future__ import annotations

import re

from gpuaudit.report import charts


def _texts(svg: str) -> list[str]:
    return [t.strip() for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)] + re.findall(r"<!-- (.*?) -->", svg)


def test_the_colour_scale_spans_the_data() -> None:
    grid = [[0.05 + 0.10 * h / 23 for h in range(24)] for _ in range(7)]
    svg = charts.hour_of_week_heatmap(grid, "Real utilization by hour of week")
    labels = set(_texts(svg))
    assert "100%" not in labels and "80%" not in labels  # the fixed 0-100 % bar is gone
    assert any(label in labels for label in ("6%", "8%", "10%", "12%", "14%"))  # ticks inside 5-15 %
    # the palest and the darkest cells differ: the first and last hour get distinct colours
    fills = re.findall(r"fill: ?(#[0-9a-f]{6})", svg)
    assert len(set(fills)) > 10


def test_a_flat_grid_still_draws() -> None:
    svg = charts.hour_of_week_heatmap([[0.3] * 24 for _ in range(7)], "flat")
    assert "<svg" in svg
