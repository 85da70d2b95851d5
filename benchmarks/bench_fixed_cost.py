"""The fixed cost of a report (issue 29), side by side in one run: `gpuaudit report` on a tiny dataset (2 GPUs,
one day) against the import of its own libraries in a fresh interpreter.

- baseline: `python -c "import polars, numpy, matplotlib, duckdb, jinja2, typer"`, a fresh process each time;
- the report: `gpuaudit simulate` a 2-GPU, 1-day fleet once, then `gpuaudit report -q` (html, md, json: 1,000
  bootstrap resamples, every chart at two widths) into a fresh directory each time, with the rollup cache
  filled by a first run (what every re-run pays) and, apart, with `--no-cache`.

The runs are interleaved (import, report, cold report, import, ...) so that a busy machine weighs on all of them
alike; each figure is the median of REPEATS fresh processes (wall time, measured around the child process).
`--against REV` adds the same report from a git worktree of REV, interleaved with the others (before / after).

    python benchmarks/bench_fixed_cost.py                  # writes its section into benchmarks/RESULTS.md
    python benchmarks/bench_fixed_cost.py --against 8eb2127
    python benchmarks/bench_fixed_cost.py --quick          # fewer repeats, prints only
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
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_cache import child_env, splice  # noqa: E402  (one RESULTS.md splice, one child environment)

REPEATS = 5
QUICK_REPEATS = 2
LIBRARIES = ("polars", "numpy", "matplotlib", "duckdb", "jinja2", "typer")
TARGET = 2.0  # the report at most this many times the import of its libraries


def _wall(*argv: str, src: Path = REPO / "src") -> float:
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=child_env(src), cwd=REPO)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {r.stderr[-2000:]}")
    return wall


def _gpuaudit(*args: str, src: Path = REPO / "src") -> float:
    return _wall(sys.executable, "-m", "gpuaudit", *args, src=src)


def _worktree(work: Path, rev: str) -> Path:
    """The source tree of `rev` (a detached git worktree under `work`)."""
    tree = work / f"at-{rev}"
    subprocess.run(
        ["git", "worktree", "add", "--detach", "-f", str(tree), rev], cwd=REPO, check=True, capture_output=True
    )
    return tree / "src"


def run(work: Path, quick: bool, against: str | None = None) -> list[dict[str, Any]]:
    os.environ["XDG_CACHE_HOME"] = str(work / "xdg")  # the chart cache of this run's reports: never the user's
    repeats = QUICK_REPEATS if quick else REPEATS
    data, out = work / "data", work / "report"
    _gpuaudit("simulate", "--scenario", "mixed", "--gpus", "2", "--days", "1", "--seed", "1", "--data", str(data))
    report = ["report", "--data", str(data), "-q"]
    before_src = _worktree(work, against) if against else None
    _gpuaudit(*report, "--out", str(out))  # fills the rollup cache and every bytecode cache
    if before_src is not None:
        _gpuaudit(*report, "--out", str(out), src=before_src)
    _wall(sys.executable, "-c", f"import {', '.join(LIBRARIES)}")
    imports, warm, priced, cold, before = [], [], [], [], []
    for i in range(repeats):
        imports.append(_wall(sys.executable, "-c", f"import {', '.join(LIBRARIES)}"))
        shutil.rmtree(out, ignore_errors=True)
        warm.append(_gpuaudit(*report, "--out", str(out / f"w{i}")))
        # A price never used before: the cost charts are drawn, the others read from the chart cache.
        price = work / f"price{i}.toml"
        price.write_text(f"[cloud]\ninstance_usd_per_hour = {41 + i}.0\n")
        priced.append(_gpuaudit(*report, "--config", str(price), "--out", str(out / f"p{i}")))
        cold.append(_gpuaudit(*report, "--no-cache", "--out", str(out / f"c{i}")))
        if before_src is not None:
            before.append(_gpuaudit(*report, "--out", str(out / f"b{i}"), src=before_src))
    if before_src is not None:
        subprocess.run(["git", "worktree", "remove", "--force", str(before_src.parent)], cwd=REPO, capture_output=True)
    imp, rep, rep_cold = statistics.median(imports), statistics.median(warm), statistics.median(cold)
    rep_priced = statistics.median(priced)
    charts = len(list((out / f"w{repeats - 1}" / "charts").glob("*.svg")))

    def fig(
        name: str,
        value: float,
        baseline: str | None = None,
        baseline_value: float | None = None,
        target: str = "",
        met: bool | None = None,
        note: str = "",
    ) -> dict[str, Any]:
        ratio = value / baseline_value if baseline_value else None
        return {
            "figure": name,
            "value": round(value, 3),
            "unit": "s",
            "baseline": baseline,
            "baseline_value": None if baseline_value is None else round(baseline_value, 3),
            "ratio": None if ratio is None else round(ratio, 3),
            "target": target,
            "met": met,
            "note": note,
        }

    libs = ", ".join(LIBRARIES)
    earlier = []
    if before:
        old = statistics.median(before)
        earlier = [
            fig(
                f"gpuaudit report, 2 GPUs x 1 day, the code at {against} (before)",
                old,
                "import of its libraries",
                imp,
                note=f"runs {', '.join(f'{x:.2f}' for x in before)} s",
            ),
            fig("gpuaudit report: now against before", rep, f"the code at {against}", old),
        ]
    return [
        fig(
            "import of the report's libraries, fresh interpreter",
            imp,
            note=f"`python -c 'import {libs}'`; runs {', '.join(f'{x:.2f}' for x in imports)} s",
        ),
        fig(
            "gpuaudit report, 2 GPUs x 1 day, re-run (rollup and chart caches filled)",
            rep,
            "import of its libraries",
            imp,
            target=f"<= {TARGET:g} x the import (issue 29)",
            met=rep <= TARGET * imp,
            note=f"html, md, json: 1,000 bootstrap resamples, {charts} charts each at two widths; runs "
            f"{', '.join(f'{x:.2f}' for x in warm)} s",
        ),
        fig(
            "gpuaudit report, 2 GPUs x 1 day, a new price (cost charts drawn, the others cached)",
            rep_priced,
            "import of its libraries",
            imp,
            note=f"--config: [cloud] instance_usd_per_hour new each run; runs {', '.join(f'{x:.2f}' for x in priced)}"
            " s",
        ),
        fig(
            "gpuaudit report, 2 GPUs x 1 day, --no-cache (every chart drawn)",
            rep_cold,
            "import of its libraries",
            imp,
            note=f"runs {', '.join(f'{x:.2f}' for x in cold)} s",
        ),
        *earlier,
    ]


def _section(figures: list[dict[str, Any]], elapsed: float) -> str:
    sys.path.insert(0, str(HERE))
    from run import fmt

    rows = [
        "| figure | value | baseline | baseline value | ratio | target | met | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        rows.append(
            "| "
            + " | ".join(
                [
                    f["figure"],
                    f"{fmt(f['value'])} {f.get('unit', '')}".strip(),
                    fmt(f.get("baseline")),
                    fmt(f.get("baseline_value")),
                    fmt(f.get("ratio")),
                    fmt(f.get("target")),
                    fmt(f.get("met")),
                    str(f.get("note", "")).replace("|", "/"),
                ]
            )
            + " |"
        )
    import datetime as dt

    when = f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, `python benchmarks/bench_fixed_cost.py`"
    return f"## fixed cost\n\n(ran in {elapsed:.0f} s, {when})\n\n" + "\n".join(rows) + "\n"


def main() -> int:
    quick = "--quick" in sys.argv
    work = HERE / ".work" / "fixed-cost"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    against = sys.argv[sys.argv.index("--against") + 1] if "--against" in sys.argv else None
    t0 = time.perf_counter()
    figures = run(work, quick, against)
    section = _section(figures, time.perf_counter() - t0)
    print(section)
    if not quick:
        splice(HERE / "RESULTS.md", section, "fixed cost")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
