#!/usr/bin/env bash
# fuzz-smoke.sh: builds the libFuzzer targets (tests/fuzz) with clang and runs each one for a
# bounded time from its seed corpus; fails on any crash, sanitizer report, leak, timeout or
# oversized allocation. `make test` runs it after ctest, so CI fuzzes every change a little.
#
# It builds in its own directory (clang, sanitizers, no daemon, no benchmarks, no CUDA) and only
# the fuzz targets and their seed writers; the fuzzers run side by side, one core each, in a
# temporary corpus directory that is removed afterwards. Findings are kept in
# $BUILD/fuzz-artifacts/ (reproduce: $BUILD/tests/fuzz/<fuzzer> <artifact>).
#
# Environment: FUZZ_SECONDS (per fuzzer, default 45), FUZZ_BUILD_DIR (default build-fuzz),
#   JOBS (build parallelism, default nproc), STREAMD_MODEL (optional: the GGUF seeds then include
#   prefixes of the real model).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

SECONDS_EACH=${FUZZ_SECONDS:-45}
BUILD="${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
JOBS=${JOBS:-$(nproc)}
ARTIFACTS="$BUILD/fuzz-artifacts"
START=$(date +%s)
log() { echo "[fuzz-smoke $(( $(date +%s) - START ))s] $*"; }

if ! command -v clang++ > /dev/null; then
  echo "fuzz-smoke: clang++ not found; run scripts/install-deps.sh" >&2
  exit 1
fi

mkdir -p "$BUILD"
log "configure $BUILD"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DSTREAMD_FUZZ=ON -DSTREAMD_SERVER=OFF -DSTREAMD_BENCHMARKS=OFF -DSTREAMD_CUDA=OFF \
  > "$BUILD/fuzz-smoke-configure.log" 2>&1 || { cat "$BUILD/fuzz-smoke-configure.log" >&2; exit 1; }
log "build gguf_fuzz snapshot_fuzz and their seed writers"
cmake --build "$BUILD" -j "$JOBS" \
  --target gguf_fuzz gguf_fuzz_seeds snapshot_fuzz snapshot_fuzz_seeds > "$BUILD/fuzz-smoke-build.log" 2>&1 ||
  { tail -50 "$BUILD/fuzz-smoke-build.log" >&2; exit 1; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/gguf" "$WORK/snapshot" "$ARTIFACTS"
MODEL_ARG=()
[[ -n "${STREAMD_MODEL:-}" && -f "${STREAMD_MODEL:-}" ]] && MODEL_ARG=("$STREAMD_MODEL")
"$BUILD/tests/fuzz/gguf_fuzz_seeds" "$WORK/gguf" "${MODEL_ARG[@]}"
"$BUILD/tests/fuzz/snapshot_fuzz_seeds" "$WORK/snapshot"
log "seeds: $(ls "$WORK/gguf" | wc -l) GGUF, $(ls "$WORK/snapshot" | wc -l) snapshot"

# fuzz NAME EXTRA_FLAGS...: one fuzzer on its corpus; its log in $WORK/NAME.log.
fuzz() {
  local name=$1
  shift
  "$BUILD/tests/fuzz/$name" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$ARTIFACTS/$name-" "$@" "$WORK/${name%_fuzz}" \
    > "$WORK/$name.log" 2>&1
}
log "run gguf_fuzz and snapshot_fuzz for ${SECONDS_EACH}s each, side by side"
fuzz gguf_fuzz -max_len=65536 &
GGUF_PID=$!
# A snapshot allocates at most its own size: a malloc above 64 MB is a finding.
fuzz snapshot_fuzz -max_len=16384 -malloc_limit_mb=64 -dict=tests/fuzz/snapshot.dict &
SNAPSHOT_PID=$!
FAILED=0
for pair in "gguf_fuzz:$GGUF_PID" "snapshot_fuzz:$SNAPSHOT_PID"; do
  name=${pair%%:*}
  if wait "${pair#*:}"; then
    log "$name: ok, $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$WORK/$name.log" |
      grep -o '[0-9]*$') executions, $(grep -o 'cov: [0-9]*' "$WORK/$name.log" | tail -1)"
  else
    FAILED=1
    log "$name: FAILED (log tail below; inputs in $ARTIFACTS)"
    tail -60 "$WORK/$name.log" >&2
  fi
done
log "done"
exit $FAILED
