"""Per-model pools (issue 25): `gpuaudit report` on a fleet of four GPU models against the same rows with one
model, side by side in one run. Target: the four-model report within 1.2× the one-model wall time.

The one-model dataset is a simulated mixed fleet (H100s); the four-model one is a copy whose samples carry, host
by host, the names NVML reports for an H100, an A100 80GB, an L4 and a T4 (the rows are otherwise the same, so
the difference is what pricing four pools costs: the per-pool measures, plans, draws and tornado).
Runs alternate (one, four, one, four, …); each figure is the median of REPEATS fresh processes, `--no-cache`.

    python benchmarks/bench_pools.py          # writes its section into benchmarks/RESULTS.md
    python benchmarks/bench_pools.py --quick  # small sizes, prints only
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_cache import REPO, _timed, splice  # noqa: E402  (the same timing wrapper and RESULTS.md splice)

SIZE = (64, 14, 60.0)  # GPUs, days, interval (s): 1.3 M sample rows
QUICK_SIZE = (32, 7, 300.0)  # four hosts: one per model
REPEATS = 3
MODELS = (("NVIDIA H100 80GB HBM3", 80), ("NVIDIA A100-SXM4-80GB", 80), ("NVIDIA L4", 24), ("Tesla T4", 16))


def _four_models(src: Path, dst: Path) -> None:
    """A copy of `src` whose samples name one of four models per host (host number mod 4)."""
    import duckdb

    shutil.copytree(src, dst)
    cases = " ".join(f"WHEN {i} THEN '{name}'" for i, (name, _) in enumerate(MODELS))
    mems = " ".join(f"WHEN {i} THEN {gib * 2**30}" for i, (_, gib) in enumerate(MODELS))
    pick = "CAST(regexp_extract(host, '(\\d+)$', 1) AS INTEGER) % 4"
    con = duckdb.connect()
    for f in sorted((dst / "gpu_samples").rglob("*.parquet")):
        tmp = f.with_suffix(".tmp")
        con.execute(f"COPY (SELECT * REPLACE (CASE {pick} {cases} END AS gpu_name, CASE {pick} {mems} END AS "
                    f"mem_total_bytes) FROM read_parquet('{f}')) TO '{tmp}' (FORMAT parquet)")
        tmp.replace(f)


def run(work: Path, quick: bool) -> tuple[str, float]:
    from gpuaudit.sim.bulk import simulate

    gpus, days, interval = QUICK_SIZE if quick else SIZE
    one, four = work / "one", work / "four"
    rows = int(simulate(one, "mixed", gpus=gpus, days=days, interval_s=interval, seed=1,
                        start=dt.datetime(2026, 10, 1, tzinfo=dt.UTC)).rows)
    _four_models(one, four)
    walls: dict[str, list[float]] = {"one": [], "four": []}
    rss: dict[str, float] = {"one": 0.0, "four": 0.0}
    pools: dict[str, int] = {}
    for _ in range(REPEATS):
        for name, root in (("one", one), ("four", four)):
            out = work / f"out-{name}"
            wall, peak, _ = _timed("report", "--data", str(root), "--out", str(out), "--no-cache")
            walls[name].append(wall)
            rss[name] = max(rss[name], peak)
            pools[name] = len(json.loads((out / "report.json").read_text())["pools"])
    assert pools == {"one": 1, "four": 4}, pools
    w1, w4 = statistics.median(walls["one"]), statistics.median(walls["four"])
    ratio = w4 / w1
    lines = [
        f"{gpus} GPUs × {days} days at {interval:g} s ({rows:,} sample rows), `gpuaudit report --no-cache`, "
        f"median of {REPEATS}, runs alternating:",
        "",
        "| dataset | pools | wall time | peak RSS |",
        "|---|--:|--:|--:|",
        f"| one model (H100) | 1 | {w1:.2f} s | {rss['one']:.0f} MiB |",
        f"| four models (H100, A100 80GB, L4, T4 by host) | 4 | {w4:.2f} s | {rss['four']:.0f} MiB |",
        "",
        f"Four models ÷ one: **{ratio:.2f}×** wall time (target ≤ 1.2×), {rss['four'] / rss['one']:.2f}× peak RSS.",
    ]
    return "\n".join(lines), ratio


def main() -> int:
    quick = "--quick" in sys.argv
    work = HERE / ".work" / "pools"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    sys.path.insert(0, str(REPO / "src"))
    t0 = time.perf_counter()
    body, _ratio = run(work, quick)
    when = f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, `python benchmarks/bench_pools.py`"
    section = f"## pools\n\n(ran in {time.perf_counter() - t0:.0f} s, {when})\n\n{body}\n"
    print(section)
    if not quick:
        splice(HERE / "RESULTS.md", section, "pools")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
