"""Overlapping data is counted once (stage 1 de-duplication): a copied file, an import over agent data for the
same GPU-time, two agents writing one GPU, one GPU under two host names. Each summed today's copies before the
fix (coverage 2.0, doubled GPU-hours, no error)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.analysis_helpers import T0, gpu_rows, rollups, write

from gpuaudit import schema
from gpuaudit.analysis import analyze


def _rows(**kw):  # type: ignore[no-untyped-def]
    return [r for g in range(2) for r in gpu_rows("n1", f"GPU-{g}", 48 * 6, interval_s=600, sm=0.4,
                                                     procs=lambda i: int(i % 2 == 0), **kw)]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    root = write(tmp_path_factory.mktemp("base") / "d", _rows())
    return root, analyze(root)


def _same(a, b) -> None:  # type: ignore[no-untyped-def]
    ua, ub = a.utilization, b.utilization
    assert ub.observed_gpu_hours.value == pytest.approx(ua.observed_gpu_hours.value, rel=1e-6)
    assert ub.runtime_gpu_hours.value == pytest.approx(ua.runtime_gpu_hours.value, rel=1e-6)
    assert ub.real_gpu_hours.value == pytest.approx(ua.real_gpu_hours.value, rel=1e-6)
    assert b.data_quality.coverage.value == pytest.approx(a.data_quality.coverage.value, rel=1e-6)
    sa = {s.id: s.total.value for s in a.costs.scenarios}
    sb = {s.id: s.total.value for s in b.costs.scenarios}
    assert sb == pytest.approx(sa, rel=1e-6)


def test_a_copied_file_is_counted_once(base, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root, a = base
    copy = tmp_path / "d"
    shutil.copytree(root, copy)
    for f in list((copy / schema.SAMPLES).rglob("*.parquet")):
        shutil.copy(f, f.with_name("copy-of-" + f.name))
    b = analyze(copy)
    assert b.data_quality.coverage.value <= 1.0 + 1e-9
    _same(a, b)
    # The reader leaves each exact copy out and names it (issue 16, item 6): nothing is left to overlap.
    assert b.data_quality.overlap_gpu_hours.value == 0
    assert any("left out file" in w and "copy-of-" in w and "an exact copy of" in w for w in b.data_quality.warnings)


def test_two_agents_on_one_gpu_are_counted_once(tmp_path: Path) -> None:
    """The second agent samples the same GPUs at 60 s too, out of phase by 25 s (off by at most one interval
    an hour: 1.7 %)."""
    import datetime as dt

    def agent(offset: float) -> list[dict]:  # type: ignore[type-arg]
        return [r for g in range(2) for r in gpu_rows("n1", f"GPU-{g}", 48 * 60, interval_s=60, sm=0.4,
                                                         start=T0 + dt.timedelta(seconds=offset),
                                                         procs=lambda i: int(i // 10 % 2 == 0))]

    a = analyze(write(tmp_path / "one", agent(0)))
    b = analyze(write(tmp_path / "two", agent(0) + agent(25)))
    assert b.data_quality.coverage.value <= 1.0 + 0.02
    assert b.utilization.observed_gpu_hours.value == pytest.approx(a.utilization.observed_gpu_hours.value, rel=0.02)
    assert b.utilization.real_utilization.value == pytest.approx(a.utilization.real_utilization.value, rel=0.02)
    assert b.utilization.runtime_utilization.value == pytest.approx(a.utilization.runtime_utilization.value,
                                                                    rel=0.03)


def test_an_import_over_agent_data_keeps_the_agent(base, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Precedence: agent GPM > DCGM import > duty cycle. The import's (different) numbers never add up."""
    _, a = base
    agent = [{**r, "source": schema.SOURCE_NVML_GPM} for r in _rows()]
    imported = [{**r, "source": schema.SOURCE_PROM_DCGM}  # a 60 s step, other values
                for g in range(2) for r in gpu_rows("n1", f"GPU-{g}", 48 * 60, interval_s=60, sm=0.9, procs=1)]
    b = analyze(write(tmp_path / "d", agent + imported))
    assert b.data_quality.coverage.value <= 1.0 + 1e-6
    assert b.utilization.real_utilization.value == pytest.approx(a.utilization.real_utilization.value, rel=1e-6)
    assert b.utilization.runtime_utilization.value == pytest.approx(a.utilization.runtime_utilization.value,
                                                                    rel=1e-6)
    assert b.data_quality.overlap_gpu_hours.value == pytest.approx(a.utilization.observed_gpu_hours.value, rel=1e-6)


def test_an_import_fills_the_time_before_the_agent(tmp_path: Path) -> None:
    """Precedence works per 5-minute bucket: where only the import has data, it counts."""
    imported = [{**r, "source": schema.SOURCE_PROM_DCGM} for r in gpu_rows("n1", "GPU-0", 48 * 12, interval_s=300,
                                                                          sm=0.2, procs=1)]
    agent = [r for r in gpu_rows("n1", "GPU-0", 48 * 12, interval_s=300, sm=0.6, procs=1,
                                 source=schema.SOURCE_NVML_GPM)][24 * 12:]  # the agent starts a day later
    r = analyze(write(tmp_path / "d", imported + agent))
    assert r.utilization.observed_gpu_hours.value == pytest.approx(48.0)
    assert r.utilization.real_utilization.value == pytest.approx(0.4, rel=1e-6)  # a day at 0.2, a day at 0.6
    assert r.data_quality.overlap_gpu_hours.value == pytest.approx(24.0)


def test_one_gpu_under_two_host_names_is_counted_once(base, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, a = base
    renamed = [{**r, "host": "n1.example.com"} for r in _rows()]
    b = analyze(write(tmp_path / "d", _rows() + renamed))
    _same(a, b)


def _hours(roll) -> dict[str, float]:  # type: ignore[no-untyped-def]
    g = roll.gpu_hours
    return {k: float(g[k].sum()) / 3600 for k in ("observed_s", "held_s", "real_s", "overlap_s")}


def test_a_copy_of_part_of_each_hour_is_counted_once() -> None:
    """A copy of the first half of every hour (the busy half) was de-duplicated by one factor over the whole
    hour: runtime utilization read 0.667 and real 0.533 for a truth of 0.50 and 0.40. Partial overlaps are
    resolved per minute."""
    busy = lambda i: (i % 60) < 30  # noqa: E731  (60 s samples: the first 30 of each hour)
    rows = gpu_rows("n1", "GPU-a", 48 * 60, interval_s=60, sm=lambda i: 0.8 if busy(i) else 0.0,
                    procs=lambda i: int(busy(i)))
    copy = [r for i, r in enumerate(rows) if busy(i)]
    h = _hours(rollups(rows + copy))
    assert h["observed_s"] == pytest.approx(48, rel=1e-9)
    assert h["held_s"] / h["observed_s"] == pytest.approx(0.5, rel=1e-9)
    assert h["real_s"] / h["observed_s"] == pytest.approx(0.4, rel=1e-9)
    assert h["overlap_s"] == pytest.approx(24, rel=1e-9)  # the copied half-hours, reported


def test_a_stream_that_covers_part_of_an_hour_does_not_hide_the_rest() -> None:
    """An agent that covered only the first 10 minutes of each hour, over a 5-minute Prometheus import of the
    whole time: the hour went to the agent and its other 50 minutes were lost (48 GPU-hours read as 8)."""
    imported = gpu_rows("n1", "GPU-a", 48 * 12, interval_s=300, sm=0.5, procs=1,
                        source=schema.SOURCE_PROM_DCGM)
    agent = [r for r in gpu_rows("n1", "GPU-a", 48 * 360, interval_s=10, sm=0.5, procs=1)
             if (r["ts"] - T0).total_seconds() % 3600 <= 600 and (r["ts"] - T0).total_seconds() % 3600 > 0]
    h = _hours(rollups(imported + agent))
    assert h["observed_s"] == pytest.approx(48, rel=1e-9)
    assert h["real_s"] == pytest.approx(24, rel=1e-9)
    assert h["overlap_s"] == pytest.approx(8, rel=1e-9)  # the import's first 10 minutes of each hour


def test_gpuaudit_sql_sees_the_same_de_duplicated_streams(tmp_path: Path) -> None:
    """`gpuaudit sql` exposes gpu_streams as views (the hourly pass, the hours to refine, the one-minute pass):
    the canned rollup run there gives the analyzer's figures on partly overlapping data too."""
    import json

    from tests.helpers import run_cli

    from gpuaudit.analysis.stage1.rollup import load_rollups

    busy = lambda i: (i % 60) < 30  # noqa: E731
    rows = gpu_rows("n1", "GPU-a", 6 * 60, interval_s=60, sm=lambda i: 0.8 if busy(i) else 0.0,
                    procs=lambda i: int(busy(i)))
    data = write(tmp_path / "d", rows)
    write(tmp_path / "copy", [r for i, r in enumerate(rows) if busy(i)])
    for f in (tmp_path / "copy").rglob("*.parquet"):
        dest = data / f.relative_to(tmp_path / "copy")
        shutil.copy(f, dest.with_name("copy-" + dest.name))
    roll = load_rollups(data)
    r = run_cli("sql", "-d", str(data), "--file", "sql/analysis_rollup.sql", "--format", "json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert sum(x["held_s"] for x in got) == pytest.approx(float(roll.gpu_hours["held_s"].sum()))
    assert float(roll.gpu_hours["held_s"].sum()) == pytest.approx(3 * 3600)
    assert float(roll.gpu_hours["overlap_s"].sum()) == pytest.approx(3 * 3600)  # the copy was read, and removed
    assert sum(x["overlap_s"] for x in got) == pytest.approx(3 * 3600)


def test_user_queries_agree_with_analyze_on_overlapping_data(base, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """sql/fleet_summary.sql and sql/gpu_summary.sql summed `samples` as they were, so a copied file doubled their
    GPU-hours while `analyze` counted it once: they now read the de-duplicated `gpu_hours`."""
    import json

    from tests.helpers import run_cli

    root, a = base
    copy = tmp_path / "d"
    shutil.copytree(root, copy)
    for f in list((copy / schema.SAMPLES).rglob("*.parquet")):
        shutil.copy(f, f.with_name("copy-of-" + f.name))
    u = a.utilization
    r = run_cli("sql", "-d", str(copy), "--file", "sql/fleet_summary.sql", "--format", "json")
    assert r.returncode == 0, r.stderr
    [fleet] = json.loads(r.stdout)
    assert fleet["observed_gpu_hours"] == pytest.approx(u.observed_gpu_hours.value, rel=1e-6)
    assert fleet["observed_gpu_hours"] == pytest.approx(2 * 48.0)  # 2 GPUs x 48 h, the copy not counted
    assert fleet["runtime_util"] == pytest.approx(u.runtime_gpu_hours.value / u.observed_gpu_hours.value, rel=1e-6)
    assert fleet["real_util"] == pytest.approx(u.real_gpu_hours.value / u.observed_gpu_hours.value, rel=1e-6)
    r = run_cli("sql", "-d", str(copy), "--file", "sql/gpu_summary.sql", "--format", "json")
    assert r.returncode == 0, r.stderr
    gpus = json.loads(r.stdout)
    assert [g["gpu_uuid"] for g in gpus] == ["GPU-0", "GPU-1"] and all(g["gpu_index"] is not None for g in gpus)
    assert sum(g["observed_gpu_hours"] for g in gpus) == pytest.approx(2 * 48.0)


def test_a_gpu_name_reported_for_only_part_of_an_hour_removes_nothing(base, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A GPU whose name is missing from some samples of an hour (an import without the info series, then the
    agent) is still one stream there. Defect (found in the review of the rollup cache's merge): streams were
    grouped by name, so such an hour was two winning streams, each counted the other's seconds as removed by
    de-duplication (overlap GPU-hours > 0 with nothing duplicated) and a de-duplicated demand series counted
    its samples twice."""
    _, a = base
    rows = _rows()
    for r in rows:
        if r["gpu_uuid"] == "GPU-0" and r["ts"] <= T0.replace(minute=30):
            r["gpu_name"] = None
    b = analyze(write(tmp_path / "d", rows))
    assert b.data_quality.overlap_gpu_hours.value == 0
    _same(a, b)
