"""The analysis → report contract: the tables' column names are declared once (gpuaudit.analysis.result),
the analyzer writes exactly those, the report reads them by name, and a renamed column fails loudly (never a
silently dropped chart, never a break-even curve the report recomputes itself).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from tests.report_helpers import write_fixed_dataset

from gpuaudit.analysis import columns as C
from gpuaudit.analysis import result as R
from gpuaudit.analysis.config import load_config
from gpuaudit.analysis.figure import ResultContractError, Table
from gpuaudit.analysis.pipeline import analyze
from gpuaudit.report.sections import build_report

WRS = ["observed_gpu_hours", "runtime_gpu_hours", "real_gpu_hours", "runtime_utilization", "real_utilization",
       "efficiency_while_held", "idle_held_gpu_hours"]
HOLDER = ["runtime_gpu_hours", "real_gpu_hours", "efficiency_while_held", "idle_held_gpu_hours", "gpus",
          "first_hour", "last_hour"]

# The documented JSON keys of every table's rows (docs/analyzer.md, "Table columns"), written out here
# independently of the constants: renaming a constant changes the JSON and fails this list.
DOCUMENTED: dict[str, list[str]] = {
    "breakdowns.per_node": ["host", "gpus", *WRS],
    "breakdowns.per_gpu": ["host", "gpu", "gpu_name", "gpu_fraction", *WRS, "max_mem_used_bytes",
                           "mem_total_bytes", "average_power_w", "upper_bound", "never_used"],
    "breakdowns.per_user": ["user", *HOLDER],
    "breakdowns.per_job": ["job", *HOLDER],
    "breakdowns.per_pod": ["pod", *HOLDER],
    "breakdowns.hour_of_week": ["day_of_week", "hour_of_day", *WRS],
    "breakdowns.per_week": ["week", "gpus", *WRS],
    "breakdowns.demand": ["hour", "gpus_held", "peak_gpus_held", "gpus_in_use", "peak_gpus_in_use",
                          "gpus_reporting"],
    "breakdowns.demand_duration": ["gpus_held", "share_of_hours"],
    "data_quality.gpus": ["host", "gpu", "observed_hours", "coverage", "gap_hours", "first_sample", "last_sample",
                          "stopped_reporting"],
    "hybrid.curve": ["n", "owned_usd", "cloud_usd", "total_usd", "cloud_gpu_hours"],
    "break_even.curve": ["billed_utilization", "cloud_usd_per_gpu_year", "owned_usd_per_gpu_year"],
    "sensitivity.tornado": ["parameter", "key", "base_value", "low_value", "high_value", "base_diff_usd",
                            "low_diff_usd", "high_diff_usd", "plan", "base_plan_usd", "low_plan_usd",
                            "high_plan_usd", "base_margin_usd", "low_margin_usd", "high_margin_usd",  # issue 17
                            "swing_usd", "cheapest_low", "cheapest_high",
                            "break_even_low", "break_even_high", "changes_cheapest", "limit"],
    "sensitivity.growth": ["growth_per_year", "demand_factor", "stay_as_is_usd", "all_cloud_usd", "all_on_prem_usd",
                           "hybrid_usd", "cheapest", "hybrid_gpus"],
}

CONSTANTS: dict[str, type[C.ColumnNames]] = {
    "breakdowns.per_node": C.PerNodeColumns, "breakdowns.per_gpu": C.PerGpuColumns,
    "breakdowns.per_user": C.PerUserColumns, "breakdowns.per_job": C.PerJobColumns,
    "breakdowns.per_pod": C.PerPodColumns, "breakdowns.hour_of_week": C.HourOfWeekColumns,
    "breakdowns.per_week": C.PerWeekColumns, "breakdowns.demand": C.DemandColumns,
    "breakdowns.demand_duration": C.DemandDurationColumns,
    "data_quality.gpus": C.GpuCoverageColumns, "hybrid.curve": C.HybridCurveColumns,
    "break_even.curve": C.BreakEvenCurveColumns, "sensitivity.tornado": C.TornadoColumns,
    "sensitivity.growth": C.GrowthColumns,
}


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> R.AnalysisResult:
    root = tmp_path_factory.mktemp("contract") / "data"
    write_fixed_dataset(root)
    return analyze(root, load_config())


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _replace(obj: Any, path: str, change: Callable[[Any], Any]) -> Any:
    """`obj` with the field at the dotted `path` replaced by change(old value) (frozen dataclasses)."""
    head, _, rest = path.partition(".")
    old = getattr(obj, head)
    return dataclasses.replace(obj, **{head: _replace(old, rest, change) if rest else change(old)})


def _renamed(table: Table, old: str, new: str) -> Table:
    """The table as an analyzer that renamed one column would write it (columns and row keys)."""
    cols = tuple(dataclasses.replace(c, name=new) if c.name == old else c for c in table.columns)
    rows = tuple({(new if k == old else k): v for k, v in row.items()} for row in table.rows)
    return dataclasses.replace(table, columns=cols, rows=rows)


def test_every_table_has_the_documented_columns(result: R.AnalysisResult) -> None:
    for path, expected in DOCUMENTED.items():
        table = _get(result, path)
        assert table.column_names() == expected, path
        assert table.rows, f"{path}: the fixed dataset should fill every table"
        assert all(list(row) == expected for row in table.rows), path  # every row has exactly those keys
    json_rows = result.to_dict()["breakdowns"]["demand"]["rows"]
    assert list(json_rows[0]) == DOCUMENTED["breakdowns.demand"]


def test_the_constants_name_exactly_the_columns_the_analyzer_writes(result: R.AnalysisResult) -> None:
    for path, names in CONSTANTS.items():
        written = _get(result, path).column_names()
        declared = list(names.names())
        if names is C.GrowthColumns:  # plus one column per scenario
            declared += [C.GrowthColumns.scenario_usd(s.id) for s in result.costs.scenarios if not s.what_if]
        assert sorted(written) == sorted(declared), path
    assert C.DemandColumns.GPUS_HELD == "gpus_held" and C.WrsColumns.REAL_UTILIZATION == "real_utilization"


def test_a_table_asked_for_a_column_it_lacks_raises(result: R.AnalysisResult) -> None:
    demand = result.breakdowns.demand
    assert demand.values(C.DemandColumns.GPUS_HELD) == [row["gpus_held"] for row in demand.rows]
    with pytest.raises(ResultContractError, match=r"'demand' has no column 'gpus_busy'.*gpus_held"):
        demand.values("gpus_busy")
    with pytest.raises(ResultContractError, match="no column 'x', 'y'"):
        demand.require("hour", "x", "y")


# One column per chart: renaming any of them in the analyzer's output must stop the report with the table and
# column named, not leave the chart out (the tables the report shows check their columns the same way, through
# Table.require, tested above; the per-node case stands for them).
READ_BY_THE_REPORT = [
    ("breakdowns.per_user", "idle_held_gpu_hours"),  # idle-held hours by user
    ("breakdowns.per_node", "host"),  # a table's column
    ("breakdowns.hour_of_week", "day_of_week"),  # heatmap
    ("breakdowns.per_week", "runtime_utilization"),  # weekly trend
    ("breakdowns.demand_duration", "gpus_held"),  # demand duration curve
    ("breakdowns.demand_duration", "share_of_hours"),
    ("break_even.curve", "cloud_usd_per_gpu_year"),  # break-even curve
    ("hybrid.curve", "total_usd"),  # hybrid cost curve
    ("sensitivity.tornado", "low_margin_usd"),  # tornado (the recommended plan's margin since issue 17)
]


@pytest.mark.parametrize(("path", "column"), READ_BY_THE_REPORT, ids=[f"{p}.{c}" for p, c in READ_BY_THE_REPORT])
def test_a_renamed_column_fails_the_report_loudly(result: R.AnalysisResult, path: str, column: str) -> None:
    broken = _replace(result, path, lambda t: _renamed(t, column, column + "_renamed"))
    with pytest.raises(ResultContractError, match=f"no column '{column}'"):
        build_report(broken, version="test")


def test_the_break_even_curve_is_the_analyzers_and_meets_owning_at_u_star(result: R.AnalysisResult) -> None:
    be, c = result.break_even, result.costs
    k = C.BreakEvenCurveColumns
    x = be.curve.values(k.BILLED_UTILIZATION)
    cloud = be.curve.values(k.CLOUD_USD_PER_GPU_YEAR)
    owned = be.curve.values(k.OWNED_USD_PER_GPU_YEAR)
    assert x[0] == 0.0 and x[-1] == 1.0 and len(x) == 51
    years = c.horizon_months / 12
    # Owning is flat: the reference's total spread over the fleet's GPU-years.
    assert owned == pytest.approx([be.own_usd / (c.fleet_gpus * years)] * len(x))
    # Renting is a straight line: its fixed part at 0 %, fixed + compute at the measured billed-hour utilization.
    per = c.fleet_gpus * years
    assert cloud[0] == pytest.approx(be.rent_fixed_usd / per)
    slope = (cloud[-1] - cloud[0]) / (x[-1] - x[0])
    assert cloud[0] + slope * be.measured_billed == pytest.approx((be.rent_fixed_usd + be.rent_variable_usd) / per)
    # ... and the two lines cross at the break-even u* the cost model found on its own.
    u_star = be.break_even_billed_utilization.value
    if be.never:  # renting is cheaper even at 100 %: no crossing, and no u* beside the "never"
        assert u_star is None and cloud[-1] < owned[-1]
        return
    assert u_star is not None and u_star > 0
    assert cloud[0] + slope * u_star == pytest.approx(owned[0], rel=1e-9)


def test_the_curve_is_empty_without_a_break_even_and_linear_with_one() -> None:
    from gpuaudit.analysis.breakeven import BreakEvenCalc, break_even_curve

    none = BreakEvenCalc(None, 0.0, "buy-the-fleet", 1e6, 2e6, "on-prem", 1e5, 0.0)
    assert break_even_curve(none, 8, 36).rows == ()
    assert break_even_curve(none, 8, 36).column_names() == DOCUMENTED["break_even.curve"]
    some = dataclasses.replace(none, held=0.5, measured_billed=0.25, rent_variable_usd=4e5)
    rows = break_even_curve(some, 8, 36).rows
    assert rows[25] == {"billed_utilization": 0.5, "cloud_usd_per_gpu_year": pytest.approx((1e5 + 4e5 * 2) / 24),
                        "owned_usd_per_gpu_year": pytest.approx(1e6 / 24)}


def test_the_phantom_figures_and_the_demand_curve_come_from_the_analysis(result: R.AnalysisResult) -> None:
    """The fixed fleet (tests/report_helpers.py) by hand: alice holds GPU 0 on weekday office hours (10 days ×
    9 h at SM 0.6), bob holds GPU 1 all 14 days (SM 0.3 for 2 h a day), carol holds GPU 2 ten hours a night
    (SM 0.9); GPU 3 is never used."""
    r_hours = 10 * 9 + 14 * 24 + 14 * 10
    s_hours = 10 * 9 * 0.6 + 14 * 2 * 0.3 + 14 * 10 * 0.9
    u, c = result.utilization, result.costs
    assert u.phantom_gpu_hours.value == pytest.approx(r_hours - s_hours)  # 566 − 188.4
    rate = c.cloud_flexible_usd_per_gpu_hour.value  # one cloud price per use, on its card (issue 17)
    assert rate is not None
    assert c.phantom_usd.value == pytest.approx((r_hours - s_hours) * rate)
    assert c.phantom_usd_per_year.value == pytest.approx((r_hours - s_hours) * rate * 8766 / (14 * 24))
    # Demand duration: bob's GPU is held every hour, alice's and carol's never overlap, so 2 GPUs are held
    # in the 90 + 140 hours either of them works.
    d = C.DemandDurationColumns
    curve = result.breakdowns.demand_duration
    assert list(zip(curve.values(d.GPUS_HELD), curve.values(d.SHARE_OF_HOURS), strict=True)) == [
        (0.0, 1.0), (1.0, 1.0), (2.0, pytest.approx((90 + 140) / (14 * 24)))]
