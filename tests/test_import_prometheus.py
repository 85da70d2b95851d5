"""`import prometheus` against a real Prometheus serving a backfilled week of dcgm-exporter history
(tests/prom_helpers.py). The imported rows must equal the fixture's known step averages."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest
from tests.helpers import require_binary, run_cli
from tests.prom_helpers import MIB, START, Gpu, PromServer, expected, fleet_server

from gpuaudit import schema, store
from gpuaudit.importer.promclient import transport
from gpuaudit.importer.prometheus import ImportResult, import_prometheus
from gpuaudit.importer.prometheus.mapping import build_mapping

pytestmark = pytest.mark.prometheus
HOW = "install Prometheus (it ships promtool): apt-get install --no-install-recommends prometheus"
WEEK_END = START + timedelta(days=7)
UUID_A0, UUID_A1 = "GPU-a0000000-0000-0000-0000-000000000000", "GPU-a1111111-1111-1111-1111-111111111111"
UUID_B0, UUID_B1 = "GPU-b0000000-0000-0000-0000-000000000000", "GPU-b1111111-1111-1111-1111-111111111111"
UUID_C0 = "GPU-c0000000-0000-0000-0000-000000000000"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PromServer, list[Gpu]]]:
    prometheus = require_binary("prometheus", HOW)
    promtool = require_binary("promtool", HOW)
    yield from fleet_server(prometheus, promtool, tmp_path_factory.mktemp("prom"))


@pytest.fixture(scope="module")
def week(prom: tuple[PromServer, list[Gpu]], tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[Path, ImportResult]:
    """The whole week imported once at 5-minute steps (shared by the read-only tests)."""
    root = tmp_path_factory.mktemp("week") / "data"
    return root, _import(prom[0], root, START, WEEK_END, 300)


def _import(server: PromServer, root: Path, start, end, step_s: int, **kw) -> ImportResult:  # type: ignore[no-untyped-def]
    mapping = build_mapping(kw.pop("metrics", None), kw.pop("labels", None), selector=kw.pop("selector", ""),
                            exporter_pod=kw.pop("exporter_pod", "dcgm-exporter"))
    return import_prometheus(root, transport(server.url, retries=0), mapping, start, end, step_s, **kw)


def _samples(root: Path) -> pl.DataFrame:
    with store.open_dataset(root) as ds:
        return ds.query("SELECT * FROM samples ORDER BY gpu_uuid, mig_instance, ts")


def _processes(root: Path) -> pl.DataFrame:
    with store.open_dataset(root) as ds:
        return ds.query("SELECT * FROM processes ORDER BY gpu_uuid, mig_instance, ts")


def _close(a: float | None, b: float, rel: float = 1e-5, abs_: float = 1e-6) -> bool:
    return a is not None and math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def test_week_reproduces_the_fixture_step_averages(prom: tuple[PromServer, list[Gpu]],
                                                   week: tuple[Path, ImportResult]) -> None:
    root, result = week
    _, fleet = prom
    df = _samples(root)
    assert result.sample_rows == df.height == 6 * 7 * 288  # 6 GPUs/slices, every 5-minute step of the week
    assert result.hosts == 3 and result.gpus == 6
    want = expected(fleet, 300)
    checked = 0
    for row in df.iter_rows(named=True):
        e = want[(row["gpu_uuid"], row["mig_instance"], int(row["ts"].timestamp()))]
        assert row["interval_s"] == 300
        sm, engine = e.get("DCGM_FI_PROF_SM_ACTIVE"), e.get("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
        if sm is not None:
            assert _close(row["sm_active"], sm), (row, e)
            assert row["source"] == schema.SOURCE_PROM_DCGM
        elif engine is not None:  # engine-active is not SM activity: its own column, an upper bound (issue 18)
            assert row["sm_active"] is None and _close(row["gr_engine_active"], engine), (row, e)
            assert row["source"] == "prometheus-dcgm-engine"
        else:
            assert row["sm_active"] is None and row["source"] == schema.SOURCE_PROM_DCGM_UTIL
        pairs = [("duty_cycle", "DCGM_FI_DEV_GPU_UTIL", 0.01), ("mem_util", "DCGM_FI_DEV_MEM_COPY_UTIL", 0.01),
                 ("sm_occupancy", "DCGM_FI_PROF_SM_OCCUPANCY", 1),
                 ("tensor_active", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1),
                 ("dram_active", "DCGM_FI_PROF_DRAM_ACTIVE", 1), ("power_w", "DCGM_FI_DEV_POWER_USAGE", 1)]
        if row["mig_instance"] is not None:
            # The MIG parent's power belongs to the GPU, split over its slices (3/7 and 1/7 of 4/7): once.
            share = {1: 0.75, 2: 0.25}[row["mig_instance"]]
            assert _close(row["power_w"], 250.0 * share), row
            pairs = [x for x in pairs if x[0] != "power_w"]
        for col, metric, factor in pairs:
            if metric in e:
                assert _close(row[col], e[metric] * factor), (col, row, e)
            else:
                assert row[col] is None, (col, row)
        # Memory is the last value in the step, MiB -> bytes; total = used + free.
        assert row["mem_used_bytes"] == e["last:DCGM_FI_DEV_FB_USED"] * MIB
        assert row["mem_total_bytes"] == (e["last:DCGM_FI_DEV_FB_USED"] + e["last:DCGM_FI_DEV_FB_FREE"]) * MIB
        checked += 1
    assert checked == df.height


def test_week_known_averages_and_labels(week: tuple[Path, ImportResult]) -> None:
    root, _ = week
    with store.open_dataset(root) as ds:
        got = ds.query("""
            SELECT host, gpu_uuid, mig_instance, any_value(mig_profile) AS profile, any_value(gpu_name) AS name,
                   any_value(gpu_index) AS idx, avg(gpu_fraction) AS frac, avg(sm_active) AS sm,
                   avg(duty_cycle) AS duty, avg(gr_engine_active) AS engine, list(DISTINCT source) AS sources,
                   count(*) AS n
            FROM samples GROUP BY ALL ORDER BY host, gpu_uuid, mig_instance""").rows(named=True)
    by = {(r["gpu_uuid"], r["mig_instance"]): r for r in got}
    # The fixture's schedules: busy 3 of 4 hours at an average 0.5; half of each day at 0.7; ...
    assert by[(UUID_A0, None)]["sm"] == pytest.approx(0.75 * 0.5)
    assert by[(UUID_A0, None)]["duty"] == pytest.approx(0.75 * 0.9)
    assert by[(UUID_A1, None)]["sm"] == pytest.approx(0.5 * 0.7)
    assert by[(UUID_B0, None)]["sm"] is None  # GR_ENGINE_ACTIVE only: engine-active, not SM activity
    assert by[(UUID_B0, None)]["engine"] == pytest.approx((4 * 0.8 + 3 * 0.05) / 7)
    assert by[(UUID_B1, None)]["sm"] is None and by[(UUID_B1, None)]["duty"] == pytest.approx(0.5)
    assert by[(UUID_B1, None)]["sources"] == [schema.SOURCE_PROM_DCGM_UTIL]
    assert by[(UUID_C0, 1)]["sm"] == pytest.approx(0.6 / 3)
    assert by[(UUID_C0, 2)]["sm"] == pytest.approx(0.25)
    # Both Hostname spellings; the MIG slices with their profiles and fractions; no row for the MIG parent.
    assert {r["host"] for r in got} == {"node-a", "node-b", "node-c"}
    assert by[(UUID_C0, 1)]["profile"] == "3g.40gb" and by[(UUID_C0, 1)]["frac"] == pytest.approx(3 / 7)
    assert by[(UUID_C0, 2)]["profile"] == "1g.10gb" and by[(UUID_C0, 2)]["frac"] == pytest.approx(1 / 7)
    assert (UUID_C0, None) not in by
    assert by[(UUID_A1, None)]["idx"] == 1 and by[(UUID_A0, None)]["name"] == "NVIDIA H100 80GB HBM3"
    assert all(r["n"] == 7 * 288 for r in got)


def test_energy_from_the_counter(week: tuple[Path, ImportResult]) -> None:
    root, _ = week
    df = _samples(root).filter(pl.col("gpu_uuid") == UUID_A0)
    # Within steady hours increase() over a step is exactly power x step; over the week within 0.1 %.
    steady = df.filter(pl.col("power_w").shift(1) == pl.col("power_w"))
    assert (steady["energy_j"] - steady["power_w"] * 300).abs().max() < 1e-3 * 500 * 300
    week_j = (0.75 * 500 + 0.25 * 70) * 7 * 86400
    assert df["energy_j"].sum() == pytest.approx(week_j, rel=1e-3)
    assert _samples(root).filter(pl.col("gpu_uuid") == UUID_B0)["energy_j"].is_null().all()


def test_pods_and_jobs_become_process_rows(week: tuple[Path, ImportResult]) -> None:
    root, result = week
    procs = _processes(root)
    assert procs.height == result.process_rows
    assert procs["pid"].is_null().all()
    groups = {(r["gpu_uuid"], r["mig_instance"], r["k8s_pod"], r["k8s_namespace"], r["container"], r["job_id"]): r["n"]
              for r in procs.group_by("gpu_uuid", "mig_instance", "k8s_pod", "k8s_namespace", "container", "job_id")
              .agg(pl.len().alias("n")).iter_rows(named=True)}
    assert groups == {
        (UUID_A1, None, "train-llm-0", "ml", "trainer", None): 7 * 12 * 12,  # plain `pod` labels, busy 12 h/day
        (UUID_B1, None, None, None, None, "4242"): 7 * 12 * 12,  # hpc_job, busy every other hour
        (UUID_C0, 2, "notebook-7", "research", "jupyter", None): 7 * 288,  # exported_pod style
    }  # the exporter's own pod (target labels on the MIG series) is not a workload
    # n_processes: the pods/jobs; without one, >= 256 MiB of framebuffer in use counts as one process.
    samples = _samples(root)
    held = samples.filter(pl.col("n_processes") > 0).group_by("gpu_uuid", "mig_instance").len()
    assert dict(zip(zip(held["gpu_uuid"], held["mig_instance"], strict=True), held["len"], strict=True)) == {
        (UUID_A1, None): 1008, (UUID_B1, None): 1008, (UUID_C0, 2): 2016,  # labelled while busy
        (UUID_A0, None): 2016, (UUID_B0, None): 2016,  # 1000 / 500 MiB held even when idle: phantom use
        (UUID_C0, 1): 672}  # 30000 MiB while busy, 0 otherwise
    assert samples["n_processes"].max() == 1


def test_small_chunks_at_60s_match_the_point_samples(prom: tuple[PromServer, list[Gpu]], tmp_path: Path) -> None:
    """A day at 60 s in 97-point chunks: every minute exactly once, each the one sample in that minute."""
    server, fleet = prom
    day_end = START + timedelta(days=1)
    result = _import(server, tmp_path / "d", START, day_end, 60, max_points=97)
    # 15 chunks x 12 names, +1 query per average (samples per step), +2 for the counter
    assert result.queries == math.ceil(1440 / 97) * 22
    df = _samples(tmp_path / "d")
    assert df.height == 6 * 1440
    assert df.select("gpu_uuid", "mig_instance", "ts").is_unique().all()
    want = expected(fleet, 60)
    for row in df.filter(pl.col("gpu_uuid") == UUID_A0).iter_rows(named=True):
        e = want[(UUID_A0, None, int(row["ts"].timestamp()))]
        assert _close(row["sm_active"], e["DCGM_FI_PROF_SM_ACTIVE"])


def _content(root: Path) -> pl.DataFrame:
    return _samples(root).drop("date").sort("gpu_uuid", "mig_instance", "ts")


def test_reimporting_the_same_window_changes_nothing(prom: tuple[PromServer, list[Gpu]], tmp_path: Path) -> None:
    server, _ = prom
    root = tmp_path / "d"
    first = _import(server, root, START, START + timedelta(days=2), 300)
    before = _content(root)
    procs = _processes(root).height
    again = _import(server, root, START, START + timedelta(days=2), 300)
    assert again.replaced_rows == first.sample_rows
    assert _content(root).equals(before)
    assert _processes(root).height == procs


def test_overlapping_windows_do_not_duplicate_rows(prom: tuple[PromServer, list[Gpu]], tmp_path: Path) -> None:
    server, _ = prom
    root = tmp_path / "d"
    # Unaligned bounds: the window snaps to the step grid, so the rows line up.
    _import(server, root, START, START + timedelta(days=3, minutes=2), 300)
    _import(server, root, START + timedelta(days=2, seconds=17), START + timedelta(days=4), 300)
    df = _samples(root)
    assert df.select("gpu_uuid", "mig_instance", "ts").is_unique().all()
    assert df.height == 6 * 4 * 288
    assert df.filter(pl.col("gpu_uuid") == UUID_A0)["sm_active"].mean() == pytest.approx(0.375)
    procs = _processes(root)
    assert procs.select("gpu_uuid", "mig_instance", "ts", "k8s_pod", "job_id").is_unique().all()


def test_overlap_after_compaction_keeps_other_sources(prom: tuple[PromServer, list[Gpu]], tmp_path: Path) -> None:
    """Compaction merges the importer's file with an agent's file; a later overlapping import still
    replaces only the imported rows."""
    server, _ = prom
    root = tmp_path / "d"
    agent_row = {"ts": [START + timedelta(hours=5)], "interval_s": [10.0], "host": ["node-a"],
                 "gpu_uuid": ["GPU-agent"], "gpu_fraction": [1.0], "sm_active": [0.9], "n_processes": [1],
                 "source": [schema.SOURCE_NVML_GPM]}
    store.write_table(root, schema.SAMPLES, pl.DataFrame(agent_row))
    _import(server, root, START, START + timedelta(days=1), 300)
    stats = store.compact(root)
    assert stats.partitions >= 1
    _import(server, root, START + timedelta(hours=12), START + timedelta(days=1, hours=6), 300)
    df = _samples(root)
    assert df.select("gpu_uuid", "mig_instance", "ts").is_unique().all()
    assert df.filter(pl.col("source") == schema.SOURCE_NVML_GPM).height == 1
    assert df.filter(pl.col("gpu_uuid") == UUID_A0).height == 288 + 72


def test_reimport_then_push_never_counts_a_row_twice_on_the_target(prom: tuple[PromServer, list[Gpu]],
                                                                  tmp_path: Path) -> None:
    """A re-import replaces the importer's file with one under a new name: it leaves a compaction record, so
    push removes the replaced file from the target (and the target's readers hide it until then)."""
    from gpuaudit import push

    server, _ = prom
    root, central = tmp_path / "d", tmp_path / "central"
    _import(server, root, START, START + timedelta(days=1, hours=12), 300)
    push.push(root, central)
    first_push = {p.relative_to(central): p.read_bytes() for p in central.rglob("*.parquet")}
    _import(server, root, START + timedelta(days=1), START + timedelta(days=2), 300)
    records = [json.loads(p.read_text()) for p in root.rglob(f"{store.JOURNAL_PREFIX}*.json")]
    assert records and all(r["new"].startswith("prometheus-") and r["old"] for r in records)
    stats = push.push(root, central)
    assert stats.pruned > 0
    day2 = "SELECT count(*) FROM samples WHERE date = DATE '2026-01-06'"
    with store.open_dataset(root) as node, store.open_dataset(central) as target:
        assert node.fetchall(day2) == target.fetchall(day2) == [(6 * 288,)]
    assert _content(central).equals(_content(root)) and _processes(central).equals(_processes(root))
    for rel, content in first_push.items():  # as if the prune had not happened: the record still hides them
        (central / rel).write_bytes(content)
    assert _content(central).equals(_content(root))


def test_reimport_that_replaces_every_process_row_leaves_a_record_too(prom: tuple[PromServer, list[Gpu]],
                                                                     tmp_path: Path) -> None:
    """No process row left in a partition: an empty importer file stands in, so the record has a merged file
    and the target drops the replaced rows as well."""
    from gpuaudit import push

    server, _ = prom
    root, central = tmp_path / "d", tmp_path / "central"
    _import(server, root, START, START + timedelta(days=1), 300)
    push.push(root, central)
    assert _processes(central).height > 0
    _import(server, root, START, START + timedelta(days=1), 300, labels=["k8s_pod=none", "job_id=none"])
    push.push(root, central)
    assert _processes(root).height == _processes(central).height == 0
    assert _content(central).equals(_content(root))


def test_metric_label_and_selector_overrides(prom: tuple[PromServer, list[Gpu]], tmp_path: Path) -> None:
    server, _ = prom
    day = START + timedelta(days=1)
    # Turning SM activity off leaves the duty cycle: every row an upper bound.
    r = _import(server, tmp_path / "a", START, day, 300, metrics=["sm_active=", "gr_engine_active="])
    assert set(r.sources) == {schema.SOURCE_PROM_DCGM_UTIL}
    # Only the older-exporter hosts (capital Hostname label), by selector.
    r = _import(server, tmp_path / "b", START, day, 300, selector='Hostname=~"node-.*"')
    assert {h for h in _samples(tmp_path / "b")["host"]} == {"node-a", "node-c"}
    # With no exporter-pod pattern, the ServiceMonitor's target pod is taken for a workload.
    _import(server, tmp_path / "e", START, day, 300, exporter_pod="")
    pods = set(_processes(tmp_path / "e").filter(pl.col("mig_instance") == 1)["k8s_pod"])
    assert pods == {"nvidia-dcgm-exporter-7xk2p"}
    # Host from another label.
    _import(server, tmp_path / "c", START, day, 300, labels=["host=device"])
    assert set(_samples(tmp_path / "c")["host"]) == {"nvidia0", "nvidia1"}


def test_cli_import_then_analyze(prom: tuple[PromServer, list[Gpu]], tmp_path: Path) -> None:
    server, _ = prom
    data = tmp_path / "d"
    r = run_cli("import", "prometheus", "--url", server.url, "--start", "2026-01-05", "--end", "2026-01-12",
                "--step", "5m", "--data", str(data))  # progress bar on (stderr is not a terminal)
    assert r.returncode == 0, r.stderr
    assert "imported 12096 sample rows (6 GPUs/MIG slices on 3 hosts)" in r.stdout
    assert "upper bound" in r.stderr  # node-b's GPU 1 has the duty cycle only
    from gpuaudit.analysis import analyze

    result = analyze(data)
    u = result.utilization
    # Σ sm_active x time x gpu_fraction over the week, node-b's GPU 1 counted by duty cycle (upper bound).
    real_h = 168 * (0.375 + 0.35 + (4 * 0.8 + 3 * 0.05) / 7 + 0.5 + 0.2 * 3 / 7 + 0.25 / 7)
    observed_h = 168 * (4 + 3 / 7 + 1 / 7)
    assert u.observed_gpu_hours.value == pytest.approx(observed_h, rel=1e-4)
    assert u.real_gpu_hours.value == pytest.approx(real_h, rel=1e-4)
    assert u.real_utilization.value == pytest.approx(real_h / observed_h, rel=1e-4)
    assert u.real_is_upper_bound
    # Runtime (held) hours: pods, jobs, or memory in use (see test_pods_and_jobs_become_process_rows).
    held_h = 168 * (1 + 0.5 + 1 + 0.5 + 1 / 3 * 3 / 7 + 1 / 7)
    assert u.runtime_gpu_hours.value == pytest.approx(held_h, rel=1e-4)
