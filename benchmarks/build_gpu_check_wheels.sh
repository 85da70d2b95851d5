#!/usr/bin/env bash
# Build what benchmarks/gpu_check.sh installs on a GPU machine without network: the gpuaudit wheel and the
# agent's dependencies (nvidia-ml-py, DuckDB, typer and theirs) as wheels for Linux x86_64, plus pip's own wheel.
#
#   bash benchmarks/build_gpu_check_wheels.sh [PYTHON_VERSION ...]     # default: this python3's version
#
# DuckDB's wheel (~25 MB) is per Python version: build for the version the GPU machine runs. The folder must
# stay well under the 64 MiB a device run can carry; the script refuses above 56 MiB.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
WHEELS="${GPU_CHECK_WHEELS:-$HERE/wheels}"
PY="${PYTHON:-python3}"
VERSIONS=("$@")
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=("$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')")
rm -rf "$WHEELS" && mkdir -p "$WHEELS"
"$PY" -m pip wheel --quiet --no-deps --wheel-dir "$WHEELS" "$REPO"
WHEEL="$(ls "$WHEELS"/gpuaudit-*.whl)"
for v in "${VERSIONS[@]}"; do
  "$PY" -m pip download --quiet --only-binary=:all: --python-version "$v" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --dest "$WHEELS" "$WHEEL"
done
"$PY" -m pip download --quiet --only-binary=:all: --no-deps --dest "$WHEELS" pip
ls -l "$WHEELS" | awk 'NR > 1 {printf "%10d  %s\n", $5, $9}'
BYTES=$(du -sb "$WHEELS" | cut -f1)
echo "total: $((BYTES / 1024 / 1024)) MiB in $WHEELS"
if [ "$BYTES" -gt $((56 * 1024 * 1024)) ]; then
  echo "build_gpu_check_wheels: error: over 56 MiB: too large to carry to a device run (64 MiB in all)" >&2
  exit 1
fi
