"""`gpuaudit import prometheus` round-trips the agent's own endpoint (`agent run --metrics-listen`).

A real agent (the real sampler over the fake NVML) writes its Parquet and serves the same intervals; a real
Prometheus on 127.0.0.1 scrapes it twice a second. Once Prometheus holds enough scrapes (its own count, asked
through the API) the agent stops, `gpuaudit import prometheus` copies the window into a second dataset, and
the per-GPU means of both datasets over the same window agree: 0.01 on fractions, 1 % on power and bytes.
Both naming modes round-trip: the agent's own `gpuaudit_*` names and `--metrics-names dcgm`, and name discovery
finds a series that began after the last point of a coarse grid (a window shorter than 5 minutes).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from tests.helpers import require_binary, run_cli
from tests.prom_helpers import PromServer, start_prometheus
from tests.test_metrics_prometheus import HOW, TRAIN_UID, _start_agent, _stop

pytestmark = pytest.mark.prometheus

SCRAPES = 10  # at 0.5 s: five seconds of history
FRACTIONS = ("sm_active", "sm_occupancy", "tensor_active", "dram_active", "duty_cycle")
AMOUNTS = ("power_w", "mem_used_bytes")


def _scrapes(server: PromServer) -> int:
    q = urllib.parse.urlencode({"query": 'count_over_time(up{job="agent"}[5m])'})
    with urllib.request.urlopen(f"{server.url}/api/v1/query?{q}", timeout=30) as r:
        res = json.load(r)["data"]["result"]
    return int(float(res[0]["value"][1])) if res else 0


def _wait_scrapes(server: PromServer, n: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    pace = threading.Event()
    while _scrapes(server) < n:
        assert time.monotonic() < deadline, f"fewer than {n} scrapes: {server.log.read_text()[-2000:]}"
        pace.wait(0.2)  # pace the polling of an external process; not a wait for a result


def _means(root: Path, start: datetime, end: datetime) -> dict[str, dict[str, float]]:
    """gpu_uuid -> column -> mean over the rows whose interval ends in (start, end]."""
    cols = ", ".join(f"avg({c}) AS {c}" for c in (*FRACTIONS, *AMOUNTS))
    con = duckdb.connect()
    rows = con.execute(
        f"SELECT gpu_uuid, {cols} FROM read_parquet(?, hive_partitioning = true, union_by_name = true) "
        "WHERE ts > ? AND ts <= ? GROUP BY gpu_uuid",
        [str(root / "gpu_samples" / "**" / "*.parquet"), start, end]).fetchall()
    names = [d[0] for d in con.description]
    return {r[0]: dict(zip(names[1:], r[1:], strict=True)) for r in rows}


@pytest.mark.parametrize("names", ["gpuaudit", "dcgm"])
def test_import_round_trips_the_agent_metrics(tmp_path: Path, names: str) -> None:
    """28 (import): the importer reads the agent's own names (detected, no --exporter) and its dcgm names;
    the per-GPU means equal those of the agent's Parquet over the same window."""
    prometheus = require_binary("prometheus", HOW)
    agent = _start_agent(tmp_path / "agent", names=names)
    port = agent.agent.metrics_server.port
    config = ("global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\n"
              f"scrape_configs:\n  - job_name: agent\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n")
    (tmp_path / "prom").mkdir()
    start = datetime.now(UTC).replace(microsecond=0)
    server = start_prometheus(prometheus, tmp_path / "prom" / "tsdb", tmp_path / "prom", config_text=config)
    try:
        _wait_scrapes(server, SCRAPES)
        _stop(agent)
        end = datetime.now(UTC).replace(microsecond=0)
        r = run_cli("import", "prometheus", "--url", server.url, "--start", start.isoformat(), "--end",
                    end.isoformat(), "--step", "1s", "--quiet", "--data", str(tmp_path / "imported"))
    finally:
        server.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"exporter {names} (" in r.stdout and "detected" in r.stdout, r.stdout
    agent_means = _means(tmp_path / "agent", start, end)
    imported = _means(tmp_path / "imported", start, end)
    assert len(agent_means) == 4 and set(imported) == set(agent_means), (imported, r.stdout)
    for uuid, a in agent_means.items():
        got = imported[uuid]
        for c in FRACTIONS:
            assert got[c] == pytest.approx(a[c], abs=0.01), (uuid, c, got, a)
        for c in AMOUNTS:
            assert got[c] == pytest.approx(a[c], rel=0.01), (uuid, c, got, a)
    if names == "dcgm":  # the pod's UID rides on dcgm-exporter's pod_uid label into the process rows
        con = duckdb.connect()
        pods = con.execute(
            "SELECT DISTINCT k8s_namespace, k8s_pod, pod_uid FROM read_parquet(?, hive_partitioning = true, "
            "union_by_name = true)", [str(tmp_path / "imported" / "gpu_processes" / "**" / "*.parquet")]).fetchall()
        assert pods == [("ml", "train-0", TRAIN_UID)], pods


def test_every_preset_is_an_import_source() -> None:
    """28 (import): the `gpuaudit` preset's rows carry sources the store knows (prometheus-gpuaudit[-engine|-util]:
    its duty-cycle-only rows must have sm_active NULL like every other exporter's)."""
    from gpuaudit import schema
    from gpuaudit.importer.prometheus.presets import PRESETS

    assert set(PRESETS) == set(schema.IMPORT_EXPORTERS)
    assert "prometheus-gpuaudit-util" in schema.DUTY_CYCLE_ONLY_SOURCES
