"""Importer throughput from a real local Prometheus (issue 7, item 4).

A week of dcgm-exporter-shaped history (tests/prom_helpers.py; `quick`: its 6 GPUs/slices, full: 4 copies
of it, 24) is backfilled with promtool and served by a real `prometheus`. Measured side by side:
- the importer: `import_prometheus` at 60 s steps into a fresh dataset (queries, conversion, Parquet);
- the baseline: the same PromQL range queries over the same chunks with plain `requests` + JSON decode,
  i.e. what the server and the wire cost before the importer does anything;
- a re-import of the same window (the idempotent replace path).
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import sys
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

STEP_S = 60


def _fleet(copies: int) -> list:  # type: ignore[type-arg]
    from tests.prom_helpers import build_fleet

    base = build_fleet()
    if copies == 1:
        return base
    return [dataclasses.replace(g, host=f"{g.host}-{c}", uuid=f"{g.uuid[:-3]}{c:03d}")
            for c in range(copies) for g in base]


def _raw_fetch(url: str, start, end) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    """Seconds and points for the importer's queries with plain requests + JSON decode."""
    import requests
    from tests.prom_helpers import build_fleet

    from gpuaudit.importer.promclient import chunks
    from gpuaudit.importer.prometheus import plan_queries
    from gpuaudit.importer.prometheus.mapping import build_mapping

    present = {m for g in build_fleet() for m in g.metrics} | {"DCGM_FI_DEV_POWER_USAGE"}  # what the server holds
    queries = [q for *_, q in plan_queries(build_mapping(), STEP_S, present)]
    points = 0
    t0 = time.perf_counter()
    with requests.Session() as s:
        for first, last in chunks(start, end, STEP_S):
            for q in queries:
                r = s.get(f"{url}/api/v1/query_range", params={"query": q, "start": first.timestamp(),
                                                               "end": last.timestamp(), "step": STEP_S},
                          timeout=120)
                r.raise_for_status()
                points += sum(len(x["values"]) for x in r.json()["data"]["result"])
    return time.perf_counter() - t0, points


def run(work: Path, quick: bool) -> list[dict]:
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not (prometheus and promtool):
        return [{"figure": "import rows per second", "value": math.nan, "unit": "rows/s", "baseline": None,
                 "baseline_value": None, "ratio": None, "target": None, "met": None,
                 "note": "skipped: install Prometheus (apt-get install --no-install-recommends prometheus)"}]
    from tests.prom_helpers import START, backfill, start_prometheus, write_openmetrics

    from gpuaudit.importer.promclient import transport
    from gpuaudit.importer.prometheus import import_prometheus
    from gpuaudit.importer.prometheus.mapping import build_mapping

    copies = 1 if quick else 4
    fleet = _fleet(copies)
    om = work / "fleet.om.txt"
    t0 = time.perf_counter()
    samples = write_openmetrics(om, fleet)
    backfill(promtool, om, work / "tsdb")
    om.unlink()
    setup_s = time.perf_counter() - t0
    server = start_prometheus(prometheus, work / "tsdb", work)
    end = START + timedelta(days=7)
    try:
        _raw_fetch(server.url, START, START + timedelta(hours=6))  # warm the server's caches for both
        raw_s, points = _raw_fetch(server.url, START, end)
        root = work / "data"
        t0 = time.perf_counter()
        result = import_prometheus(root, transport(server.url), build_mapping(), START, end, STEP_S)
        import_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = import_prometheus(root, transport(server.url), build_mapping(), START, end, STEP_S)
        reimport_s = time.perf_counter() - t0
    finally:
        server.stop()
    rows = result.sample_rows
    rate, raw_rate = rows / import_s, rows / raw_s
    size = f"{len(fleet)} GPUs/MIG slices, 7 days at {STEP_S} s: {rows:,} sample rows from {points:,} points"
    return [
        {"figure": "import rows per second", "value": rate, "unit": "rows/s",
         "baseline": "raw HTTP range queries + JSON decode of the same series", "baseline_value": raw_rate,
         "ratio": rate / raw_rate,
         "target": ">= 10,000 rows/s (30 days x 100 GPUs at 60 s in < 8 min)", "met": rate >= 10_000,
         "note": f"{size}; import {import_s:.1f} s vs raw fetch {raw_s:.1f} s ({result.queries} queries); "
                 f"fixture backfill {setup_s:.1f} s for {samples:,} samples"},
        {"figure": "re-import of the same window (rows per second)", "value": rows / reimport_s,
         "unit": "rows/s", "baseline": "first import", "baseline_value": rate, "ratio": (rows / reimport_s) / rate,
         "target": "re-import replaces, never duplicates", "met": again.replaced_rows == rows,
         "note": f"{again.replaced_rows:,} rows replaced, {again.sample_rows:,} written"},
    ]
