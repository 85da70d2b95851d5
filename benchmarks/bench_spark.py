"""Stage 1 on Apache Spark against DuckDB, on one dataset: time, memory, and that the rollups agree.

- the dataset: written by `gpuaudit simulate` (the `mixed` scenario at 10 s; `--rows`, default 100 M:
  128 GPUs x 90 days), or an existing one (`--data DIR`, e.g. the fleet benchmark's);
- DuckDB: `gpuaudit.analysis.stage1.rollup.load_rollups` (the default engine) in a fresh child process;
- Spark: `gpuaudit.analysis.stage1.spark.load_rollups` in a fresh child process on a local session (`local[*]`, the
  driver's memory from --driver-memory), session start timed apart;
- agreement: every column of the three rollup frames (gpu_hours, demand, holders), rows matched on their
  non-float columns, floats compared by relative difference (target <= 1e-6: float32 products where one engine
  widens to DOUBLE), names and types identical.

    python benchmarks/bench_spark.py                  # 100 M rows (simulated first: ~1 min, ~0.5 GB)
    python benchmarks/bench_spark.py --rows 5e6       # any size
    python benchmarks/bench_spark.py --data DIR       # an existing dataset
    python benchmarks/bench_spark.py --quick          # ~1.9 M rows: a smoke test of this script
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
for p in (str(REPO / "src"), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

GPUS = 128
INTERVAL_S = 10.0
FULL_ROWS = 100e6
QUICK = (32, 7.0)  # GPUs, days: ~1.9 M rows
DRIVER_MEMORY = "6g"
REL_TOL = 1e-6
FRAMES = ("gpu_hours", "demand", "holders")


# ----------------------------------------------------------------------------------------- child side


def _hwm_mb(pid: int | str = "self") -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _child(engine: str, root: str, out: str) -> None:
    """Stage 1 with `engine`; the frames go to OUT/<frame>.parquet, the figures to stdout (one JSON line)."""
    import polars as pl  # noqa: F401  - imported before the clock starts

    figures: dict[str, Any] = {}
    if engine == "spark":
        import psutil

        from gpuaudit.analysis.stage1 import spark

        t0 = time.perf_counter()
        session = spark.session()
        figures["session_s"] = time.perf_counter() - t0
        figures["cores"] = session.sparkContext.defaultParallelism
        load = spark.load_rollups
    else:
        from gpuaudit.analysis.stage1.rollup import load_rollups as load
    t0 = time.perf_counter()
    roll = load(root)
    figures["seconds"] = time.perf_counter() - t0
    figures["rss_mb"] = _hwm_mb()
    if engine == "spark":  # the JVM is a child process: its own peak
        jvms = [c for c in psutil.Process().children(recursive=True) if "java" in c.name()]
        figures["jvm_rss_mb"] = sum(_hwm_mb(c.pid) for c in jvms)
    for name in FRAMES:
        getattr(roll, name).write_parquet(Path(out) / f"{name}.parquet")
        figures[f"{name}_rows"] = getattr(roll, name).height
    print(json.dumps(figures))


# ---------------------------------------------------------------------------------------- parent side


def measure(engine: str, root: Path, out: Path, driver_memory: str = DRIVER_MEMORY) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"),
           "PYSPARK_SUBMIT_ARGS": f"--driver-memory {driver_memory} pyspark-shell"}
    r = subprocess.run([sys.executable, __file__, "--child", engine, str(root), str(out)], capture_output=True,
                       text=True, env=env, cwd=REPO)
    if r.returncode != 0:
        raise RuntimeError(f"{engine} stage 1 failed: {r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def max_rel_diff(duck_dir: Path, spark_dir: Path) -> tuple[float, str]:
    """The largest relative difference over every float of the three frames (0 when identical; absolute below 1),
    and what differed otherwise ("" when names, types, row counts and every non-float value are identical)."""
    import polars as pl

    worst = 0.0
    for name in FRAMES:
        a, b = pl.read_parquet(duck_dir / f"{name}.parquet"), pl.read_parquet(spark_dir / f"{name}.parquet")
        if a.schema != b.schema:
            return float("inf"), f"{name}: columns or types differ"
        if a.height != b.height:
            return float("inf"), f"{name}: {a.height} rows against {b.height}"
        floats = [n for n, t in a.schema.items() if t.is_float()]
        keys = [n for n in a.columns if n not in floats]
        a, b = a.sort(keys, nulls_last=True), b.sort(keys, nulls_last=True)
        if not a.select(keys).equals(b.select(keys)):
            return float("inf"), f"{name}: the key columns differ"
        for c in floats:
            if not a[c].is_null().equals(b[c].is_null()):
                return float("inf"), f"{name}.{c}: nulls differ"
            x, y = pl.col("x"), pl.col("y")
            # relative to the larger magnitude, and absolute below 1 (seconds, joules: below 1 is noise)
            rel = pl.DataFrame({"x": a[c], "y": b[c]}).select(
                ((x - y).abs() / pl.max_horizontal(x.abs(), y.abs(), pl.lit(1.0))).max()).item()
            worst = max(worst, float(rel or 0.0))
    return worst, ""


def _fig(figure: str, value: Any, unit: str, baseline: str | None = None, baseline_value: float | None = None,
         target: str | None = None, met: bool | None = None, note: str = "") -> dict[str, Any]:
    ratio = value / baseline_value if baseline_value and isinstance(value, float) else None
    return {"figure": figure, "value": value, "unit": unit, "baseline": baseline, "baseline_value": baseline_value,
            "ratio": ratio, "target": target, "met": met, "note": note}


def compare(root: Path, work: Path, label: str, driver_memory: str = DRIVER_MEMORY) -> list[dict[str, Any]]:
    duck = measure("duckdb", root, work / "duckdb")
    sp = measure("spark", root, work / "spark", driver_memory)
    worst, problem = max_rel_diff(work / "duckdb", work / "spark")
    rows = ", ".join(f"{n} {duck[f'{n}_rows']:,}" for n in FRAMES)
    return [
        _fig(f"stage 1 on Spark (local, {sp['cores']} cores), {label}", sp["seconds"], "s",
             "stage 1 on DuckDB, same dataset", duck["seconds"], note=(
                 f"same SQL files (sqlglot); session start ({sp['session_s']:.1f} s) not included; "
                 f"driver memory {driver_memory}")),
        _fig(f"Spark rollups vs DuckDB's, {label}: largest relative difference", worst, "",
             target=f"<= {REL_TOL:g}, identical names, types, rows, keys", met=not problem and worst <= REL_TOL,
             note=problem or f"every column of gpu_hours, demand, holders ({rows} rows)"),
        _fig(f"Spark session start (local JVM), {label}", sp["session_s"], "s"),
        _fig(f"peak RSS, stage 1 on Spark, {label}", sp["rss_mb"] + sp["jvm_rss_mb"], "MB",
             "stage 1 on DuckDB", duck["rss_mb"],
             note=f"JVM {sp['jvm_rss_mb']:,.0f} MB + Python {sp['rss_mb']:,.0f} MB"),
    ]


def run(work: Path, quick: bool, rows: float = FULL_ROWS, data: Path | None = None,
        driver_memory: str = DRIVER_MEMORY) -> list[dict[str, Any]]:
    """benchmarks/run.py's entry: simulate (unless `data`), then compare the engines."""
    from bench_simulate import _simulate_cli

    if data is None:
        gpus, days = QUICK if quick else (GPUS, round(rows / (GPUS * 86400 / INTERVAL_S), 2))
        data = work / f"mixed-{gpus}x{days:g}d"
        sim = _simulate_cli(data, gpus, days)
        label = f"{sim['rows'] / 1e6:.1f} M rows ({gpus} GPUs x {days:g} days at 10 s)"
    else:
        from gpuaudit.store import open_dataset

        with open_dataset(data) as ds:
            n = ds.fetchall("SELECT count(*) FROM samples")[0][0]
        label = f"{n / 1e6:.1f} M rows ({data})"
    return compare(data, work, label, driver_memory)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=float, default=FULL_ROWS, help="sample rows to simulate (128 GPUs at 10 s)")
    ap.add_argument("--data", type=Path, help="an existing dataset instead of simulating one")
    ap.add_argument("--quick", action="store_true", help="~1.9 M rows")
    ap.add_argument("--driver-memory", default=DRIVER_MEMORY, help="the Spark driver's heap (local mode)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=HERE) as d:
        for f in run(Path(d), args.quick, args.rows, args.data, args.driver_memory):
            print(json.dumps(f))


if __name__ == "__main__":
    main()
