"""The stage-1 rollup cache (issue 29.1-29.2), side by side in one run on one simulated dataset:

- cold: `gpuaudit analyze --json --no-cache` (reads the whole dataset);
- the first cached run (a miss: the cold run plus writing the entry);
- warm: the same command again, and with a changed price (`--config`: instance_usd_per_hour): no scan;
- after one more day of data: the cached run (it reads only the new day's files and merges them with the
  entry, where de-duplication allows) against a cold run on the same, bigger dataset;
- `gpuaudit report` (all formats) cold and warm: the fixed costs (charts, HTML) the cache does not touch.

- the floor (benchmarks/bench_analyzer.py: open the dataset + one DuckDB GROUP BY per table over the same
  columns) on the same dataset: what the cold run's time and peak RSS are compared with.

Each figure is the median of REPEATS fresh processes (wall time; peak RSS from wait4; one run each above
LARGE_ROWS sample rows, where a cold run takes minutes). Every warm result is checked against the cold one
(every figure within 1e-9 relative).

    python benchmarks/bench_cache.py                              # 96 GPUs x 30 days at 60 s; writes RESULTS.md
    python benchmarks/bench_cache.py --sizes 128x90,1000x90       # issue 29's sizes (100 M, 778 M rows at 10 s)
    python benchmarks/bench_cache.py --quick                      # small sizes, prints only
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # bench_analyzer (the floor) and run (fmt)
    sys.path.insert(0, str(HERE))
SIZE = (96, 30, 60.0)  # GPUs, days, interval (s): 4.1 M sample rows, < 3 minutes on 2 cores
QUICK_SIZE = (16, 7, 300.0)
REPEATS = 3
LARGE_ROWS = 50_000_000  # above this many sample rows every figure is one run (a cold run takes minutes)
START = "2026-01-05"  # a Monday, far enough back that START + days + 1 is in the past: rows more than a day
# in the future are left out by a rule that moves with the clock, so runs minutes apart would read different rows


def _measure(*args: str, repeats: int = REPEATS) -> tuple[float, float, str]:
    """Median wall time and the largest peak RSS of `repeats` runs."""
    walls, rsss, out = [], [], ""
    for _ in range(repeats):
        wall, rss, out = _timed(*args)
        walls.append(wall)
        rsss.append(rss)
    return statistics.median(walls), max(rsss), out


def child_env(src: Path, more: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a benchmarked gpuaudit process: `src` on the path, bytecode written and read as an
    installed package's is (a user's pip install compiles it; this machine sets PYTHONDONTWRITEBYTECODE, and
    without bytecode each run compiles 80 modules, 0.15 s)."""
    full = {**os.environ, "PYTHONPATH": str(src), **(more or {})}
    full.pop("PYTHONDONTWRITEBYTECODE", None)
    return full


def _timed(*args: str, src: Path | None = None, env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """One run under /usr/bin/time-like accounting: a wrapper process reports its child's own peak RSS. `src`:
    the gpuaudit sources to run (default this checkout's); `env`: more environment (child_env)."""
    wrapper = ("import os,resource,subprocess,sys,time;t=time.perf_counter();"
               "p=subprocess.run(sys.argv[1:],stdout=open(os.environ['BENCH_OUT'],'wb'),stderr=subprocess.PIPE);"
               "w=time.perf_counter()-t;"
               "sys.stderr.buffer.write(p.stderr) if p.returncode else None;"
               "print(w,resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss);sys.exit(p.returncode)")
    out_file = HERE / ".work" / "cache-out.json"
    out_file.parent.mkdir(parents=True, exist_ok=True)
    full = child_env(src or REPO / "src", {"BENCH_OUT": str(out_file), **(env or {})})
    r = subprocess.run([sys.executable, "-c", wrapper, sys.executable, "-m", "gpuaudit", *args],
                       capture_output=True, text=True, env=full)
    if r.returncode != 0:
        raise RuntimeError(f"gpuaudit {' '.join(args)} failed: {r.stderr[-2000:]}")
    wall, rss_kb = r.stdout.split()
    return float(wall), float(rss_kb) / 1024, out_file.read_text()


def _close(a: Any, b: Any, where: str = "") -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            if k != "generated_at":
                _close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _simulate(root: Path, gpus: int, days: float, interval_s: float, start: str) -> int:
    from gpuaudit.sim.bulk import simulate

    return int(simulate(root, "mixed", gpus=gpus, days=days, interval_s=interval_s, seed=1,
                        start=_dt(start)).rows)


def _dt(text: str) -> Any:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)


def _add_day(root: Path, extra: Path, gpus: int, days: int, interval_s: float) -> int:
    """One more day of the same fleet, simulated apart and moved into `root` (new files, new partitions)."""
    start = (_dt(START) + dt.timedelta(days=days)).isoformat()
    rows = _simulate(extra, gpus, 1, interval_s, start)
    for f in extra.rglob("*.parquet"):
        dest = root / f.relative_to(extra)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(f, dest.with_name("more-" + dest.name))
    return rows


def run(work: Path, size: tuple[int, int, float], prefix: str = "") -> list[dict[str, Any]]:
    from bench_analyzer import measure as measure_floor

    gpus, days, interval_s = size
    if _dt(START) + dt.timedelta(days=days + 1) > dt.datetime.now(dt.UTC):
        raise SystemExit(f"bench_cache: START {START} + {days + 1} days is in the future; choose an earlier START")
    root, extra = work / "data", work / "extra"
    shutil.rmtree(work, ignore_errors=True)
    rows = _simulate(root, gpus, days, interval_s, START)
    reps = 1 if rows > LARGE_ROWS else REPEATS
    price = work / "price.toml"
    price.write_text("[cloud]\ninstance_usd_per_hour = 40.0\n")
    base = ["analyze", "--json", "--data", str(root)]

    cold_s, cold_mb, cold = _measure(*base, "--no-cache", repeats=reps)
    floor = measure_floor("floor", root, 1)  # on the same rows as the cold run, before the extra day
    fill_s, fill_mb, filled = _timed(*base)
    warm_s, warm_mb, warm = _measure(*base, repeats=reps)
    price_s, price_mb, priced = _measure(*base, "--config", str(price), repeats=reps)
    price_cold_s, _, priced_cold = _timed(*base, "--config", str(price), "--no-cache")
    for other in (filled, warm):
        _close(json.loads(cold), json.loads(other))
    _close(json.loads(priced_cold), json.loads(priced))
    entry_bytes = sum(p.stat().st_size for p in (root / ".rollups").glob("*.rollup"))

    more = _add_day(root, extra, gpus, days, interval_s)
    day_s, day_mb, day = _timed(*base)  # the cached run: new files merged onto the entry
    day_cold_s, day_cold_mb, day_cold = _measure(*base, "--no-cache", repeats=reps)
    _close(json.loads(day_cold), json.loads(day))
    day_warm_s, _, _ = _timed(*base)

    out = work / "report"
    rep_cold_s, rep_cold_mb, _ = _measure("report", "--data", str(root), "--out", str(out), "-q", "--no-cache",
                                          repeats=reps)
    rep_warm_s, rep_warm_mb, _ = _measure("report", "--data", str(root), "--out", str(out), "-q", repeats=reps)
    floor_day = measure_floor("floor", root, 1)  # the reports read the extra day too

    label = f"{gpus:,} GPUs x {days} days at {interval_s:g} s (mixed, {rows:,} sample rows, one more day added " \
            "before the last figures)"
    runs = f"median of {reps} fresh processes" if reps > 1 else "one run each"
    cold_note = f"`gpuaudit analyze --json --no-cache`, {label}; {runs}"
    floor_name = "floor: open + one DuckDB GROUP BY per table, same columns"

    def fig(name: str, value: float, unit: str, baseline: str | None = None, baseline_value: float | None = None,
            target: str = "", met: bool | None = None, note: str = "") -> dict[str, Any]:
        ratio = value / baseline_value if baseline_value else None
        return {"figure": prefix + name, "value": round(value, 3), "unit": unit, "baseline": baseline,
                "baseline_value": None if baseline_value is None else round(baseline_value, 3),
                "ratio": None if ratio is None else round(ratio, 3), "target": target, "met": met, "note": note}

    return [
        fig("analyze, cold (--no-cache): wall time", cold_s, "s", floor_name, floor["seconds"],
            target="<= 1.3 x the floor (issue 29)", met=cold_s <= 1.3 * floor["seconds"], note=cold_note),
        fig("analyze, cold: peak RSS", cold_mb, "MiB", "floor peak RSS", floor["rss_mb"],
            target="<= 2 x the floor's (issue 29)", met=cold_mb <= 2 * floor["rss_mb"]),
        fig("analyze, first cached run (miss: scan + write the entry)", fill_s, "s", "cold", cold_s,
            note=f"entry {entry_bytes / 2**20:.2f} MiB in <data>/.rollups/"),
        fig("analyze, first cached run: peak RSS", fill_mb, "MiB", "cold", cold_mb),
        fig("analyze, warm (same inputs)", warm_s, "s", "cold", cold_s, note="every figure = cold's within 1e-9"),
        fig("analyze, warm: peak RSS", warm_mb, "MiB", "cold", cold_mb),
        fig("analyze, warm with a changed price", price_s, "s", "cold with the same price", price_cold_s,
            target="<= 3 s at 778 M rows (issue 29)", met=price_s <= 3.0,
            note="--config: [cloud] instance_usd_per_hour = 40; every figure = cold's within 1e-9"),
        fig("analyze, warm with a changed price: peak RSS", price_mb, "MiB", "cold", cold_mb,
            target="<= 1 GB at 778 M rows (issue 29)", met=price_mb <= 1e9 / 2**20),
        fig("analyze after one more day of data (cached run: new files only, merged)", day_s, "s",
            "cold on the same data", day_cold_s, target="<= 10 % of cold (issue 29)", met=day_s <= 0.1 * day_cold_s,
            note=f"+{more:,} rows in new files; every figure = cold's within 1e-9"),
        fig("analyze after one more day: peak RSS", day_mb, "MiB", "cold", day_cold_mb),
        fig("analyze after one more day, then warm again", day_warm_s, "s", "cold on the same data", day_cold_s),
        fig("report (html, md, json), cold", rep_cold_s, "s", note="`gpuaudit report -q --no-cache`"),
        fig("report, warm", rep_warm_s, "s", "cold", rep_cold_s,
            note="what remains is the fixed cost (imports, bootstrap, charts, HTML): issue 29 item 3"),
        fig("report, warm: peak RSS", rep_warm_mb, "MiB", "cold", rep_cold_mb),
        fig("report, cold: peak RSS", rep_cold_mb, "MiB", "floor peak RSS (with the extra day)", floor_day["rss_mb"],
            target="<= 2 x the floor's (issue 29)", met=rep_cold_mb <= 2 * floor_day["rss_mb"]),
    ]


def section(figures: list[dict[str, Any]], elapsed: float, command: str, name: str) -> str:
    """A RESULTS.md section: `## name`, when and how it ran (`command`), and the figures as one table."""
    from run import fmt

    rows = ["| figure | value | baseline | baseline value | ratio | target | met | note |",
            "|---|---|---|---|---|---|---|---|"]
    for f in figures:
        rows.append("| " + " | ".join([
            f["figure"], f"{fmt(f['value'])} {f.get('unit', '')}".strip(), fmt(f.get("baseline")),
            fmt(f.get("baseline_value")), fmt(f.get("ratio")), fmt(f.get("target")), fmt(f.get("met")),
            str(f.get("note", "")).replace("|", "/"),
        ]) + " |")
    when = f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, `{command}`"
    return f"## {name}\n\n(ran in {elapsed:.0f} s, {when})\n\n" + "\n".join(rows) + "\n"


def publish(figures: list[dict[str, Any]], elapsed: float, command: str, name: str, quick: bool) -> None:
    """Print the section; unless `quick`, put it into RESULTS.md too."""
    text = section(figures, elapsed, command, name)
    print(text)
    if not quick:
        splice(HERE / "RESULTS.md", text, name)


def splice(results: Path, section: str, name: str = "cache") -> None:
    """Put `section` into RESULTS.md in place of an earlier `## <name>` section (else before the GPU check)."""
    text = results.read_text(encoding="utf-8")
    m = re.search(rf"^## {re.escape(name)}\n.*?(?=^## |\Z)", text, flags=re.S | re.M)
    if m:
        text = text[:m.start()] + section + "\n" + text[m.end():]
    else:
        gpu = text.find("## GPU check")
        text = (text[:gpu] + section + "\n" + text[gpu:]) if gpu >= 0 else text.rstrip("\n") + "\n\n" + section
    results.write_text(text, encoding="utf-8")


def _size(text: str, interval_s: float) -> tuple[int, int, float]:
    """`GPUSxDAYS` (at `interval_s`), e.g. 1000x90."""
    m = re.fullmatch(r"(\d+)x(\d+)", text.strip())
    if not m:
        raise SystemExit(f"bench_cache: --sizes wants GPUSxDAYS[,GPUSxDAYS...], e.g. 128x90; got {text!r}")
    return int(m[1]), int(m[2]), interval_s


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small size; prints only")
    ap.add_argument("--sizes", help="GPUSxDAYS[,...] (e.g. 128x90,1000x90), each simulated and measured in turn")
    ap.add_argument("--interval", type=float, default=10.0, help="sample interval (s) for --sizes (default 10)")
    args = ap.parse_args()
    work = HERE / ".work" / "cache"
    sys.path.insert(0, str(REPO / "src"))
    if args.sizes:
        sizes = [_size(t, args.interval) for t in args.sizes.split(",")]
        how = f" --sizes {args.sizes}" + (f" --interval {args.interval:g}" if args.interval != 10.0 else "")
    else:
        sizes, how = [QUICK_SIZE if args.quick else SIZE], ""
    t0 = time.perf_counter()
    figures = []
    for size in sizes:
        prefix = f"{size[0]:,} x {size[1]} d: " if len(sizes) > 1 else ""
        figures += run(work, size, prefix)
        shutil.rmtree(work, ignore_errors=True)
    # One section per --sizes list, so that each size can be run (and re-run) on its own.
    name = f"cache ({args.sizes})" if args.sizes else "cache"
    publish(figures, time.perf_counter() - t0, f"python benchmarks/bench_cache.py{how}", name, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
