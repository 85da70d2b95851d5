"""The synthetic fleet: datasets written to disk, then measured with DuckDB through the store's views."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.helpers import SIZES, START, run_cli, scenario_dataset

from gpuaudit import schema
from gpuaudit.errors import GpuauditError
from gpuaudit.sim import bulk as sim
from gpuaudit.sim.loadmodel import load_model
from gpuaudit.sim.workload import SCENARIOS
from gpuaudit.store import open_dataset, read_json, write_table

RUNTIME_SQL = "SELECT sum((n_processes > 0)::INT * gpu_fraction * interval_s) / sum(gpu_fraction * interval_s) " \
              "FROM samples"
REAL_SQL = "SELECT sum(sm_active * gpu_fraction * interval_s) / sum(gpu_fraction * interval_s) FROM samples"


class _Datasets(dict):
    """Each scenario's dataset, simulated on first use (a test worker builds only what its tests need)."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        super().__init__()
        self.factory = factory

    def __missing__(self, name: str) -> tuple[Path, sim.SimulationSummary]:
        self[name] = scenario_dataset(self.factory, name)
        return self[name]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> _Datasets:
    return _Datasets(tmp_path_factory)


def _one(root: Path, sql: str) -> float:
    with open_dataset(root) as ds:
        return ds.fetchall(sql)[0][0]


@pytest.mark.parametrize("name", list(SIZES))
def test_scenario_lands_on_its_documented_ground_truth(datasets: dict, name: str) -> None:
    root, summary = datasets[name]
    truth, tol = SCENARIOS[name].truth, SCENARIOS[name].tolerance
    runtime, real = _one(root, RUNTIME_SQL), _one(root, REAL_SQL)
    assert abs(runtime - truth.runtime_util) <= tol, (runtime, truth.runtime_util)
    assert abs(real - truth.real_util) <= tol, (real, truth.real_util)
    # The sidecar records what was generated (not the documented target), and the branch it implies.
    side = read_json(root, sim.SIDECAR)
    assert side["complete"] is True and side["scenario"] == name
    assert side["runtime_util"] == pytest.approx(runtime, abs=1e-5)
    assert side["real_util"] == pytest.approx(real, abs=1e-5)
    assert side["branch"] == truth.branch == summary.branch
    assert side["documented"]["real_util"] == truth.real_util
    gpus, days, interval = SIZES[name]
    assert summary.rows == _one(root, "SELECT count(*) FROM samples") == gpus * days * 86400 // interval
    assert summary.process_rows == _one(root, "SELECT count(*) FROM processes")


def test_real_utilization_is_far_below_runtime_hours_for_phantom(datasets: dict) -> None:
    root, _ = datasets["phantom"]
    assert _one(root, RUNTIME_SQL) - _one(root, REAL_SQL) > 0.3


@pytest.mark.parametrize(("name", "rhythm"), [("phantom", True), ("bursty-agents", True),
                                             ("idle-cluster", True), ("steady-training", False)])
def test_daily_rhythm(datasets: dict, name: str, rhythm: bool) -> None:
    root, _ = datasets[name]
    day = _one(root, "SELECT avg(sm_active) FROM samples WHERE hour(ts) BETWEEN 9 AND 17 AND dayofweek(ts) "
                     "BETWEEN 1 AND 5")
    night = _one(root, "SELECT avg(sm_active) FROM samples WHERE hour(ts) < 6")
    if rhythm:
        assert day - night > 0.02, (day, night)
    else:
        assert abs(day - night) < 0.02, (day, night)


@pytest.mark.parametrize("name", list(SIZES))
def test_values_respect_the_contract(datasets: dict, name: str) -> None:
    root, _ = datasets[name]
    bad = _one(root, """
        SELECT count(*) FILTER (WHERE duty_cycle < sm_active)
             + count(*) FILTER (WHERE sm_occupancy > sm_active OR tensor_active > sm_active)
             + count(*) FILTER (WHERE power_w < 50 OR power_w > 700 OR mem_used_bytes > mem_total_bytes)
             + count(*) FILTER (WHERE abs(energy_j - power_w * interval_s) > 0.01)
             + count(*) FILTER (WHERE source <> 'simulated' OR gpu_name <> 'NVIDIA H100 80GB HBM3')
             + count(*) FILTER (WHERE mig_instance IS NOT NULL OR gpu_fraction <> 1)
             -- quantized at the sources' precision: 0.1 % for GPM, whole percent for utilization.*
             + count(*) FILTER (WHERE abs(sm_active * 1000 - round(sm_active * 1000)) > 1e-3)
             + count(*) FILTER (WHERE abs(duty_cycle * 100 - round(duty_cycle * 100)) > 1e-3)
             + count(*) FILTER (WHERE mem_used_bytes % 1048576 <> 0)
        FROM samples""")
    assert bad == 0
    # No GPU has two rows for one timestamp, and every GPU sits on its own host directory.
    assert _one(root, "SELECT count(*) - count(DISTINCT (gpu_uuid, ts)) FROM samples") == 0
    assert _one(root, "SELECT max(n) FROM (SELECT count(DISTINCT host) n FROM samples GROUP BY gpu_uuid)") == 1


@pytest.mark.parametrize("name", list(SIZES))
def test_processes_agree_with_n_processes(datasets: dict, name: str) -> None:
    root, _ = datasets[name]
    mismatched = _one(root, """
        WITH p AS (SELECT gpu_uuid, ts, count(*) n, sum(mem_used_bytes) mem FROM processes GROUP BY ALL)
        SELECT count(*) FROM samples s FULL JOIN p USING (gpu_uuid, ts)
        WHERE coalesce(s.n_processes, -1) <> coalesce(p.n, 0) OR p.mem > s.mem_used_bytes""")
    assert mismatched == 0
    with open_dataset(root) as ds:
        ident = ds.fetchall("SELECT count(*) FILTER (WHERE job_id IS NULL AND k8s_pod IS NULL), "
                            "count(*) FILTER (WHERE user IS NULL OR command IS NULL OR pid IS NULL), "
                            "count(DISTINCT user), count(DISTINCT coalesce(job_id, k8s_pod)) FROM processes")[0]
    assert ident[0] == 0 and ident[1] == 0
    assert ident[3] > 5  # many jobs (or pods)


def test_kubernetes_and_slurm_identities(datasets: dict) -> None:
    root, _ = datasets["mixed"]
    with open_dataset(root) as ds:
        rows = dict(ds.fetchall("SELECT k8s_namespace IS NOT NULL, count(DISTINCT coalesce(job_id, k8s_pod)) "
                                "FROM processes GROUP BY 1"))
    assert rows[True] > 5 and rows[False] > 20  # bursty pods and Slurm jobs share the mixed fleet


def test_load_model_reproduces_the_written_rows(datasets: dict) -> None:
    root, _ = datasets["mixed"]
    gpus, days, _ = SIZES["mixed"]
    model = load_model("mixed", gpus, seed=1, start=START, days=days)
    with open_dataset(root) as ds:
        rows = ds.query("SELECT * FROM samples USING SAMPLE 40 ROWS (reservoir, 7) ORDER BY ts").to_dicts()
        for row in rows:
            g = model.uuids.index(row["gpu_uuid"])
            load = model.at(row["ts"].timestamp())[g]
            for col in ("sm_active", "sm_occupancy", "tensor_active", "dram_active", "duty_cycle", "mem_util",
                        "power_w"):
                assert row[col] == pytest.approx(getattr(load, col), abs=1e-6), col
            assert (row["temp_c"], row["mem_used_bytes"], row["n_processes"]) == (
                load.temp_c, load.mem_used_bytes, len(load.processes))
            procs = ds.query("SELECT pid, user, job_id, k8s_pod, mem_used_bytes, sm_util FROM processes "
                             "WHERE gpu_uuid = ? AND ts = ? ORDER BY pid", [row["gpu_uuid"], row["ts"]]).rows()
            expected = sorted((p.pid, p.user, p.job_id, p.k8s_pod, p.mem_used_bytes) for p in load.processes)
            assert [r[:5] for r in procs] == expected
            # Both sides by value: rows come by pid, and a two-process job's first pid has the larger share.
            assert sorted(r[5] for r in procs) == pytest.approx(sorted(p.sm_util for p in load.processes), abs=1e-6)
    assert sum(r["n_processes"] > 0 for r in rows) > 5


def _fingerprint(root: Path) -> tuple:
    with open_dataset(root) as ds:
        return (ds.fetchall("SELECT count(*), sum(hash(gpu_uuid, ts, sm_active, duty_cycle, power_w, temp_c, "
                            "mem_used_bytes, n_processes)) FROM samples")[0],
                ds.fetchall("SELECT count(*), sum(hash(gpu_uuid, ts, pid, user, job_id, mem_used_bytes, sm_util)) "
                            "FROM processes")[0])


def test_deterministic_in_the_seed(tmp_path: Path) -> None:
    args = dict(scenario="phantom", gpus=16, days=2, interval_s=300, start=START)
    sim.simulate(tmp_path / "a", seed=4, **args)
    sim.simulate(tmp_path / "b", seed=4, **args)
    sim.simulate(tmp_path / "c", seed=5, **args)
    assert _fingerprint(tmp_path / "a") == _fingerprint(tmp_path / "b")
    assert _fingerprint(tmp_path / "a") != _fingerprint(tmp_path / "c")


def test_chunking_and_workers_do_not_change_the_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = dict(scenario="mixed", gpus=24, days=2, interval_s=300, seed=2, start=START)
    sim.simulate(tmp_path / "a", **args)
    sim.simulate(tmp_path / "w", workers=2, **args)
    monkeypatch.setattr(sim, "CHUNK_ROWS", 600)  # one host per chunk
    sim.simulate(tmp_path / "b", **args)
    files = sorted(p.relative_to(tmp_path / "b").parent for t in ("gpu_samples", "gpu_processes")
                   for p in (tmp_path / "b" / t).rglob("*.parquet"))
    assert len(files) == len(set(files)) == 3 * 2 * 2  # one file per host, date and table
    assert _fingerprint(tmp_path / "a") == _fingerprint(tmp_path / "b") == _fingerprint(tmp_path / "w")


def test_odd_start_and_interval_fill_the_period_exactly(tmp_path: Path) -> None:
    start = datetime(2026, 9, 7, 5, 30, 7, tzinfo=UTC)
    s = sim.simulate(tmp_path, "steady-training", 8, 1.5, 7.0, seed=0, start=start)
    n = int(1.5 * 86400 // 7)
    assert s.rows == 8 * n
    with open_dataset(tmp_path) as ds:
        first, last, distinct = ds.fetchall("SELECT min(ts), max(ts), count(DISTINCT (gpu_uuid, ts)) FROM samples")[0]
        dates = ds.fetchall("SELECT DISTINCT date FROM samples ORDER BY 1")
    assert first == start and (last - first).total_seconds() == (n - 1) * 7 and distinct == 8 * n
    assert [str(d[0]) for d in dates] == ["2026-09-07", "2026-09-08"]


def test_samples_take_at_most_8_bytes_per_row(tmp_path: Path) -> None:
    """The storage target at the agent's 10 s interval, on a realistic busy-and-noisy mix."""
    s = sim.simulate(tmp_path, "mixed", 32, 1, 10, seed=0, start=START)
    assert s.rows == 32 * 8640
    assert s.bytes_per_row <= 8.0, s.bytes_per_row


def test_refuses_to_mix_two_simulations(tmp_path: Path) -> None:
    sim.simulate(tmp_path, "phantom", 8, 1, 600, seed=0, start=START)
    before = _fingerprint(tmp_path)
    with pytest.raises(GpuauditError, match=r"already holds a dataset .* --force"):
        sim.simulate(tmp_path, "steady-training", 8, 1, 600, seed=0, start=START)
    assert _fingerprint(tmp_path) == before
    # --force replaces the previous simulation entirely.
    sim.simulate(tmp_path, "steady-training", 8, 1, 600, seed=0, start=START, force=True)
    assert read_json(tmp_path, sim.SIDECAR)["scenario"] == "steady-training"
    assert _one(tmp_path, RUNTIME_SQL) > 0.95


def test_force_never_deletes_data_that_is_not_a_simulation(tmp_path: Path) -> None:
    real = {"ts": [datetime(2026, 9, 1, tzinfo=UTC)], "interval_s": [10.0], "host": ["prod-7"],
            "gpu_uuid": ["GPU-real"], "gpu_fraction": [1.0], "n_processes": [0], "source": ["nvml-gpm"]}
    write_table(tmp_path, schema.SAMPLES, real)
    with pytest.raises(GpuauditError, match="not written by `gpuaudit simulate`"):
        sim.simulate(tmp_path, "phantom", 8, 1, 600, seed=0, start=START, force=True)
    assert _one(tmp_path, "SELECT count(*) FROM samples WHERE host = 'prod-7'") == 1
    # A real host added next to a simulation is protected as well.
    other = tmp_path / "mixed-root"
    sim.simulate(other, "phantom", 8, 1, 600, seed=0, start=START)
    write_table(other, schema.SAMPLES, real)
    with pytest.raises(GpuauditError, match="host 'prod-7' from elsewhere"):
        sim.simulate(other, "phantom", 8, 1, 600, seed=0, start=START, force=True)
    assert _one(other, "SELECT count(*) FROM samples WHERE host = 'prod-7'") == 1


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(gpus=0), "--gpus must be between 1 and"),
    (dict(days=0), "--days must be > 0"),
    (dict(days=float("nan")), "--days must be > 0"),
    (dict(interval_s=0.5), "--interval must be between 1 and 3600"),
    (dict(days=0.01, interval_s=3600), "longer than --days"),
    (dict(gpus=4096, days=60), "245,760 GPU-days; the simulator handles up to 200,000"),
    (dict(workers=0), "--workers must be at least 1"),
    (dict(scenario="nope"), "unknown scenario 'nope'"),
])
def test_bad_arguments_are_refused_before_writing(tmp_path: Path, kwargs: dict, message: str) -> None:
    args = dict(scenario="phantom", gpus=8, days=1, interval_s=600, start=START) | kwargs
    with pytest.raises(GpuauditError, match=message):
        sim.simulate(tmp_path / "d", **args)
    assert not (tmp_path / "d").exists()


def test_cli_writes_a_dataset_and_prints_one_summary_line(tmp_path: Path) -> None:
    r = run_cli("simulate", "--scenario", "steady-training", "--gpus", "8", "--days", "1", "--interval", "300",
                "--seed", "3", "--start", "2026-09-07", "--data", str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1
    assert "simulated steady-training: 8 GPUs x 1 days at 300 s -> 2,304 sample rows" in lines[0]
    assert "B/sample row" in lines[0] and "(on-prem)" in lines[0]
    side = json.loads((tmp_path / "simulation.json").read_text())
    assert side["seed"] == 3 and side["start"] == "2026-09-07T00:00:00+00:00" and side["gpus"] == 8


def test_cli_honours_the_data_environment_variable(tmp_path: Path) -> None:
    r = run_cli("simulate", "--gpus", "8", "--days", "1", "--interval", "600", env={"GPUAUDIT_DATA": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert read_json(tmp_path, sim.SIDECAR)["scenario"] == "phantom"


def test_unwritable_data_directory_is_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    r = run_cli("simulate", "--days", "1", "--interval", "600", "--data", str(tmp_path / "file"))
    assert r.returncode != 0 and r.stderr.strip() == f"gpuaudit: error: --data {tmp_path / 'file'} is a file, " \
                                                     "not a directory"
    r = run_cli("simulate", "--days", "1", "--interval", "600", "--data", str(tmp_path / "file" / "sub"))
    assert r.returncode != 0 and r.stderr.strip().startswith("gpuaudit: error: cannot write to"), r.stderr
    assert (tmp_path / "file").read_text() == "x"


def test_cli_lists_scenarios(tmp_path: Path) -> None:
    r = run_cli("simulate", "--list")
    assert r.returncode == 0
    for name in SCENARIOS:
        assert name in r.stdout
    assert "R/W  60%  S/W  23%" in r.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--scenario", "nope"], "gpuaudit: error: unknown scenario 'nope'; known: phantom, idle-cluster, "
                             "steady-training, bursty-agents, mixed"),
    (["--gpus", "0"], "gpuaudit: error: --gpus must be between 1 and 65536 (got 0)"),
    (["--days", "-1"], "gpuaudit: error: --days must be > 0"),
    (["--interval", "0"], "gpuaudit: error: --interval must be between 1 and 3600 seconds (got 0)"),
    (["--start", "yesterday"], "gpuaudit: error: --start must be an ISO date"),
    (["--workers", "0"], "gpuaudit: error: --workers must be at least 1 (got 0)"),
])
def test_cli_errors_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    r = run_cli("simulate", "--data", str(tmp_path / "d"), "--days", "1", "--interval", "600", *args)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert r.stderr.strip().startswith(message), r.stderr
    assert "Traceback" not in r.stderr
