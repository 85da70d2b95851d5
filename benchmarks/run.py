"""Run every benchmark and write benchmarks/RESULTS.md.

    python benchmarks/run.py            # full sizes (the figures in RESULTS.md)
    python benchmarks/run.py --quick    # small sizes, a smoke test of the benchmarks themselves
    python benchmarks/run.py --only simulate,agent

Each benchmarks/bench_<area>.py exposes `run(work: Path, quick: bool) -> list[dict]`; every figure is
measured side by side with its baseline in the same run and reported as a ratio, because machines are noisy.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
# spark: stage 1 on Spark vs DuckDB at 100 M rows; fleet: 1,000 GPUs x 90 days (~778 M rows) end to end;
# layout: `gpuaudit report` at 100 M rows, the code before the restructure against the code now;
# concurrency: readers during a compaction and a push prune of >= 3,000 small files; fixed_cost: the report of a
# 2-GPU, 1-day fleet against the import of its libraries.
AREAS = ("simulate", "agent", "analyzer", "import", "spark", "fleet", "layout", "concurrency", "fixed_cost")


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    py = platform.python_version()
    return f"{platform.node()}: {os.cpu_count()} cores ({cpu}), {mem_gb:.0f} GiB RAM, Python {py}"


def fmt(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def area_child(module_name: str, work: Path, out_json: Path, quick: bool) -> int:
    sys.path.insert(0, str(HERE))
    try:
        figures = importlib.import_module(module_name).run(work, quick)
    except Exception:  # reported by the parent; the other areas still run
        traceback.print_exc()
        return 1
    out_json.write_text(json.dumps(figures, default=str), encoding="utf-8")
    return 0


def main() -> int:
    if len(sys.argv) >= 5 and sys.argv[1] == "--area-child":
        return area_child(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), "--quick" in sys.argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    ap.add_argument("--only", default="", help="comma-separated areas: " + ",".join(AREAS))
    ap.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    args = ap.parse_args()
    areas = [a for a in AREAS if not args.only or a in args.only.split(",")]
    work = HERE / ".work"
    sys.path.insert(0, str(HERE))
    sections: list[str] = []
    raw: dict[str, object] = {}
    failed = False
    for area in areas:
        module_name = f"bench_{'importer' if area == 'import' else area}"
        if not (HERE / f"{module_name}.py").exists():
            module_name = f"bench_{area}"
        print(f"== {area}", flush=True)
        area_work = work / area
        shutil.rmtree(area_work, ignore_errors=True)
        area_work.mkdir(parents=True)
        t0 = time.perf_counter()
        # Each area in its own process: one area's memory never inflates another's RSS figures (Linux
        # carries a parent's peak RSS into its children's ru_maxrss).
        out_json = area_work / "figures.json"
        proc = subprocess.run([sys.executable, __file__, "--area-child", module_name, str(area_work), str(out_json)]
                              + (["--quick"] if args.quick else []), cwd=HERE.parent)
        elapsed = time.perf_counter() - t0
        if proc.returncode != 0 or not out_json.exists():
            failed = True
            sections.append(f"## {area}\n\nFAILED (exit {proc.returncode}); see the output above.\n")
            continue
        figures = json.loads(out_json.read_text())
        raw[area] = figures
        rows = ["| figure | value | baseline | baseline value | ratio | target | met | note |",
                "|---|---|---|---|---|---|---|---|"]
        for f in figures:
            rows.append("| " + " | ".join([
                f["figure"], f"{fmt(f['value'])} {f.get('unit', '')}".strip(), fmt(f.get("baseline")),
                fmt(f.get("baseline_value")), fmt(f.get("ratio")), fmt(f.get("target")), fmt(f.get("met")),
                str(f.get("note", "")).replace("|", "/"),
            ]) + " |")
        when = f", {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, `python benchmarks/run.py --only {area}`" \
            if args.only else ""
        sections.append(f"## {area}\n\n(ran in {elapsed:.0f} s{when})\n\n" + "\n".join(rows) + "\n")
        shutil.rmtree(area_work, ignore_errors=True)
    if args.only and args.out.exists():
        # A partial run replaces its own areas' sections and figures; every other area's last result stays.
        from bench_cache import splice

        for section in sections:
            splice(args.out, section, section.split("\n", 1)[0].removeprefix("## "))
        raw_path = args.out.with_suffix(".json")
        kept = json.loads(raw_path.read_text()) if raw_path.exists() else {}
        raw_path.write_text(json.dumps({**kept, **raw}, indent=1, default=str), encoding="utf-8")
        print(f"updated {', '.join(areas)} in {args.out}")
        return 1 if failed else 0
    header = (
        "# Benchmark results\n\n"
        f"- date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC\n- machine: {machine()}\n"
        f"- mode: {'quick (small sizes)' if args.quick else 'full'}\n"
        "- reproduce: `make bench` (or `python benchmarks/run.py`)\n\n"
        "Every figure is measured in the same run as its baseline; ratios are what to compare across machines.\n\n"
    )
    # The GPU check runs on a GPU machine (benchmarks/gpu_check.sh), not here: its last result is kept.
    from gpu_check_summary import _json, markdown

    sections.append(markdown(_json(HERE / "gpu_check.json")))
    args.out.write_text(header + "\n".join(sections), encoding="utf-8")
    (args.out.with_suffix(".json")).write_text(json.dumps(raw, indent=1, default=str), encoding="utf-8")
    print(f"wrote {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
