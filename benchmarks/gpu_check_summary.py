"""The one JSON of benchmarks/gpu_check.sh: device, driver, GPM, the selftest's steps (expected vs measured) and
what a 60 s `agent run` recorded while `selftest --hold` kept the load at k = all SMs, d = 0.5.

Runs under the agent install (DuckDB reads the agent's Parquet; no polars)."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path
from typing import Any

SM_TOLERANCE = 0.05
DUTY_TOLERANCE = 0.10
SKIP_INTERVALS = 2  # the agent run's first intervals may hold the load's start


def _json(path: Path) -> Any:
    try:
        text = path.read_text()
        return json.loads(text) if text.strip() else None
    except (OSError, ValueError):
        return None


def _jsonl(path: Path) -> list[Any]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def _tail(path: Path) -> str | None:
    try:
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    except OSError:
        return None
    return lines[-1][:500] if lines else None


def agent_run_check(data: Path, hold: dict[str, Any] | None, simulated: bool) -> dict[str, Any]:
    """What the agent run recorded on the held GPU, against what the load made."""
    import duckdb

    samples = list((data / "gpu_samples").rglob("*.parquet"))
    out: dict[str, Any] = {"sample_files": len(samples)}
    if not samples or hold is None:
        return {**out, "ok": False, "why": "no samples written" if not samples else "the load never ran"}
    dev = hold["device"]
    con = duckdb.connect()
    # Simulated, the agent run's fake GPU is another (its UUID too): its rows are what there is to count.
    where = "TRUE" if simulated else "gpu_uuid = ? AND mig_instance IS NOT DISTINCT FROM ?"
    rows = con.execute(
        "SELECT ts, interval_s, sm_active, duty_cycle, power_w, source FROM read_parquet(?, hive_partitioning=true) "
        f"WHERE {where} ORDER BY ts",
        [[str(p) for p in samples], *([] if simulated else [dev["uuid"], dev["mig_instance"]])]).fetchall()
    used = rows[SKIP_INTERVALS:]
    out.update(rows=len(rows), rows_compared=len(used))

    def mean(i: int) -> float | None:
        vals = [(r[i], r[1]) for r in used if r[i] is not None]
        return sum(v * w for v, w in vals) / sum(w for _, w in vals) if vals else None

    sm, duty = mean(2), mean(3)
    procs = list((data / "gpu_processes").rglob("*.parquet"))
    pids = set()
    if procs:
        pids = {r[0] for r in con.execute("SELECT DISTINCT pid FROM read_parquet(?, hive_partitioning=true) "
                                          "WHERE gpu_uuid = ?", [[str(p) for p in procs], dev["uuid"]]).fetchall()}
    out.update(expected_sm_active=hold["expected_sm_active"], measured_sm_active=sm,
               expected_duty_cycle=hold["expected_duty_cycle"], measured_duty_cycle=duty, power_w=mean(4),
               sources=sorted({r[5] for r in used}), load_pid=hold["load"]["pid"],
               load_pid_recorded=hold["load"]["pid"] in pids)
    if simulated:  # `agent run --simulate` drives its own fake GPU, which does not see the simulated load
        return {**out, "ok": bool(used), "why": "simulated: the agent run's fake GPU is not the load's; "
                "only that it ran and wrote rows is checked"}
    checks = [out["load_pid_recorded"], bool(used)]
    if sm is not None:
        checks.append(abs(sm - hold["expected_sm_active"]) <= SM_TOLERANCE)
    if duty is not None:
        checks.append(abs(duty - hold["expected_duty_cycle"]) <= DUTY_TOLERANCE)
    return {**out, "ok": all(checks) and (sm is not None or duty is not None)}


NOT_RUN = ("Not run on GPU hardware yet: no session so far had a GPU machine. The script is ready and tested "
           "end to end against the fake NVML (tests/test_gpu_check.py). On a GPU machine: `bash "
           "benchmarks/gpu_check.sh --out benchmarks/gpu_check.json` (wheels from `bash "
           "benchmarks/build_gpu_check_wheels.sh`), then `python benchmarks/gpu_check_summary.py --markdown "
           "benchmarks/gpu_check.json` gives this section.")


def _n(v: Any, fmt: str = ".3f") -> str:
    return "" if v is None else format(v, fmt)


def markdown(result: dict[str, Any] | None) -> str:
    """The RESULTS.md section for one gpu_check.json (or the note that there is none yet)."""
    head = "## GPU check (benchmarks/gpu_check.sh)\n\n"
    if result is None:
        return head + NOT_RUN + "\n"
    st = result.get("selftest") or {}
    dev, load = st.get("device") or {}, st.get("load") or {}
    lines = [
        f"- verdict: **{result['verdict']}**{' (simulated)' if result['simulated'] else ''}, in "
        f"{_n(result.get('elapsed_s'), '.0f')} s; gpuaudit {result['gpuaudit_version']}, Python {result['python']}",
        f"- device: {dev.get('name')} ({dev.get('uuid')}), driver {result.get('driver_version')}, "
        f"{dev.get('sm_count')} SMs, compute capability {dev.get('compute_capability')}, "
        f"GPM {'yes' if result.get('gpm') else 'no'}",
        f"- load: {load.get('backend')} backend, {load.get('blocks_per_sm')} block per SM "
        f"({load.get('shared_memory_per_block_bytes')} B shared memory each), period {load.get('period_s')} s",
        "", "| k | d | SM expected | SM measured | duty expected | duty measured | power W | energy Δ idle J | "
        "process | passed |", "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in st.get("steps", []):
        lines.append(f"| {s['k']} | {s['d']} | {_n(s['expected_sm_active'])} | {_n(s['measured_sm_active'])} | "
                     f"{s['expected_duty_cycle']} | {_n(s['measured_duty_cycle'])} | {_n(s['power_w'], '.1f')} | "
                     f"{_n(s['energy_delta_j'], '.0f')} | {s['attribution_ok']} | {s['passed']} |")
    run = result.get("agent_run") or {}
    lines += ["", f"- agent run ({run.get('seconds')} s at 1 s, load held at k = all, d = 0.5): SM activity "
              f"{_n(run.get('measured_sm_active'))} (expected {_n(run.get('expected_sm_active'))}), duty cycle "
              f"{_n(run.get('measured_duty_cycle'))} (expected {_n(run.get('expected_duty_cycle'))}), load pid "
              f"recorded: {run.get('load_pid_recorded')}, ok: {run.get('ok')}"]
    lines += [f"- note: {n}" for n in st.get("notes") or []]
    return head + "\n".join(lines) + "\n"


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--markdown":
        print(markdown(_json(Path(sys.argv[2]))), end="")
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--simulated", type=int, default=0)
    ap.add_argument("--rc", nargs="*", default=[])
    ap.add_argument("--elapsed-s", type=float, default=None)
    ap.add_argument("--run-s", type=float, default=None)
    args = ap.parse_args()
    w, simulated = args.work, bool(args.simulated)
    rc = {k: int(v) for k, v in (item.split("=", 1) for item in args.rc)}
    status = _json(w / "status.json") or {}
    selftest = _json(w / "selftest.json")
    hold_lines = _jsonl(w / "hold.jsonl")
    hold = hold_lines[0] if hold_lines else None
    steps = [{k: s.get(k) for k in ("k", "d", "expected_sm_active", "measured_sm_active", "expected_duty_cycle",
                                    "measured_duty_cycle", "power_w", "energy_delta_j", "attribution_ok", "passed")}
             for s in (selftest or {}).get("steps", [])]
    run = agent_run_check(w / "data", hold, simulated)
    import gpuaudit

    result = {
        "simulated": simulated, "gpuaudit_version": gpuaudit.__version__, "python": platform.python_version(),
        "machine": platform.machine(), "elapsed_s": args.elapsed_s, "exit_codes": rc,
        "driver_version": status.get("driver_version"), "nvml_error": status.get("nvml_error"),
        "devices": [{k: d.get(k) for k in ("index", "name", "uuid", "mig_instance", "path")}
                    for d in status.get("devices", [])],
        "gpm": (selftest or {}).get("device", {}).get("gpm"),
        "selftest": None if selftest is None else {
            "passed": selftest.get("passed"), "device": selftest.get("device"), "load": selftest.get("load"),
            "idle": {k: v for k, v in selftest.get("idle", {}).items() if k != "before_load"},
            "notes": selftest.get("notes"), "steps": steps},
        "selftest_error": None if selftest is not None else _tail(w / "selftest.err"),
        "agent_run": {"seconds": args.run_s, **run, "error": _tail(w / "agent.err") if rc.get("agent_run") else None},
        "hold_error": None if hold else _tail(w / "hold.err"),
    }
    ok = (rc.get("selftest") == 0 and rc.get("agent_run") == 0 and rc.get("hold") == 0
          and rc.get("status") in (0, 3) and bool(run.get("ok")))
    result["verdict"] = "pass" if ok else "fail"
    args.out.write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
    print(f"gpu_check: {result['verdict']}: {args.out}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
