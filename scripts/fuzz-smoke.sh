#!/usr/bin/env bash
# fuzz-smoke.sh: builds the libFuzzer targets (tests/fuzz) with clang and runs each one for a
# bounded time from its seed corpus; fails on any crash, sanitizer report, broken property,
# leak, timeout or oversized allocation. `make test` runs it after ctest, so CI fuzzes every
# change a little.
#
# Targets: gguf_fuzz (GGUF reader), snapshot_fuzz (snapshot reader), plan_fuzz (build-plan
# reader), tokenizer_fuzz (encode, decode, streaming detokenizer on both real vocabularies),
# chat_template_fuzz (template detection and rendering), client_message_fuzz (ClientMessage
# bytes through the session handler, server/session_stream.cc, over a synthetic-model engine),
# http_request_fuzz (the HTTP front door's request bodies, errors and answers, server/http).
# The tokenizer and chat template targets need the real vocabularies: STREAMD_MODEL and
# STREAMD_SPM_VOCAB (`make fuzz-smoke` sets both).
#
# It builds in its own directory (clang, sanitizers, no benchmarks, no CUDA; the server library
# for client_message_fuzz) and only the fuzz targets and their seed writers; the fuzzers run
# FUZZ_PARALLEL at a time (default 2, one core each), each in a temporary corpus directory that
# is removed afterwards. Findings are kept in $BUILD/fuzz-artifacts/ (reproduce:
# $BUILD/tests/fuzz/<fuzzer> <artifact>).
#
# Environment: FUZZ_SECONDS (per fuzzer, default 30: three rounds on 2 cores, about 95 s in
#   all after the build; it was 45 before client_message_fuzz, whose build of the server and
#   engine code costs about as much as those 3 x 15 s), FUZZ_PARALLEL, FUZZ_BUILD_DIR (default build-fuzz), JOBS (build
#   parallelism, default nproc), STREAMD_MODEL (required; the GGUF seeds include prefixes of
#   it), STREAMD_SPM_VOCAB (required), UNITY (OFF by default: the one build of CI that compiles
#   file by file, so each file it compiles is seen to compile alone, which a unity batch of
#   the other builds can hide; ON saves it 8%), CMAKE_EXTRA (more cmake flags, e.g. the ccache
#   launchers on a machine that has ccache).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

SECONDS_EACH=${FUZZ_SECONDS:-30}
PARALLEL=${FUZZ_PARALLEL:-2}
BUILD="${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
JOBS=${JOBS:-$(nproc)}
ARTIFACTS="$BUILD/fuzz-artifacts"
START=$(date +%s)
log() { echo "[fuzz-smoke $(( $(date +%s) - START ))s] $*"; }

if ! command -v clang++ > /dev/null; then
  echo "fuzz-smoke: clang++ not found; run scripts/install-deps.sh" >&2
  exit 1
fi
for var in STREAMD_MODEL STREAMD_SPM_VOCAB; do
  if [[ -z "${!var:-}" || ! -f "${!var}" ]]; then
    echo "fuzz-smoke: $var must name an existing file (make fuzz-smoke sets it)" >&2
    exit 1
  fi
done

mkdir -p "$BUILD"
log "configure $BUILD"
# A new directory is made for Ninja (scripts/sanitize-check.sh says why); one made before keeps
# the generator it has.
GENERATOR=()
[[ -f "$BUILD/CMakeCache.txt" ]] || GENERATOR=(-G Ninja)
# shellcheck disable=SC2086  # CMAKE_EXTRA is a list of flags
cmake -S . -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DSTREAMD_FUZZ=ON -DSTREAMD_SERVER=ON -DSTREAMD_BENCHMARKS=OFF -DSTREAMD_CUDA=OFF \
  -DSTREAMD_UNITY_BUILD="${UNITY:-OFF}" \
  ${CMAKE_EXTRA:-} \
  > "$BUILD/fuzz-smoke-configure.log" 2>&1 || { cat "$BUILD/fuzz-smoke-configure.log" >&2; exit 1; }
FUZZERS=(client_message_fuzz gguf_fuzz snapshot_fuzz tokenizer_fuzz chat_template_fuzz plan_fuzz
  http_request_fuzz)
log "build ${FUZZERS[*]} and their seed writers"
TARGETS=()
for name in "${FUZZERS[@]}"; do TARGETS+=("$name" "${name}_seeds"); done
cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}" > "$BUILD/fuzz-smoke-build.log" 2>&1 ||
  { tail -50 "$BUILD/fuzz-smoke-build.log" >&2; exit 1; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$ARTIFACTS"
for name in "${FUZZERS[@]}"; do mkdir -p "$WORK/${name%_fuzz}"; done
"$BUILD/tests/fuzz/gguf_fuzz_seeds" "$WORK/gguf" "$STREAMD_MODEL"
"$BUILD/tests/fuzz/snapshot_fuzz_seeds" "$WORK/snapshot"
"$BUILD/tests/fuzz/plan_fuzz_seeds" "$WORK/plan"
"$BUILD/tests/fuzz/client_message_fuzz_seeds" "$WORK/client_message"
"$BUILD/tests/fuzz/http_request_fuzz_seeds" "$WORK/http_request"
# These two check every seed they write against the fuzzer's properties (and fail if one breaks).
"$BUILD/tests/fuzz/tokenizer_fuzz_seeds" "$WORK/tokenizer"
"$BUILD/tests/fuzz/chat_template_fuzz_seeds" "$WORK/chat_template"
log "seeds: $(for name in "${FUZZERS[@]}"; do
  echo -n "$(ls "$WORK/${name%_fuzz}" | wc -l) ${name%_fuzz} "; done)"

# Per-fuzzer flags. A snapshot allocates at most its own size: a malloc above 64 MB is a
# finding. The tokenizer targets hold both vocabularies (~100 MB) and need no big allocation.
# client_message_fuzz holds one synthetic engine (a 512 KB KV pool) and small limits
# (client_message_fuzz.cc): 64 MB is far above anything one execution needs.
declare -A FLAGS=(
  [client_message_fuzz]="-max_len=4096 -malloc_limit_mb=64 -dict=tests/fuzz/client_message.dict"
  [gguf_fuzz]="-max_len=65536"
  [http_request_fuzz]="-max_len=8192 -malloc_limit_mb=64 -dict=tests/fuzz/http_request.dict"
  [snapshot_fuzz]="-max_len=16384 -malloc_limit_mb=64 -dict=tests/fuzz/snapshot.dict"
  [plan_fuzz]="-max_len=16384 -malloc_limit_mb=64 -dict=tests/fuzz/plan.dict"
  [tokenizer_fuzz]="-max_len=4096 -malloc_limit_mb=256 -dict=tests/fuzz/tokenizer.dict"
  [chat_template_fuzz]="-max_len=4096 -malloc_limit_mb=256 -dict=tests/fuzz/chat_template.dict"
)

# fuzz NAME: one fuzzer on its corpus; its log in $WORK/NAME.log.
fuzz() {
  local name=$1
  # shellcheck disable=SC2086  # FLAGS entries are lists of flags
  "$BUILD/tests/fuzz/$name" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$ARTIFACTS/$name-" ${FLAGS[$name]} \
    "$WORK/${name%_fuzz}" > "$WORK/$name.log" 2>&1
}
FAILED=0
for (( first = 0; first < ${#FUZZERS[@]}; first += PARALLEL )); do
  batch=("${FUZZERS[@]:first:PARALLEL}")
  log "run ${batch[*]} for ${SECONDS_EACH}s each, side by side"
  pids=()
  for name in "${batch[@]}"; do
    fuzz "$name" &
    pids+=($!)
  done
  for i in "${!batch[@]}"; do
    name=${batch[$i]}
    if wait "${pids[$i]}"; then
      log "$name: ok, $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$WORK/$name.log" |
        grep -o '[0-9]*$') executions, $(grep -o 'cov: [0-9]*' "$WORK/$name.log" | tail -1)"
    else
      FAILED=1
      log "$name: FAILED (log tail below; inputs in $ARTIFACTS)"
      tail -60 "$WORK/$name.log" >&2
    fi
  done
done
log "done"
exit $FAILED
