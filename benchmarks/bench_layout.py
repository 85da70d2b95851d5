"""A restructure must cost nothing: `gpuaudit report` on the same 100 M-row dataset, the code before the
restructure against the code now, runs interleaved (before, after, before, after, ...) so that machine noise
hits both alike.

The code before is a `git worktree` of BEFORE_REV (the last commit before the restructure: one owner per
mechanism, plans registry, headline figures, typed seams). The dataset has no scheduler allocations, so both
sides read the same rows. The code now runs with `--no-cache`: the code before has no stage-1 rollup cache,
and a warm run against a cold one would measure the cache, not the restructure. Each run is a fresh process
(its peak RSS is its own); the figure is the median wall time of each side and their ratio.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BEFORE_REV = os.environ.get("GPUAUDIT_BENCH_BEFORE", "8390890")  # main before the owner-per-mechanism restructure
FULL = (128, 90.0, 10.0)  # GPUs, days, interval: ~100 M sample rows
QUICK = (16, 3.0, 60.0)
RUNS = 3

CHILD = """
import resource, runpy, sys
sys.argv = ["gpuaudit", "report", "--data", sys.argv[1], "--out", sys.argv[2], *sys.argv[3:]]
try:
    runpy.run_module("gpuaudit", run_name="__main__")
except SystemExit as e:
    if e.code:
        raise
print("MAXRSS_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


def _worktree(work: Path) -> Path:
    path = work / "before"
    if not (path / "src").is_dir():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--force", str(path), BEFORE_REV],
                       check=True, capture_output=True)
    return path


def _report(src: Path, root: Path, out: Path, *extra: str) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", CHILD, str(root), str(out), *extra], env=env, capture_output=True,
                       text=True)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise RuntimeError(f"report failed ({src}): {p.stderr[-2000:]}")
    rss_kb = next(float(line.split()[1]) for line in p.stderr.splitlines() if line.startswith("MAXRSS_KB"))
    return wall, rss_kb / 1024


def run(work: Path, quick: bool) -> list[dict[str, Any]]:
    sys.path.insert(0, str(REPO / "src"))
    from gpuaudit.sim.bulk import simulate

    gpus, days, interval = QUICK if quick else FULL
    root = work / "data"
    s = simulate(root, "mixed", gpus, days, interval, seed=1)
    # Like with like: the code before reads no scheduler allocations (issue 20), so the dataset has none; the
    # code after still runs its ledger and chargeback over the processes.
    shutil.rmtree(root / "gpu_allocations", ignore_errors=True)
    before = _worktree(work) / "src"
    after = REPO / "src"
    times: dict[str, list[float]] = {"before": [], "after": []}
    rss: dict[str, list[float]] = {"before": [], "after": []}
    for i in range(RUNS):
        for side, src in (("before", before), ("after", after)) if i % 2 == 0 else (("after", after),
                                                                                  ("before", before)):
            wall, mb = _report(src, root, work / f"out-{side}", *(("--no-cache",) if side == "after" else ()))
            times[side].append(wall)
            rss[side].append(mb)
    tb, ta = statistics.median(times["before"]), statistics.median(times["after"])
    rb, ra = statistics.median(rss["before"]), statistics.median(rss["after"])
    label = f"{s.rows / 1e6:.0f} M rows ({gpus} GPUs x {days:g} days at {interval:g} s)"
    walls = {side: ", ".join(f"{t:.1f}" for t in ts) for side, ts in times.items()}
    note = f"{RUNS} interleaved runs each; before = {BEFORE_REV}; after with --no-cache; "
    note += f"walls before {walls['before']} s, "
    note += f"after {walls['after']} s"
    return [
        {"figure": f"gpuaudit report, {label}: wall time after the restructure", "value": round(ta, 2), "unit": "s",
         "baseline": f"the same command, code before ({BEFORE_REV})", "baseline_value": round(tb, 2),
         "ratio": round(ta / tb, 3), "target": "<= 1.05 x before", "met": ta <= 1.05 * tb, "note": note},
        {"figure": f"gpuaudit report, {label}: peak RSS after the restructure", "value": round(ra), "unit": "MiB",
         "baseline": f"before ({BEFORE_REV})", "baseline_value": round(rb), "ratio": round(ra / rb, 3),
         "target": "<= 1.05 x before", "met": ra <= 1.05 * rb, "note": "median of the runs"},
    ]
