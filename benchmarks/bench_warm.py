"""A warm `gpuaudit analyze` with a new price at fleet scale (issue 29: <= 3 s and <= 1 GB at 778 M rows), and,
with --before REF, the same runs of another commit side by side, alternating, on the same warm machine.

A warm run's cost follows the dataset's files and GPU-hours, not its sample rows (it reads neither the data nor
the rollups: the tree's stamp, the stage-2 memo, the priced part of stage 2, the result document). So the
dataset is the 778 M-row one's fleet at a 600 s interval: 1,000 GPUs x 90 days, the same 30,413 files and
2,161,000 GPU-hours, simulated in minutes instead of an hour. Each side gets its own $XDG_CACHE_HOME (its own
memo) and fills it with one cached run; then REPEATS rounds, each with a price neither side has seen
(`--config`: [cloud] instance_usd_per_hour), the sides in turn. The last round's documents are checked against
a cold `--no-cache` run with the same price (every figure within 1e-9 relative), and the two sides' against
each other.

    python benchmarks/bench_warm.py                       # 1000x90 at 600 s; writes RESULTS.md
    python benchmarks/bench_warm.py --before b86d7af      # and that commit's code beside this one's
    python benchmarks/bench_warm.py --gpus 64 --days 14 --quick   # a small size; prints only
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from bench_cache import START, _close, _simulate, _timed, publish  # noqa: E402  (after the path above)

REPEATS = 5
INTERVAL_S = 600.0


def _worktree(ref: str, where: Path) -> Path:
    """The sources of commit `ref`, checked out at `where` (a detached worktree, made again each run)."""
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(where)], capture_output=True)
    shutil.rmtree(where, ignore_errors=True)
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), ref], check=True,
                   capture_output=True)
    return where / "src"


def run(work: Path, gpus: int, days: int, before: str | None) -> list[dict[str, Any]]:
    root = work / "data"
    shutil.rmtree(work, ignore_errors=True)
    rows = _simulate(root, gpus, days, INTERVAL_S, START)
    files = sum(1 for _ in root.rglob("*.parquet"))
    sides: dict[str, Path | None] = {"this": None}
    if before:
        sides = {"before": _worktree(before, work / "before"), "this": None}
    price = work / "price.toml"
    base = ["analyze", "--json", "--data", str(root), "--config", str(price)]

    def timed(side: str) -> tuple[float, float, str]:
        return _timed(*base, src=sides[side], env={"XDG_CACHE_HOME": str(work / f"xdg-{side}")})

    price.write_text("[cloud]\ninstance_usd_per_hour = 30.0\n")
    for side in sides:  # each side fills its memo (and the rollup entry, where stage 1's code differs)
        timed(side)
    walls: dict[str, list[float]] = {s: [] for s in sides}
    rss: dict[str, float] = {s: 0.0 for s in sides}
    last: dict[str, str] = {}
    for i in range(REPEATS):
        price.write_text(f"[cloud]\ninstance_usd_per_hour = {31.0 + i}\n")  # new to both sides' memos
        for side in sides:
            wall, mb, last[side] = timed(side)
            walls[side].append(wall)
            rss[side] = max(rss[side], mb)
    _, _, cold = _timed(*base, "--no-cache")
    for side in sides:
        _close(json.loads(cold), json.loads(last[side]))

    def fig(name: str, value: float, unit: str, before_value: float | None, target: str, met: bool,
            note: str) -> dict[str, Any]:
        return {"figure": name, "value": round(value, 3), "unit": unit,
                "baseline": f"the same runs of {before}" if before else None,
                "baseline_value": None if before_value is None else round(before_value, 3),
                "ratio": None if before_value is None else round(value / before_value, 3),
                "target": target, "met": met, "note": note}

    runs = ", ".join(f"{w:.2f}" for w in walls["this"])
    runs_before = ", ".join(f"{w:.2f}" for w in walls.get("before", []))
    median = statistics.median(walls["this"])
    label = (f"{gpus:,} GPUs x {days} days at {INTERVAL_S:g} s (mixed): {rows:,} sample rows, {files:,} files; "
             f"median of {REPEATS}, a new price each round")
    before_s = statistics.median(walls["before"]) if before else None
    figures = [
        fig("analyze, warm with a changed price: wall time", median, "s", before_s, "<= 3 s at 778 M rows (issue 29)",
            median <= 3.0, f"{label}; runs {runs}" + (f"; {before}: {runs_before}" if before else "")),
        fig("analyze, warm with a changed price: peak RSS", rss["this"], "MiB", rss.get("before"),
            "<= 1 GB at 778 M rows (issue 29)", rss["this"] <= 1e9 / 2**20,
            "every figure = a cold --no-cache run's with the same price, within 1e-9"),
    ]
    return figures


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--days", type=int, default=90)
    ap.add_argument("--before", help="a commit to run side by side (a git worktree of it)")
    ap.add_argument("--quick", action="store_true", help="print only; RESULTS.md is left as it is")
    args = ap.parse_args()
    if dt.datetime.fromisoformat(START).replace(tzinfo=dt.UTC) + dt.timedelta(days=args.days + 1) > \
            dt.datetime.now(dt.UTC):
        raise SystemExit(f"bench_warm: {START} + {args.days + 1} days is in the future")
    work = HERE / ".work" / "warm"
    t0 = time.perf_counter()
    try:
        figures = run(work, args.gpus, args.days, args.before)
    finally:
        if args.before:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(work / "before")],
                           capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    how = f" --gpus {args.gpus} --days {args.days}" + (f" --before {args.before}" if args.before else "")
    name = f"warm with a new price ({args.gpus}x{args.days} at 600 s)"
    publish(figures, time.perf_counter() - t0, f"python benchmarks/bench_warm.py{how}", name, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
