"""A fleet-size trial on this machine: 1,000 GPUs x 90 days at 10 s (~778 M sample rows), end to end.

- generation: `gpuaudit simulate --scenario mixed --gpus 1000 --days 90 --interval 10` run as a user runs it,
  timed from outside (wall time, rows/s, CPU seconds, peak RSS of it and its workers);
- bytes on disk: both tables, and bytes per gpu_samples row;
- the report: `gpuaudit report` (html, md, json) on the whole dataset, timed from outside with its peak RSS;
  baseline: the floor of benchmarks/bench_analyzer.py (open the dataset + one DuckDB GROUP BY per table over
  the same columns), measured on the same dataset.

Needs ~5 GB of free disk for the full size (it refuses to start with less than FREE_GB_NEEDED).

    python benchmarks/bench_fleet.py                     # 1,000 GPUs x 90 days (~10+ min on 2 cores)
    python benchmarks/bench_fleet.py --gpus 200 --days 30
    python benchmarks/bench_fleet.py --quick             # 32 GPUs x 7 days (~1.9 M rows): a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
for p in (str(REPO / "src"), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

FULL = (1000, 90.0)
QUICK = (32, 7.0)
BYTES_PER_ROW_BUDGET = 6.0  # samples (~4.4 B/row) + processes (~0.7 B/row), with margin
FREE_GB_NEEDED = 1.0  # on top of the dataset's estimate


def _timed(cmd: list[str]) -> dict[str, Any]:
    from bench_simulate import timed

    return timed(cmd)


def _gpuaudit() -> list[str]:
    exe = Path(sys.executable).parent / "gpuaudit"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "gpuaudit"]


def _fig(figure: str, value: Any, unit: str, baseline: str | None = None, baseline_value: float | None = None,
         target: str | None = None, met: bool | None = None, note: str = "") -> dict[str, Any]:
    ratio = value / baseline_value if baseline_value else None
    return {"figure": figure, "value": value, "unit": unit, "baseline": baseline, "baseline_value": baseline_value,
            "ratio": ratio, "target": target, "met": met, "note": note}


def run(work: Path, quick: bool, gpus: int | None = None, days: float | None = None) -> list[dict[str, Any]]:
    from bench_analyzer import measure
    from bench_simulate import _simulate_cli

    gpus, days = (gpus or (QUICK if quick else FULL)[0]), (days or (QUICK if quick else FULL)[1])
    expected_rows = gpus * days * 86400 / 10
    need_gb = expected_rows * BYTES_PER_ROW_BUDGET / 1e9 + FREE_GB_NEEDED
    free_gb = shutil.disk_usage(work).free / 1e9
    if free_gb < need_gb:
        raise RuntimeError(f"{gpus} GPUs x {days:g} days needs ~{need_gb:.1f} GB free in {work}; {free_gb:.1f} GB is")
    root = work / f"fleet-{gpus}x{days:g}d"
    sim = _simulate_cli(root, gpus, days)  # the mixed scenario at 10 s, seed 1
    rows, prows = sim["rows"], sim["process_rows"]
    size = f"{gpus:,} GPUs x {days:g} days at 10 s"
    label = f"{rows / 1e6:,.0f} M rows"
    cores = os.cpu_count()
    report_out = work / "report"
    rep = _timed([*_gpuaudit(), "report", "--data", str(root), "--out", str(report_out), "--quiet"])
    written = sorted(p.name for p in report_out.iterdir())
    floor = measure("floor", root, 1)
    on_disk = sim["bytes"] + sim["process_bytes"]
    return [
        _fig(f"simulate {size} (mixed): wall time", sim["wall"], "s", note=(
            f"`gpuaudit {sim['command']}`: {rows:,} sample + {prows:,} process rows, {sim['files']:,} files, "
            f"{sim['cpu_s']:.0f} CPU-s; {cores} CPUs")),
        _fig(f"simulate {size}: sample rows per second", rows / sim["wall"], "rows/s"),
        _fig(f"simulate {size}: peak memory (RSS)", sim["rss_kb"] / 1024, "MiB", note="of it and its workers"),
        _fig(f"bytes on disk, {size}", on_disk / 1e9, "GB", note=(
            f"gpu_samples {sim['bytes'] / 1e9:.2f} GB + gpu_processes {sim['process_bytes'] / 1e9:.2f} GB")),
        _fig(f"gpu_samples bytes per row, {size}", sim["bytes"] / rows, "B/row", target="<= 8 B/row",
             met=sim["bytes"] / rows <= 8),
        _fig(f"gpu_processes bytes per row, {size}", sim["process_bytes"] / max(prows, 1), "B/row",
             note=f"{prows:,} rows: one per process per held GPU-interval"),
        _fig(f"gpuaudit report (html+md+json), {label}", rep["wall"], "s",
             "floor: open + one DuckDB GROUP BY per table, same columns", floor["seconds"], note=(
                 f"{rows / rep['wall']:,.0f} rows/s; {size}; wrote {', '.join(written)}; {rep['cpu_s']:.0f} CPU-s; "
                 "timed from outside: interpreter start and imports included")),
        _fig(f"peak RSS, gpuaudit report, {label}", rep["rss_kb"] / 1024, "MiB", "floor peak RSS",
             floor["rss_mb"], note=f"the whole `gpuaudit report` process; machine: {cores} CPUs"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int)
    ap.add_argument("--days", type=float)
    ap.add_argument("--quick", action="store_true", help=f"{QUICK[0]} GPUs x {QUICK[1]:g} days")
    ap.add_argument("--work", type=Path, default=HERE, help="where the dataset is written (then removed)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.work) as d:
        for f in run(Path(d), args.quick, args.gpus, args.days):
            print(json.dumps(f))


if __name__ == "__main__":
    main()
