"""Synthetic fleet generator: speed, memory and bytes on disk (issue 2 targets; issue 7 item 3).

Measured side by side in one run:
- generation: exactly the command of the target, run as a user runs it (console script, default start and
  workers): `gpuaudit simulate --scenario mixed --gpus 128 --days 90 --interval 10 --data <tmp> --seed 1`
  (99.5 M sample rows plus their process rows; `quick`: 16 GPUs x 3 days), timed from outside (wall time,
  rows/s, CPU seconds and peak RSS of it and its workers); baseline: the same rows produced one timestamp
  at a time by `LoadModel.at` (a per-row Python generator, values only, nothing written), timed on a slice
  and scaled to the same row count;
- bytes per gpu_samples row for every scenario at the agent's 10 s interval; baselines: the same rows as
  plain Parquet (a naive export: arrival order, doubles, DuckDB's default snappy) measured here, and
  Prometheus' ~1.3 B per sample x 12 signals = ~16 B/row, a quoted constant (not measured).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
START = "2026-01-05"  # a Monday
PROMETHEUS_B_PER_ROW = 16.0  # quoted: ~1.3 B/sample (Prometheus TSDB docs) x 12 signals per row
TARGET_S = 60.0
TARGET_B = 8.0

_CHILD = """
import json, resource, sys, time
from datetime import datetime, UTC
from gpuaudit.sim.bulk import simulate
a = json.loads(sys.argv[1])
t0 = time.perf_counter()
s = simulate(a["root"], a["scenario"], a["gpus"], a["days"], a["interval"], a["seed"],
             start=datetime.fromisoformat(a["start"]).replace(tzinfo=UTC))
wall = time.perf_counter() - t0
rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(json.dumps({"wall": wall, "rows": s.rows, "process_rows": s.process_rows, "bytes": s.sample_bytes,
                  "process_bytes": s.process_bytes, "files": s.files, "rss_kb": rss,
                  "real": s.real_util, "runtime": s.runtime_util}))
"""


# Runs a command and reports its wall time, CPU time and peak RSS (of it and the workers it waited for).
_TIMED = """
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
r = subprocess.run(json.loads(sys.argv[1]), capture_output=True, text=True, check=False)
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": wall, "rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr[-2000:],
                  "rss_kb": ru.ru_maxrss, "cpu_s": ru.ru_utime + ru.ru_stime}))
"""
FLEET_SEED = 1


def _fleet_command(root: Path, gpus: int, days: float) -> list[str]:
    """The target's command line, with the checkout's console script (or `python -m gpuaudit`)."""
    exe = Path(sys.executable).parent / "gpuaudit"
    head = [str(exe)] if exe.is_file() else [sys.executable, "-m", "gpuaudit"]
    return [*head, "simulate", "--scenario", "mixed", "--gpus", str(gpus), "--days", f"{days:g}", "--interval", "10",
            "--data", str(root), "--seed", str(FLEET_SEED)]


def timed(cmd: list[str]) -> dict[str, Any]:
    """Wall time, CPU time and peak RSS of `cmd` (and the children it waited for), from a small wrapper process."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    r = subprocess.run([sys.executable, "-c", _TIMED, json.dumps(cmd)], capture_output=True, text=True, env=env,
                       check=False)
    if r.returncode != 0:
        raise RuntimeError(f"timing wrapper failed: {r.stderr[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if out["rc"] != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out['stderr']}")
    return out


def _simulate_cli(root: Path, gpus: int, days: float) -> dict:
    """Run the fleet command as a user does; sizes and truths come from the dataset and simulation.json."""
    cmd = _fleet_command(root, gpus, days)
    out = timed(cmd)
    meta = json.loads((root / "simulation.json").read_text())
    files = {t: list((root / t).rglob("*.parquet")) for t in ("gpu_samples", "gpu_processes")}
    return {"wall": out["wall"], "cpu_s": out["cpu_s"], "rss_kb": out["rss_kb"], "rows": meta["rows"],
            "process_rows": meta["process_rows"], "files": sum(len(f) for f in files.values()),
            "bytes": sum(f.stat().st_size for f in files["gpu_samples"]),
            "process_bytes": sum(f.stat().st_size for f in files["gpu_processes"]),
            "real": meta["real_util"], "runtime": meta["runtime_util"], "command": " ".join(cmd[1:])}


def _simulate(root: Path, scenario: str, gpus: int, days: float, interval: float = 10.0) -> dict:
    args = {"root": str(root), "scenario": scenario, "gpus": gpus, "days": days, "interval": interval,
            "seed": 0, "start": START}
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(args)], capture_output=True, text=True, env=env,
                       check=False)
    if r.returncode != 0:
        raise RuntimeError(f"simulate failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _per_row_baseline(scenario: str, gpus: int, days: float, interval: float, steps: int) -> float:
    """Rows/s of a per-timestamp Python generator (LoadModel.at): values only, nothing written. The same
    fleet as the timed command: its seed and default start."""
    from gpuaudit.sim.loadmodel import load_model
    from gpuaudit.sim.workload import default_start

    model = load_model(scenario, gpus, seed=FLEET_SEED, start=default_start(days), days=days)
    t0 = time.perf_counter()
    base = model.start_epoch
    for k in range(steps):
        model.at(base + k * interval)
    return steps * gpus / (time.perf_counter() - t0)


def _naive_parquet_bytes(root: Path, out: Path) -> int:
    """The same gpu_samples rows as a naive export would write them: in arrival order (all GPUs at t, then
    t + 10 s), doubles for the measurements, DuckDB's default Parquet settings (snappy)."""
    from gpuaudit import schema
    from gpuaudit.store import open_dataset

    cols = []
    for c in schema.SAMPLE_COLUMNS:
        name = schema.quote_ident(c.name)
        cols.append(f"CAST({name} AS DOUBLE) AS {name}" if c.sql_type == "FLOAT" else name)
    with open_dataset(root) as ds:
        ds.con.execute(f"COPY (SELECT {', '.join(cols)} FROM samples ORDER BY ts, host, gpu_index) TO '{out}' "
                       "(FORMAT parquet)")
    return out.stat().st_size


def _unquantized_bytes(root: Path, out: Path) -> int:
    """The same rows as a producer that keeps float noise beyond the source's precision would store them
    (sub-quantum jitter on each measurement), with the product's own writer settings: shows what
    quantizing to the source's precision is worth."""
    from gpuaudit import schema
    from gpuaudit.store import open_dataset
    from gpuaudit.store.writer import ZSTD_LEVEL

    jitter = {"sm_active": 0.001, "sm_occupancy": 0.001, "tensor_active": 0.001, "dram_active": 0.001,
              "duty_cycle": 0.01, "mem_util": 0.01, "power_w": 1.0}
    cols = []
    for c in schema.stored_columns(schema.SAMPLES):
        name = schema.quote_ident(c.name)
        if c.name in jitter:
            q = jitter[c.name]
            expr = f"CASE WHEN {name} > 0 THEN greatest({name} + (random() - 0.5) * {q}, 0) ELSE {name} END"
            if c.name != "power_w":
                expr = f"least({expr}, 1)"
            cols.append(f"CAST({expr} AS FLOAT) AS {name}")
        elif c.name == "energy_j":
            cols.append("CAST(NULL AS FLOAT) AS energy_j")  # filled below from the jittered power
        else:
            cols.append(name)
    with open_dataset(root) as ds:
        ds.con.execute("SELECT setseed(0.5)")
        inner = f"SELECT {', '.join(cols)} FROM samples"
        ds.con.execute(
            f"COPY (SELECT * REPLACE (CAST(power_w * interval_s AS FLOAT) AS energy_j) FROM ({inner}) "
            f"ORDER BY gpu_uuid, ts) TO '{out}' (FORMAT parquet, COMPRESSION zstd, "
            f"COMPRESSION_LEVEL {ZSTD_LEVEL}, PARQUET_VERSION v2)")
    return out.stat().st_size


def _fig(figure: str, value: float, unit: str, baseline: str | None = None, baseline_value: float | None = None,
         ratio: float | None = None, target: str | None = None, met: bool | None = None, note: str = "") -> dict:
    return {"figure": figure, "value": value, "unit": unit, "baseline": baseline, "baseline_value": baseline_value,
            "ratio": ratio, "target": target, "met": met, "note": note}


def run(work: Path, quick: bool) -> list[dict]:
    from gpuaudit.sim.workload import SCENARIOS

    figures = []
    gpus, days = (16, 3) if quick else (128, 90)
    size = f"{gpus} GPUs x {days} days at 10 s"
    full_rows = 128 * 90 * 8640
    r = _simulate_cli(work / "fleet", gpus, days)
    rate = r["rows"] / r["wall"]
    base_rate = _per_row_baseline("mixed", gpus, days, 10.0, 200 if quick else 400)
    base_s = r["rows"] / base_rate
    extrapolated = full_rows / rate
    figures.append(_fig(
        f"simulate {size} (mixed): wall time", r["wall"], "s", "per-row Python generator (LoadModel.at), "
        "values only", base_s, base_s / r["wall"], f"<= {TARGET_S:.0f} s for 128 GPUs x 90 days",
        None if quick else r["wall"] <= TARGET_S,
        f"`gpuaudit {r['command'].replace(str(work / 'fleet'), '<tmp>')}`: {r['rows']:,} sample + "
        f"{r['process_rows']:,} process rows, {r['files']} files, {r['cpu_s']:.0f} CPU-s; "
        + (f"at this rate the full size takes ~{extrapolated:.0f} s" if quick else f"{os.cpu_count()} CPUs")))
    figures.append(_fig(
        f"simulate {size}: sample rows per second", rate, "rows/s", "per-row Python generator", base_rate,
        rate / base_rate, f">= {full_rows / TARGET_S:,.0f} rows/s", None if quick else rate >= full_rows / TARGET_S,
        "both tables written through store.write_table (zstd, sorted, atomic)"))
    figures.append(_fig(
        f"simulate {size}: peak memory (RSS)", r["rss_kb"] / 1024, "MiB", None, None, None,
        "a few GB at most", r["rss_kb"] / 1024 <= 4096, "max of the simulate process and its workers"))
    figures.append(_fig(
        f"gpu_samples bytes per row, mixed, {size}", r["bytes"] / r["rows"], "B/row",
        "Prometheus (quoted ~1.3 B/sample x 12 signals)", PROMETHEUS_B_PER_ROW,
        PROMETHEUS_B_PER_ROW / (r["bytes"] / r["rows"]), f"<= {TARGET_B:.0f} B/row", r["bytes"] / r["rows"] <= TARGET_B,
        "ratio = baseline / value"))
    figures.append(_fig(
        f"gpu_processes bytes per row, mixed, {size}", r["process_bytes"] / max(1, r["process_rows"]), "B/row",
        note=f"{r['process_rows']:,} rows: one per process per held GPU-interval"))

    # Bytes per row for every scenario at the agent's interval, with a naive export of the same rows beside it.
    sgpus, sdays = (16, 1) if quick else (64, 7)
    for name in SCENARIOS:
        root = work / f"bytes-{name}"
        s = _simulate(root, name, sgpus, sdays)
        naive = _naive_parquet_bytes(root, work / f"naive-{name}.parquet")
        bpr = s["bytes"] / s["rows"]
        figures.append(_fig(
            f"gpu_samples bytes per row, {name} ({sgpus} GPUs x {sdays} days at 10 s)", bpr, "B/row",
            "same rows, naive Parquet (arrival order, doubles, snappy)", naive / s["rows"], naive / s["bytes"],
            f"<= {TARGET_B:.0f} B/row", bpr <= TARGET_B,
            f"Prometheus quoted ~{PROMETHEUS_B_PER_ROW:.0f} B/row; true R/W {s['runtime']:.0%}, S/W {s['real']:.0%}"))
        if name == "mixed":
            raw = _unquantized_bytes(root, work / "unquantized.parquet")
            figures.append(_fig(
                f"gpu_samples bytes per row, mixed, quantized vs not ({sgpus} GPUs x {sdays} days)", bpr, "B/row",
                "same rows keeping sub-precision float noise, same writer (zstd, sorted, v2)", raw / s["rows"],
                raw / s["bytes"], None, None, "what quantizing to the source's precision saves"))
    return figures


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for f in run(Path(d), quick="--full" not in sys.argv):
            print(f)
