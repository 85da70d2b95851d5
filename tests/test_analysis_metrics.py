"""Every utilization metric on tiny hand-computed datasets written through the real store (Parquet in
tmp_path, DuckDB, the analyzer's SQL)."""

from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
import sys

import pytest
from tests.analysis_helpers import T0, ends, gpu_rows, proc_rows, rollups, write

from gpuaudit import schema
from gpuaudit.analysis import analyze, analyze_rollups, load_config
from gpuaudit.errors import NoDataError

APPROX = {"rel": 1e-6, "abs": 1e-9}


def _rows(table, key):  # type: ignore[no-untyped-def]
    return {r[key]: r for r in table.rows}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):  # type: ignore[no-untyped-def]
    """Two hours at 60 s on four GPU rows (all values chosen to make the sums easy):
    GPU-a (n1): SM 0.5 / duty 0.9 for the first hour, 0 after; alice's process for the first 90 minutes.
    GPU-b (n1): never used.
    GPU-c (n2): source nvml (no SM activity), duty 0.4 all along, bob's job 42 all along.
    GPU-d (n2): MIG slice 1 (3/7 of a GPU), SM 1.0 all along, carol's pod ml/p1.
    """
    root = tmp_path_factory.mktemp("fleet")
    a = gpu_rows("n1", "GPU-a", 120, sm=lambda i: 0.5 if i < 60 else 0.0, duty=lambda i: 0.9 if i < 60 else 0.0,
                 procs=lambda i: 1 if i < 90 else 0, power_w=400.0)
    b = gpu_rows("n1", "GPU-b", 120, power_w=100.0)
    c = gpu_rows("n2", "GPU-c", 120, sm=None, duty=0.4, procs=1, source=schema.SOURCE_NVML, power_w=None)
    d = gpu_rows("n2", "GPU-d", 120, sm=1.0, procs=1, mig_instance=1, gpu_fraction=3 / 7, power_w=None)
    procs = (proc_rows("n1", "GPU-a", ends(a, lambda i: i < 90), user="alice")
             + proc_rows("n2", "GPU-c", ends(c), user="bob", job_id="42")
             + proc_rows("n2", "GPU-d", ends(d), user="carol", pod="p1", mig_instance=1))
    write(root, a + b + c + d, procs)
    return analyze(root, load_config())


F = 3 / 7
W = 2 + 2 + 2 + 2 * F
R = 1.5 + 2 + 2 * F
B = 0.9 + 0.8 + 2 * F
S = 0.5 + 0.8 + 2 * F


def test_gpu_hours_w_r_b_s(fleet) -> None:  # type: ignore[no-untyped-def]
    u = fleet.utilization
    assert u.observed_gpu_hours.value == pytest.approx(W, **APPROX)
    assert u.runtime_gpu_hours.value == pytest.approx(R, **APPROX)
    assert u.busy_gpu_hours.value == pytest.approx(B, **APPROX)
    assert u.real_gpu_hours.value == pytest.approx(S, **APPROX)


def test_ratios_and_phantom_gap(fleet) -> None:  # type: ignore[no-untyped-def]
    u = fleet.utilization
    assert u.runtime_utilization.value == pytest.approx(R / W, **APPROX)
    assert u.real_utilization.value == pytest.approx(S / W, **APPROX)
    assert u.efficiency_while_held.value == pytest.approx(S / R, **APPROX)
    assert u.phantom_gap.value == pytest.approx(R / W - S / W, **APPROX)
    assert u.real_utilization.formula == "S / W"


def test_duty_cycle_fallback_is_flagged_upper_bound(fleet) -> None:  # type: ignore[no-untyped-def]
    u = fleet.utilization
    assert u.real_is_upper_bound and u.real_utilization.upper_bound
    assert u.upper_bound_share.value == pytest.approx(2 / W, **APPROX)  # GPU-c's two hours
    per_gpu = _rows(fleet.breakdowns.per_gpu, "gpu")
    assert per_gpu["GPU-c"]["upper_bound"] is True and per_gpu["GPU-a"]["upper_bound"] is False
    assert any("upper bound" in w for w in fleet.warnings)


def test_idle_held_and_never_used(fleet) -> None:  # type: ignore[no-untyped-def]
    u = fleet.utilization
    assert u.idle_held_gpu_hours.value == pytest.approx(0.5, **APPROX)  # GPU-a minutes 60-89
    assert u.never_used_gpus == ("GPU-b",)
    assert u.never_used_count.value == 1


def test_mig_slice_weighted_by_gpu_fraction(fleet) -> None:  # type: ignore[no-untyped-def]
    d = _rows(fleet.breakdowns.per_gpu, "gpu")["GPU-d/mig1"]
    assert d["gpu_fraction"] == pytest.approx(F, rel=1e-6)
    assert d["observed_gpu_hours"] == pytest.approx(2 * F, rel=1e-6)
    assert d["real_utilization"] == pytest.approx(1.0, rel=1e-6)
    assert fleet.trial.gpus == 4 and fleet.trial.gpu_equivalents == pytest.approx(3 + F, rel=1e-6)
    # The partitioned GPU is still one physical GPU owned today.
    stay = next(s for s in fleet.costs.scenarios if s.id == "stay-as-is")
    assert stay.owned_gpus == 4


def test_per_node_and_per_gpu(fleet) -> None:  # type: ignore[no-untyped-def]
    nodes = _rows(fleet.breakdowns.per_node, "host")
    assert nodes["n1"]["observed_gpu_hours"] == pytest.approx(4.0, **APPROX)
    assert nodes["n1"]["real_utilization"] == pytest.approx(0.5 / 4, **APPROX)
    assert nodes["n2"]["runtime_utilization"] == pytest.approx(1.0, **APPROX)
    a = _rows(fleet.breakdowns.per_gpu, "gpu")["GPU-a"]
    assert a["runtime_gpu_hours"] == pytest.approx(1.5, **APPROX)
    assert a["efficiency_while_held"] == pytest.approx(0.5 / 1.5, **APPROX)
    assert a["average_power_w"] == pytest.approx(400.0, **APPROX)
    assert a["max_mem_used_bytes"] == 1_000_000


def test_per_user_job_pod(fleet) -> None:  # type: ignore[no-untyped-def]
    users = _rows(fleet.breakdowns.per_user, "user")
    assert set(users) == {"alice", "bob", "carol"}
    assert users["alice"]["runtime_gpu_hours"] == pytest.approx(1.5, **APPROX)
    assert users["alice"]["real_gpu_hours"] == pytest.approx(0.5, **APPROX)
    assert users["alice"]["idle_held_gpu_hours"] == pytest.approx(0.5, **APPROX)
    assert users["bob"]["real_gpu_hours"] == pytest.approx(0.8, **APPROX)
    assert users["carol"]["runtime_gpu_hours"] == pytest.approx(2 * F, **APPROX)
    assert _rows(fleet.breakdowns.per_job, "job")["42"]["runtime_gpu_hours"] == pytest.approx(2.0, **APPROX)
    assert set(_rows(fleet.breakdowns.per_pod, "pod")) == {"ml/p1"}


def test_hour_of_week_and_week(fleet) -> None:  # type: ignore[no-untyped-def]
    cells = {(r["day_of_week"], r["hour_of_day"]): r for r in fleet.breakdowns.hour_of_week.rows}
    assert set(cells) == {(0, 0), (0, 1)}  # Monday 00:00 and 01:00 UTC
    # First hour: a 0.5 + b 0 + c 0.4 + d 1.0 × 3/7 over 3 + 3/7 GPU-hours.
    assert cells[(0, 0)]["real_utilization"] == pytest.approx((0.9 + F) / (3 + F), **APPROX)
    assert cells[(0, 1)]["real_utilization"] == pytest.approx((0.4 + F) / (3 + F), **APPROX)
    weeks = fleet.breakdowns.per_week.rows
    assert len(weeks) == 1 and weeks[0]["week"] == "2026-03-02"
    assert weeks[0]["real_utilization"] == pytest.approx(S / W, **APPROX)


def test_demand_series(fleet) -> None:  # type: ignore[no-untyped-def]
    h = fleet.hybrid
    assert h.bucket_s == 300
    assert h.peak_demand.value == pytest.approx(2 + F, **APPROX)  # a, c and the slice held together
    # Mean GPUs held = R / trial hours.
    assert h.mean_demand.value == pytest.approx(R / 2, **APPROX)
    hours = fleet.breakdowns.demand.rows
    assert len(hours) == 2 and hours[0]["gpus_in_use"] == pytest.approx(0.5 + 0.4 + F, **APPROX)


def test_energy_and_measured_power(fleet) -> None:  # type: ignore[no-untyped-def]
    u = fleet.utilization
    # Power measured on GPU-a (400 W) and GPU-b (100 W) only, 2 h each.
    assert u.average_power_w.value == pytest.approx(250.0, **APPROX)
    assert u.energy_kwh.value == pytest.approx((400 + 100) * 2 / 1000, **APPROX)
    assert fleet.costs.power_source == "measured" and fleet.costs.power_w_per_gpu.value == pytest.approx(250.0)


def test_trial_and_data_quality_complete(fleet) -> None:  # type: ignore[no-untyped-def]
    t, q = fleet.trial, fleet.data_quality
    assert t.start == T0 and t.end == T0 + dt.timedelta(hours=2)
    assert t.days == pytest.approx(2 / 24) and t.provisional and t.observed_days == 1
    assert t.reevaluate_on == dt.date(2026, 9, 2)
    assert q.coverage.value == pytest.approx(1.0, **APPROX)
    assert q.gap_hours.value == 0 and q.stopped_reporting == ()


def test_gaps_and_stopped_reporting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    full = gpu_rows("n1", "GPU-f", 300, sm=0.5, procs=1)  # 5 hours
    stops = gpu_rows("n1", "GPU-e", 60, sm=0.5, procs=1)  # first hour only
    late = gpu_rows("n1", "GPU-g", 60, sm=0.5, procs=1, start=T0 + dt.timedelta(hours=4))  # last hour only
    r = analyze(write(tmp_path, full + stops + late), load_config())
    q = r.data_quality
    gpus = _rows(q.gpus, "gpu")
    assert q.stopped_reporting == ("GPU-e",)
    assert gpus["GPU-e"]["gap_hours"] == 4 and gpus["GPU-g"]["gap_hours"] == 4 and gpus["GPU-f"]["gap_hours"] == 0
    assert gpus["GPU-e"]["coverage"] == pytest.approx(0.2)
    assert q.coverage.value == pytest.approx(7 / 15, **APPROX)
    assert q.gap_hours.value == 8
    assert any("stopped reporting" in w for w in r.warnings)


def test_unattributed_held_time(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = gpu_rows("n1", "GPU-a", 120, sm=0.5, procs=1)  # held, but no process rows (e.g. Prometheus import)
    r = analyze(write(tmp_path, rows), load_config())
    users = _rows(r.breakdowns.per_user, "user")
    assert users["(unattributed)"]["runtime_gpu_hours"] == pytest.approx(2.0)
    assert r.breakdowns.per_job.rows == ()


def test_two_holders_share_a_gpu() -> None:
    rows = gpu_rows("n1", "GPU-a", 60, sm=0.6, procs=2)
    procs = (proc_rows("n1", "GPU-a", ends(rows), user="x", pid=1)
             + proc_rows("n1", "GPU-a", ends(rows), user="y", pid=2))
    r = analyze_rollups(rollups(rows, procs), load_config())
    users = _rows(r.breakdowns.per_user, "user")
    assert users["x"]["runtime_gpu_hours"] == pytest.approx(0.5) and users["y"]["real_gpu_hours"] == pytest.approx(0.3)


def test_empty_dataset_is_a_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(NoDataError, match="no GPU samples"):
        analyze(tmp_path, load_config())


def test_trial_of_minutes_is_a_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path, gpu_rows("n1", "GPU-a", 10, sm=0.5, procs=1))
    with pytest.raises(NoDataError, match="only 10 minutes"):
        analyze(tmp_path, load_config())


def test_to_dict_is_plain_json_with_stable_keys(fleet) -> None:  # type: ignore[no-untyped-def]
    d = fleet.to_dict()
    text = json.dumps(d, allow_nan=False)  # no NaN/inf, no numpy, no datetimes left
    assert json.loads(text) == d
    assert list(d) == ["result_version", "dataset_schema_version", "generated_at", "data_root", "trial",
                       "utilization", "breakdowns", "data_quality", "decision", "costs", "break_even", "hybrid",
                       "sensitivity", "confidence", "assumptions", "warnings", "consolidation", "ledger",
                       "chargeback", "models", "pools", "fleet_fixed_usd"]
    fig = d["utilization"]["real_utilization"]
    assert set(fig) == {"value", "unit", "formula", "source", "definition", "upper_bound", "lower_bound"}
    assert isinstance(d["breakdowns"]["per_user"]["rows"], list)
    assert d["trial"]["start"] == "2026-03-02T00:00:00Z"


def test_every_assumption_has_a_source(fleet) -> None:  # type: ignore[no-untyped-def]
    missing = [a.key for a in fleet.assumptions if not a.source]
    assert missing == []
    keys = {a.key for a in fleet.assumptions}
    assert {"cloud.spot_multiplier", "on_prem.pue", "input.latency_sensitive"} <= keys


def test_analysis_package_imports_no_typer_or_pynvml() -> None:
    code = (
        "import sys, gpuaudit.analysis, gpuaudit.analysis.pipeline, gpuaudit.analysis.text; "
        "bad = [m for m in ('typer', 'pynvml') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_nan_free_when_nothing_held() -> None:
    r = analyze_rollups(rollups(gpu_rows("n1", "GPU-a", 120, sm=0.0)), load_config())
    assert r.utilization.runtime_utilization.value == 0.0
    assert r.utilization.efficiency_while_held.value is None
    low = r.confidence.real_utilization.low  # None: too few days to claim an interval (issue 17)
    assert r.hybrid.n_star == 0 and (low is None or not math.isnan(low))


def test_docs_list_every_result_field() -> None:
    """Every field of every dataclass the result is built from is named in docs/analyzer.md (a hand-kept list of
    classes let the per-model pools' fields go undocumented)."""
    import dataclasses
    from pathlib import Path

    from gpuaudit.analysis import economics, figure
    from gpuaudit.analysis import result as R

    docs = (Path(__file__).resolve().parents[1] / "docs" / "analyzer.md").read_text(encoding="utf-8")
    classes = [c for m in (R, economics, figure) for c in vars(m).values()
               if dataclasses.is_dataclass(c) and isinstance(c, type) and c.__module__ == m.__name__]
    assert {"AnalysisResult", "Pool", "BreakEven", "Figure"} <= {c.__name__ for c in classes}
    missing = [
        f"{cls.__name__}.{f.name}"
        for cls in classes
        for f in dataclasses.fields(cls)
        if f"`{f.name}`" not in docs
    ]
    assert missing == []
