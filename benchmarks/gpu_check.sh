#!/usr/bin/env bash
# The prepared check for a machine with an NVIDIA GPU and no network (the "GPU check" of benchmarks/RESULTS.md).
#
#   bash benchmarks/build_gpu_check_wheels.sh        # here, with network: the agent's wheels -> benchmarks/wheels/
#   bash benchmarks/gpu_check.sh [--out FILE]        # there: install from those wheels, check, write one JSON
#
# It installs the agent (gpuaudit + nvidia-ml-py, DuckDB, typer and their dependencies) into a fresh venv from
# benchmarks/wheels/ (no index), then runs `agent status`, `selftest --json` (the calibrated load, ~1 minute)
# and a GPU_CHECK_RUN_S (60) second `agent run` at 1 s while `selftest --hold` keeps the load at k = all SMs,
# d = 0.5, and writes the facts to one small JSON (device, driver, GPM, every step's expected vs measured, what
# the agent run recorded). Under 5 minutes. Exit 0 when everything passed.
#
#   --simulate   the same path against the fake NVML and a simulated load (the test suite runs this)
#   --python PY  use an interpreter that already has gpuaudit instead of installing from the wheels
#   --out FILE   where the JSON goes (default: $OUT/gpu_check.json, or ./gpu_check.json)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WHEELS="${GPU_CHECK_WHEELS:-$HERE/wheels}"
RUN_S="${GPU_CHECK_RUN_S:-60}"
SIMULATE=0
PY=""
RESULT="${OUT:-.}/gpu_check.json"
while [ $# -gt 0 ]; do
  case "$1" in
    --simulate) SIMULATE=1 ;;
    --python) PY="$2"; shift ;;
    --out) RESULT="$2"; shift ;;
    *) echo "gpu_check: error: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")"
START=$(date +%s)
say() { echo "gpu_check: $*" >&2; }

if [ -z "$PY" ]; then
  BASE="$(command -v python3 || true)"
  [ -n "$BASE" ] || { say "error: no python3 on this machine"; exit 2; }
  TAG="$("$BASE" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
  ls "$WHEELS"/gpuaudit-*.whl >/dev/null 2>&1 || {
    say "error: no gpuaudit wheel in $WHEELS: build them first (bash benchmarks/build_gpu_check_wheels.sh)"; exit 2; }
  ls "$WHEELS"/duckdb-*-"$TAG"-*.whl >/dev/null 2>&1 || {
    say "error: no duckdb wheel for $TAG in $WHEELS: build them for this Python" \
        "(bash benchmarks/build_gpu_check_wheels.sh ${TAG:2:1}.${TAG:3})"; exit 2; }
  say "installing the agent from $WHEELS into $WORK/venv ($TAG)"
  "$BASE" -m venv --without-pip "$WORK/venv"
  PIP_WHEEL="$(ls "$WHEELS"/pip-*.whl | head -1)"
  # pip runs from its own wheel: the venv needs no ensurepip (Debian's python3 may lack it), nothing is downloaded.
  "$WORK/venv/bin/python" "$PIP_WHEEL/pip" install --quiet --no-index --find-links "$WHEELS" --no-cache-dir \
    gpuaudit >"$WORK/install.log" 2>&1 || { say "error: install failed:"; tail -5 "$WORK/install.log" >&2; exit 2; }
  PY="$WORK/venv/bin/python"
fi
GA=("$PY" -m gpuaudit)
SIM_AGENT=()
SIM_SELFTEST=()
if [ "$SIMULATE" = 1 ]; then
  SIM_AGENT=(--simulate static --simulate-gpus 1)
  SIM_SELFTEST=(--simulate)
fi
DATA="$WORK/data"

say "agent status"
set +e
timeout 60 "${GA[@]}" agent status --json --data "$DATA" --host gpu-check "${SIM_AGENT[@]}" >"$WORK/status.json" 2>"$WORK/status.err"
STATUS_RC=$?
say "selftest --json (about a minute on a GPU)"
timeout 240 "${GA[@]}" selftest --json "${SIM_SELFTEST[@]}" >"$WORK/selftest.json" 2>"$WORK/selftest.err"
SELFTEST_RC=$?

say "agent run for ${RUN_S} s at 1 s while the load holds k = all SMs, d = 0.5"
timeout $((RUN_S + 90)) "${GA[@]}" selftest --hold $((RUN_S + 15)) "${SIM_SELFTEST[@]}" \
  >"$WORK/hold.jsonl" 2>"$WORK/hold.err" &
HOLD_PID=$!
for _ in $(seq 600); do  # until the load runs (its first line), at most 60 s
  [ -s "$WORK/hold.jsonl" ] && break
  kill -0 "$HOLD_PID" 2>/dev/null || break
  sleep 0.1
done
timeout $((RUN_S + 60)) "${GA[@]}" agent run --interval 1 --duration "$RUN_S" --flush-interval 10 --data "$DATA" \
  --host gpu-check "${SIM_AGENT[@]}" 2>"$WORK/agent.err"
AGENT_RC=$?
wait "$HOLD_PID"  # the hold ends ~15 s after the run (it started first)
HOLD_RC=$?
set -e

mkdir -p "$(dirname "$RESULT")"
"$PY" "$HERE/gpu_check_summary.py" --work "$WORK" --out "$RESULT" --simulated "$SIMULATE" \
  --rc status="$STATUS_RC" selftest="$SELFTEST_RC" hold="$HOLD_RC" agent_run="$AGENT_RC" \
  --elapsed-s "$(( $(date +%s) - START ))" --run-s "$RUN_S"
