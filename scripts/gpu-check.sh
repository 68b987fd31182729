#!/usr/bin/env bash
# gpu-check.sh: everything streamd has to prove on a GPU, in one call, in under 8 minutes.
#
# For a machine with an NVIDIA GPU, the CUDA toolkit, CMake and a C++ compiler, but no gRPC,
# protobuf, spdlog or yaml-cpp, maybe no GoogleTest, nlohmann_json or PCRE2 packages, and no
# network. It builds the engine, the kernels, their tests and `streamd` (no daemon, no Google
# Benchmark), then:
#   1. runs the GPU tests (ctest -L gpu: every kernel and the whole model against the CPU
#      backend, and sessions moving between the backends: device-pool block copies, K/V images,
#      a CPU snapshot continued on CUDA and back, copies during graph decode steps) and the
#      backend-selection test;
#   2. measures device-to-device copy bandwidth and times each kernel against it
#      (kernels_cuda_bench);
#   3. times the decode step of synthetic models with random weights made on the device
#      (SmolLM2-135M's shape and Llama-3-8B's) at 1, 16, 64 and 256 sessions with windows of
#      1020 and 4092 (`streamd bench --decode-steps`), against (weights + KV bytes) / copy
#      bandwidth;
#   4. runs the engine end to end (scheduler, prefill, decode, sampling) on the SmolLM2 shape;
#   5. prints a short table last.
# Logs go to $OUT (when set; else build-gpu-check-out/), one file per phase.
#
#   scripts/gpu-check.sh prepare   on a machine that has the packages (this repository's dev
#                                  machine): copies googletest's sources, nlohmann/json.hpp,
#                                  PCRE2 and xxHash (headers + static libraries) into
#                                  third_party/ (~6 MB),
#                                  an ignored folder to carry along; CMake uses each copy only
#                                  when the package is missing.
#   scripts/gpu-check.sh           on the GPU machine.
# Environment: GPU_CHECK_BUDGET_S (default 470), GPU_CHECK_BUILD_DIR (default build-gpu),
#   GPU_CHECK_CUDA_ARCH (default native), GPU_CHECK_CMAKE_FLAGS (extra configure flags, e.g.
#   "-DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON" to rehearse the carried copies on a dev machine).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

if [[ "${1:-}" == "prepare" ]]; then
  set -e
  rm -rf third_party/googletest third_party/nlohmann third_party/pcre2 third_party/xxhash
  mkdir -p third_party/nlohmann third_party/pcre2/include third_party/pcre2/lib \
    third_party/xxhash/include third_party/xxhash/lib
  cp -r /usr/src/googletest third_party/googletest
  cp -r /usr/include/nlohmann third_party/nlohmann/
  cp /usr/include/pcre2.h third_party/pcre2/include/
  cp "$(gcc -print-file-name=libpcre2-8.a)" third_party/pcre2/lib/
  cp /usr/include/xxhash.h third_party/xxhash/include/
  cp "$(gcc -print-file-name=libxxhash.a)" third_party/xxhash/lib/
  du -sh third_party
  exit 0
fi

START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-470}
OUT_DIR="${OUT:-$ROOT/build-gpu-check-out}"
BUILD="${GPU_CHECK_BUILD_DIR:-$ROOT/build-gpu}"
ARCH="${GPU_CHECK_CUDA_ARCH:-native}"
JOBS=$(nproc)
mkdir -p "$OUT_DIR"
: > "$OUT_DIR/gpu-check.log"

elapsed() { echo $(( $(date +%s) - START )); }
log() { echo "[gpu-check $(elapsed)s] $*" | tee -a "$OUT_DIR/gpu-check.log"; }
# run NAME TIMEOUT_S CMD...: logs to $OUT_DIR/NAME.log, never past the overall budget.
run() {
  local name=$1 limit=$2
  shift 2
  local left=$(( BUDGET - $(elapsed) - 10 ))
  (( limit > left )) && limit=$left
  if (( limit < 5 )); then
    log "$name: skipped, the ${BUDGET}s budget is spent"
    echo "skipped: time budget spent" > "$OUT_DIR/$name.log"
    return 124
  fi
  log "$name (limit ${limit}s): $*"
  timeout --kill-after=5 "$limit" "$@" > "$OUT_DIR/$name.log" 2>&1
  local rc=$?
  log "$name: exit $rc"
  return $rc
}

GENERATOR=()
command -v ninja > /dev/null && GENERATOR=(-G Ninja)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
  > "$OUT_DIR/gpu.txt" 2>/dev/null || echo "no GPU listed by nvidia-smi" > "$OUT_DIR/gpu.txt"
log "GPU: $(head -1 "$OUT_DIR/gpu.txt")"

# ---- 1. build -------------------------------------------------------------------------------
BUILD_OK=no
TESTS_OK=no
SKIP_REASON=""
if run configure 120 cmake -S . -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
     -DSTREAMD_CUDA=ON -DSTREAMD_SERVER=OFF -DSTREAMD_BENCHMARKS=OFF \
     -DCMAKE_CUDA_ARCHITECTURES="$ARCH" ${GPU_CHECK_CMAKE_FLAGS:-} &&
   run build 300 cmake --build "$BUILD" -j "$JOBS" --target kernels_cuda_test cuda_model_test \
     backend_test kernels_cuda_bench streamd; then
  BUILD_OK=yes
fi
STREAMD="$BUILD/tools/streamd"

# ---- 2. tests ------------------------------------------------------------------------------
TESTS="not run"
if [[ $BUILD_OK == yes ]]; then
  run gpu-tests 200 ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 180 &&
    TESTS_OK=yes
  run backend-test 30 "$BUILD/engine/backends/backend_test" || TESTS_OK=no
  TESTS=$(grep -E "tests passed|tests failed" "$OUT_DIR/gpu-tests.log" | tail -1)
  SKIPPED=$(grep -cE "Test +#[0-9]+: .*Skipped" "$OUT_DIR/gpu-tests.log" || true)
  [[ -n "$TESTS" ]] && TESTS="$TESTS; $SKIPPED of them skipped" || TESTS="did not finish"
  if (( SKIPPED > 0 )); then
    # Why (gtest prints the GTEST_SKIP message): one run of one test, verbose.
    "$BUILD/kernels/cuda/kernels_cuda_test" --gtest_filter='DecodeAttentionTest.*' \
      > "$OUT_DIR/skip-reason.log" 2>&1 || true
    SKIP_REASON=$(grep -m1 -o "no CUDA device.*" "$OUT_DIR/skip-reason.log" || true)
  fi
fi

# ---- 3. kernels against copy bandwidth ---------------------------------------------------------
COPY=""
if [[ $BUILD_OK == yes ]]; then
  run kernels-bench 90 "$BUILD/kernels/cuda/kernels_cuda_bench"
  COPY=$(sed -n 's/^copy_gbps=//p' "$OUT_DIR/kernels-bench.log")
fi

# ---- 4. decode steps of synthetic models -------------------------------------------------------
REF=()
[[ -n "$COPY" ]] && REF=(--reference-gbps "$COPY")
if [[ $BUILD_OK == yes ]]; then
  for model in smollm2 llama3-8b; do
    for window in 1020 4092; do
      run "decode-$model-w$window" 60 "$STREAMD" bench --backend cuda --synthetic "$model" \
        --sessions 1,16,64,256 --window "$window" --decode-steps 20 "${REF[@]}" --json
    done
  done
  # ---- 5. the engine end to end (scheduler, chunked prefill, decode, host sampling) ----------
  run engine-smollm2 60 "$STREAMD" bench --backend cuda --synthetic smollm2 \
    --sessions 1,16,64,256 --prompt-tokens 256 --gen-tokens 64 --window 1020 --json
fi

# ---- the table -----------------------------------------------------------------------------
{
  echo
  echo "== gpu-check summary ($(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$OUT_DIR/gpu.txt"), $(elapsed)s) =="
  printf "%-34s %s\n" "build" "$BUILD_OK"
  printf "%-34s %s\n" "GPU tests (ctest -L gpu)" "$TESTS"
  [[ -n "$SKIP_REASON" ]] && printf "%-34s %s\n" "  skipped because" "$SKIP_REASON"
  snap() {
    grep -cE "Test +#[0-9]+: CudaSnapshotTest\..*$1" "$OUT_DIR/gpu-tests.log" 2>/dev/null || true
  }
  printf "%-34s %s passed, %s failed, %s skipped\n" "  of them CPU<->CUDA sessions" \
    "$(snap Passed)" "$(snap Failed)" "$(snap Skipped)"
  printf "%-34s %s\n" "backend test" \
    "$(grep -E '^\[  (PASSED|FAILED)' "$OUT_DIR/backend-test.log" 2>/dev/null | tr '\n' ' ')"
  printf "%-34s %s GB/s\n" "device-to-device copy" "${COPY:-?}"
  [[ -z "$COPY" ]] && printf "%-34s %s\n" "  kernel bench" \
    "$(tail -1 "$OUT_DIR/kernels-bench.log" 2>/dev/null)"
  for w in 1020 4092; do
    for n in 64 256; do
      pct=$(awk -v n="sessions=$n" -v w="W=$w" \
        '$1=="decode_attention" && $2=="llama3-8b" && $3==n && $4==w {print $8}' \
        "$OUT_DIR/kernels-bench.log" 2>/dev/null)
      printf "%-34s %s of copy (target >= 70%%)\n" "decode attn 8B n=$n W=$w" "${pct:-?}"
    done
  done
  x=$(awk '$1=="64" && NF==8 {print $8}' "$OUT_DIR/decode-llama3-8b-w1020.log" 2>/dev/null)
  printf "%-34s %sx of (weights+KV)/copy (target <= 1.5)\n" "8B decode step, 64 sessions W=1020" "${x:-?}"
  echo
  printf "%-10s %-6s %12s %12s %12s %12s   (decode tok/s, one step of N sessions)\n" \
    "model" "W" "N=1" "N=16" "N=64" "N=256"
  for model in smollm2 llama3-8b; do
    for w in 1020 4092; do
      f="$OUT_DIR/decode-$model-w$w.log"
      row=()
      for n in 1 16 64 256; do
        v=$(awk -v n="$n" '$1==n && NF==8 {print $4} $1==n && $2=="does" {print "no-fit"}' "$f" 2>/dev/null)
        row+=("${v:-?}")
      done
      printf "%-10s %-6s %12s %12s %12s %12s\n" "$model" "$w" "${row[@]}"
    done
  done
  e=$(awk '$1 ~ /^[0-9]+$/ && NF >= 15 {printf "N=%s %s tok/s; ", $1, $2}' \
    "$OUT_DIR/engine-smollm2.log" 2>/dev/null)
  printf "%-34s %s\n" "engine smollm2 (decode tok/s)" "${e:-?}"
  echo "logs: $OUT_DIR"
} | tee "$OUT_DIR/summary.txt"
[[ $BUILD_OK == yes && $TESTS_OK == yes ]]
