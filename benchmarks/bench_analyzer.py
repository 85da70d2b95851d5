"""Analyzer speed and memory (issue 7, item 1), measured side by side on one simulated dataset.

- the analyzer: `gpuaudit.analysis.analyze` end to end (stage 1 SQL rollups + stage 2, bootstrap and
  sensitivity included), and stage 1 alone;
- the floor: opening the dataset and ONE DuckDB GROUP BY (per GPU per hour) reading the same columns —
  the least any analysis of these rows can cost;
- a straightforward pandas implementation of the headline figures (real and runtime utilization per GPU,
  hour-of-week, the demand series), cross-checked against the analyzer's numbers;
- peak RSS of each (a fresh child process per measurement), and the analyzer's growth over 3 sizes.

- the full `gpuaudit report` (all formats: analysis, charts, HTML, Markdown, JSON) against the floor.

`quick`: 64 GPUs of the `mixed` scenario at 60 s for 3.5 / 7 / 14 days (0.3-1.3 M rows).
Full (issue 7): 128 GPUs at 10 s for 9 / 27 / 90 days (10 M, 30 M, 100 M rows, written by `simulate`);
pandas runs on the two smaller sizes (at 100 M rows its object-string columns alone need > 10 GB).
"""

from __future__ import annotations

import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))

QUICK_SIZES = ((64, 3.5), (64, 7.0), (64, 14.0))
QUICK_INTERVAL_S = 60.0
FULL_SIZES = ((128, 9.0), (128, 27.0), (128, 90.0))
FULL_INTERVAL_S = 10.0
PANDAS_MAX_ROWS = 35_000_000  # above this the pandas baseline needs more memory than this machine has

FLOOR_SQL = """
SELECT gpu_uuid, mig_instance, floor(epoch(ts) / 3600) AS hour,
       sum(interval_s * gpu_fraction), sum(sm_active * interval_s * gpu_fraction),
       sum(duty_cycle * interval_s * gpu_fraction), sum(CASE WHEN n_processes > 0 THEN interval_s END),
       sum(energy_j), max(mem_used_bytes), max(mem_total_bytes), count(*)
FROM samples GROUP BY ALL
"""
FLOOR_PROCESSES_SQL = """
SELECT host, gpu_uuid, mig_instance, floor(epoch(ts) / 3600) AS hour, "user", job_id, k8s_namespace, k8s_pod,
       count(*)
FROM processes GROUP BY ALL
"""


# ----------------------------------------------------------------------------------------- child side


def _analyze(root: str) -> dict[str, Any]:
    from gpuaudit.analysis import analyze

    r = analyze(root)
    return {"real": r.utilization.real_utilization.value, "runtime": r.utilization.runtime_utilization.value}


def _report(root: str) -> dict[str, Any]:
    import tempfile

    from gpuaudit.flows import report_dataset

    with tempfile.TemporaryDirectory() as out:
        report_dataset(Path(root), Path(out), formats="html,md,json", quiet=True)
        written = sorted(p.name for p in Path(out).iterdir())
        real = json.loads((Path(out) / "report.json").read_text())["utilization"]["real_utilization"]["value"]
    return {"real": real, "files": written}


def _stage1(root: str) -> dict[str, Any]:
    from gpuaudit.analysis.stage1.rollup import load_rollups

    roll = load_rollups(root)
    return {"rows": roll.gpu_hours.height}


def _floor(root: str) -> dict[str, Any]:
    """One GROUP BY pass over each table the report reads, over the same columns."""
    from gpuaudit.store import open_dataset

    with open_dataset(root) as ds:
        return {"rows": ds.query(FLOOR_SQL).height + ds.query(FLOOR_PROCESSES_SQL).height}


def _floor_samples(root: str) -> dict[str, Any]:
    from gpuaudit.store import open_dataset

    with open_dataset(root) as ds:
        return {"rows": ds.query(FLOOR_SQL).height}


def _pandas(root: str) -> dict[str, Any]:
    import pandas as pd

    cols = ["ts", "interval_s", "gpu_uuid", "mig_instance", "gpu_fraction", "sm_active", "duty_cycle",
            "n_processes", "source"]
    df = pd.read_parquet(Path(root) / "gpu_samples", columns=cols)
    w = df["interval_s"] * df["gpu_fraction"]
    fallback = df["source"].isin(["nvml", "prometheus-dcgm-util"]) | df["sm_active"].isna()
    sm = df["sm_active"].where(~fallback, df["duty_cycle"])
    df = pd.DataFrame({
        "gpu": df["gpu_uuid"].astype(str) + "/" + df["mig_instance"].fillna(-1).astype(int).astype(str),
        "end_s": df["ts"].astype("int64") / 1e6 if df["ts"].dtype.unit == "us" else df["ts"].astype("int64") / 1e9,
        "w": w, "r": w * (df["n_processes"] > 0), "s": sm.fillna(0) * w,
    })
    per_gpu = df.groupby("gpu")[["w", "r", "s"]].sum()
    per_gpu["real"] = per_gpu["s"] / per_gpu["w"]
    per_gpu["runtime"] = per_gpu["r"] / per_gpu["w"]
    when = pd.to_datetime(df["end_s"] - 0.001, unit="s", utc=True)
    how = df.groupby([when.dt.dayofweek, when.dt.hour])[["w", "r", "s"]].sum()
    bucket = ((df["end_s"] - 0.001) // 300) * 300
    demand = df.groupby(bucket)[["r", "s"]].sum() / 300
    return {"real": float(df["s"].sum() / df["w"].sum()), "runtime": float(df["r"].sum() / df["w"].sum()),
            "gpus": len(per_gpu), "cells": len(how), "buckets": len(demand)}


MODES = {"analyze": _analyze, "report": _report, "stage1": _stage1, "floor": _floor,
         "floor_samples": _floor_samples, "pandas": _pandas}


# Modules each mode needs, imported before the clock starts: the figures time work, not imports.
PRELOAD = {
    "analyze": ("gpuaudit.analysis.pipeline", "numpy", "polars", "duckdb"),
    "report": ("gpuaudit.flows", "gpuaudit.report.render", "gpuaudit.report.charts",
               "gpuaudit.analysis.pipeline", "matplotlib.pyplot", "numpy", "polars", "duckdb"),
    "stage1": ("gpuaudit.analysis.stage1.rollup", "polars", "duckdb"),
    "floor": ("gpuaudit.store", "polars", "duckdb"),
    "floor_samples": ("gpuaudit.store", "polars", "duckdb"),
    "pandas": ("pandas", "pyarrow.parquet"),
}


def _hwm_mb() -> float:
    """Peak RSS of this process since exec (VmHWM). Not ru_maxrss: Linux carries that over from the
    parent across fork and exec, so a child of a big benchmark process would report the parent's peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(mode: str, root: str) -> None:
    import importlib

    for name in PRELOAD[mode]:
        importlib.import_module(name)
    t0 = time.perf_counter()
    out = MODES[mode](root)
    seconds = time.perf_counter() - t0
    rss_mb = _hwm_mb()
    print(json.dumps({"seconds": seconds, "rss_mb": rss_mb, **out}))


# ---------------------------------------------------------------------------------------- parent side


def measure(mode: str, root: Path, repeats: int) -> dict[str, Any]:
    """Best of `repeats` fresh child processes (timing excludes interpreter start and imports that
    happen before the work; peak RSS is the child's whole life)."""
    best: dict[str, Any] | None = None
    for _ in range(repeats):
        proc = subprocess.run([sys.executable, __file__, "--child", mode, str(root)], capture_output=True,
                              text=True, check=True, cwd=REPO)
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        if best is None or got["seconds"] < best["seconds"]:
            best = {**got, "rss_mb": max(got["rss_mb"], best["rss_mb"] if best else 0)}
    assert best is not None
    return best


def _fig(figure: str, value: float, unit: str, baseline: str | None = None, baseline_value: float | None = None,
         target: str | None = None, met: bool | None = None, note: str = "") -> dict[str, Any]:
    ratio = value / baseline_value if baseline_value else None
    return {"figure": figure, "value": value, "unit": unit, "baseline": baseline, "baseline_value": baseline_value,
            "ratio": ratio, "target": target, "met": met, "note": note}


def run(work: Path, quick: bool) -> list[dict[str, Any]]:
    from gpuaudit.sim.bulk import simulate

    sizes = QUICK_SIZES if quick else FULL_SIZES
    interval_s = QUICK_INTERVAL_S if quick else FULL_INTERVAL_S
    repeats = 2
    figures: list[dict[str, Any]] = []
    growth: list[tuple[int, float]] = []
    for gpus, days in sizes:
        root = work / f"mixed-{gpus}x{days:g}d"
        t_sim = time.perf_counter()
        s = simulate(root, "mixed", gpus, days, interval_s, seed=1)
        t_sim = time.perf_counter() - t_sim
        rows = s.rows
        label = f"{rows / 1e6:.1f} M rows"
        rep = measure("report", root, repeats)
        fl = measure("floor", root, repeats)
        growth.append((rows, rep["seconds"]))
        figures.append(_fig(
            f"gpuaudit report (html+md+json), {label}", rep["seconds"], "s",
            "floor: open + one DuckDB GROUP BY per table, same columns",
            fl["seconds"], "≤ 2× floor", rep["seconds"] <= 2 * fl["seconds"],
            f"{rows / rep['seconds']:,.0f} rows/s; {gpus} GPUs × {days:g} days at {interval_s:g} s "
            f"(simulated in {t_sim:.0f} s); includes bootstrap (1000 resamples), sensitivity, 9 charts"))
        if (gpus, days) == sizes[-1]:
            fs = measure("floor_samples", root, repeats)
            figures.append(_fig(f"gpuaudit report vs the samples table alone, {label}", rep["seconds"], "s",
                                "one DuckDB GROUP BY over samples only", fs["seconds"], None, None,
                                "the stricter floor: ignores the processes table the report also reads"))
            an = measure("analyze", root, repeats)
            st = measure("stage1", root, repeats)
            figures.append(_fig(f"analysis only (no rendering), {label}", an["seconds"], "s", "floor",
                                fl["seconds"], None, None, "gpuaudit analyze's work"))
            figures.append(_fig(f"stage 1 (SQL rollups), {label}", st["seconds"], "s", "floor", fl["seconds"],
                                None, None, "de-duplicating scan of samples (streams per GPU-hour) + narrow demand scan"
                                " + one of processes"))
        figures.append(_fig(f"peak RSS, gpuaudit report, {label}", rep["rss_mb"], "MB", "floor peak RSS",
                            fl["rss_mb"], "≤ 4096 MB", rep["rss_mb"] <= 4096, "whole child process"))
        if rows <= PANDAS_MAX_ROWS:
            pd_ = measure("pandas", root, 1)
            an_real = rep["real"]
            agree = math.isclose(pd_["real"], an_real, rel_tol=1e-6)
            speedup = pd_["seconds"] / rep["seconds"]
            figures.append(_fig(
                f"pandas headline figures vs gpuaudit report, {label}", pd_["seconds"], "s",
                "gpuaudit report (everything)", rep["seconds"], "report ≥ 10× faster", speedup >= 10,
                f"report is {speedup:.1f}× faster; pandas computes only real/runtime per GPU, hour-of-week and "
                f"demand; pandas peak RSS {pd_['rss_mb']:,.0f} MB; "
                + ("same real utilization" if agree else f"MISMATCH: pandas {pd_['real']:.6f} vs {an_real:.6f}")))
        else:
            figures.append(_fig(f"pandas baseline, {label}", float("nan"), "s", note=(
                "not run: object-string columns of 100 M rows need more memory than this machine has; "
                "see the smaller sizes for the ratio")))
    (r0, t0), (r1, t1) = growth[0], growth[-1]
    slope = math.log(t1 / t0) / math.log(r1 / r0) if t0 > 0 and r1 > r0 else float("nan")
    figures.append(_fig("report growth exponent (log time / log rows)", slope, "", target="≤ 1.1 (linear or better)",
                        met=slope <= 1.1,
                        note=", ".join(f"{r / 1e6:.1f} M rows: {t:.2f} s" for r, t in growth)))
    return figures


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3])
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            for f in run(Path(d), quick="--quick" in sys.argv):
                print(f)
