"""Overlapping data is counted once (stage 1 de-duplication): a copied file, an import over agent data for the
same GPU-time, two agents writing one GPU, one GPU under two host names. Each summed today's copies before the
fix (coverage 2.0, doubled GPU-hours, no error)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.analysis_helpers import T0, gpu_rows, write

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
    assert b.data_quality.overlap_gpu_hours.value == pytest.approx(a.utilization.observed_gpu_hours.value)
    assert any("overlapping samples" in w for w in b.data_quality.warnings)


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
