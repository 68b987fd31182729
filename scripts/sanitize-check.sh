#!/usr/bin/env bash
# sanitize-check.sh: the unit tests under the sanitizers. `make sanitize` runs it; .ci/run runs
# it after `make test`.
#
#   asan  ASan + UBSan (-fsanitize=address,undefined -fno-sanitize-recover=undefined): every
#         unit test of kernels/, engine/ and server/, in $ASAN_BUILD_DIR (build-asan).
#   tsan  TSan: the test binaries whose code runs on more than one thread (thread pool, CPU
#         backend, engine and persister, session registry, outbox, service, metrics), in
#         $TSAN_BUILD_DIR (build-tsan), with tests/sanitizers/tsan.supp.
#
# GCC, as the main build: the sanitizers check the code the shipped binary is compiled with (its
# optimizer, its intrinsics headers), and the GCC-only tests (kernels/cpu/cpu_features_test.cc)
# run too; clang's sanitizers run in the fuzz build (scripts/fuzz-smoke.sh). -O1 -g (no
# NDEBUG): fast enough to run, with full stacks.
#
# Both build with CUDA, benchmarks and fuzzers off and only the test binaries they run; the e2e
# tests (tests/, tests/e2e: a daemon per test) and the GPU tests are not run. A sanitizer
# report fails the test that printed it (halt_on_error / -fno-sanitize-recover), a leak too.
#
# Usage: scripts/sanitize-check.sh [asan|tsan|all]   (default all)
# Environment: JOBS (build and ctest parallelism, default nproc), STREAMD_MODEL,
#   STREAMD_SPM_VOCAB and STREAMD_GEMMA_MODEL (the real vocabularies the tokenizer, chat format,
#   GGUF and fingerprint tests read), STREAMD_VOCAB_DIR (llama.cpp's test vocabularies and
#   vectors, the golden tokenizer test; `make sanitize` sets all four), ASAN_BUILD_DIR,
#   TSAN_BUILD_DIR, UNITY (ON by default: unity builds, CMakeLists.txt), CMAKE_EXTRA (more cmake
#   flags, e.g. the ccache launchers).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

WHAT=${1:-all}
JOBS=${JOBS:-$(nproc)}
ASAN_BUILD="${ASAN_BUILD_DIR:-$ROOT/build-asan}"
TSAN_BUILD="${TSAN_BUILD_DIR:-$ROOT/build-tsan}"
START=$(date +%s)
log() { echo "[sanitize $(( $(date +%s) - START ))s] $*"; }

case "$WHAT" in asan|tsan|all) ;; *) echo "usage: $0 [asan|tsan|all]" >&2; exit 2 ;; esac
for var in STREAMD_MODEL STREAMD_SPM_VOCAB STREAMD_GEMMA_MODEL; do
  if [[ -z "${!var:-}" || ! -f "${!var}" ]]; then
    echo "sanitize-check: $var must name an existing file (make sanitize sets it)" >&2
    exit 1
  fi
done
if [[ -z "${STREAMD_VOCAB_DIR:-}" || ! -d "$STREAMD_VOCAB_DIR" ]]; then
  echo "sanitize-check: STREAMD_VOCAB_DIR must name a directory (make sanitize sets it)" >&2
  exit 1
fi

# Unit test binaries of kernels/, engine/ and server/ (CUDA off: no GPU tests).
ASAN_TARGETS=(kernels_cpu_test kernels_repack_test util_test cache_test gguf_test tokenizer_test
  sampling_test model_check_test
  snapshot_test build_plan_test model_test backend_test core_test sessions_test config_test metrics_test
  server_test http_test http_server_test http_server_tls_test)
# The test binaries whose code under test runs threads; the rest are single-threaded.
# model_test: the forward pass on the thread pool, token-parallel decode among it (13 s).
# http_server_test: the HTTP server's worker threads, generations on threads of their own.
TSAN_TARGETS=(util_test model_test backend_test core_test sessions_test server_test metrics_test
  http_server_test)

# Tests left out, by name ("Suite.*" for a whole suite), each with its reason. They still run
# in `make test`.
#   TenThousandSessionsWithAPoolForSixtyFour (TSan only): a scale test (10,000 sessions) on the
#     same registry threads as the tests around it; 40 s under ASan but 250 s under TSan.
#   StreamdServiceTest.*, HealthServiceTest.*, ReflectionStreamTest.* (TSan only): services over
#     a real in-process gRPC server and client. Debian's gRPC and Abseil are not built with TSan, which then sees their memory
#     only through the libc calls it intercepts and none of their atomics, and reports their
#     own hand-offs as races (in Abseil's GraphCycles, gRPC's epoll poller, ChannelArgs, TCP
#     client set-up; a new one on nearly every run, no frame of ours in either stack). Rather
#     than a suppression list that would grow with gRPC's internals, TSan runs the tests that
#     do not run gRPC; the service's own threads (registry, outbox) are covered there.
ASAN_EXCLUDE=()
TSAN_EXCLUDE=(SessionRegistryTest.TenThousandSessionsWithAPoolForSixtyFour 'StreamdServiceTest.*'
  'HealthServiceTest.*' 'ReflectionStreamTest.*')

# configure DIR SANITIZER_FLAGS: a build at -O1 -g1 (line tables: symbolized stacks, a third
# less to compile and link than -g) with the flags on every compile and link; the test programs'
# own sources at -O0 (half their compile time; the code under test keeps -O1), and each target
# compiled in batches (a unity build, CMakeLists.txt).
configure() {
  local dir=$1 flags=$2
  mkdir -p "$dir"
  # A new directory is made for Ninja, which compiles a target's sources without waiting for the
  # libraries it links (the ASan build on 2 cores: 436 s with Unix Makefiles, 272 s); one made
  # before keeps the generator it has.
  local generator=()
  [[ -f "$dir/CMakeCache.txt" ]] || generator=(-G Ninja)
  # shellcheck disable=SC2086  # CMAKE_EXTRA is a list of flags
  cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" \
    "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags" \
    "-DCMAKE_EXE_LINKER_FLAGS=$flags" "-DCMAKE_SHARED_LINKER_FLAGS=$flags" \
    -DSTREAMD_CUDA=OFF -DSTREAMD_BENCHMARKS=OFF -DSTREAMD_FUZZ=OFF -DSTREAMD_SERVER=ON \
    -DSTREAMD_UNITY_BUILD="${UNITY:-ON}" -DSTREAMD_TEST_COMPILE_OPTIONS=-O0 \
    ${CMAKE_EXTRA:-} > "$dir/sanitize-configure.log" 2>&1 ||
    { cat "$dir/sanitize-configure.log" >&2; return 1; }
}

# build DIR TARGETS...
build() {
  local dir=$1
  shift
  cmake --build "$dir" -j "$JOBS" --target "$@" > "$dir/sanitize-build.log" 2>&1 ||
    { tail -60 "$dir/sanitize-build.log" >&2; return 1; }
}

# run_ctest DIR EXCLUDED BINARIES...: runs, with ctest, every test that one of BINARIES
# provides except those named in EXCLUDED (a space-separated list). With
# STRICT=1, a test of kernels/, engine/ or server/ whose binary is not listed is an error (a new
# unit-test binary must be added to ASAN_TARGETS, not silently left out).
# Prints the counts; GTEST_SKIP'ped tests are counted separately, never as passed.
run_ctest() {
  local dir=$1 excluded=$2
  shift 2
  local select
  select=$(python3 - "$dir" "${STRICT:-0}" "$excluded" "$@" <<'PY'
import json, os, subprocess, sys
build, strict = os.path.realpath(sys.argv[1]), sys.argv[2] == "1"
excluded, binaries = sys.argv[3].split(), set(sys.argv[4:])
unused = set(excluded)
def left_out(name):
    for pattern in excluded:
        if name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1])):
            unused.discard(pattern)
            return True
    return False
out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"], check=True,
                     capture_output=True, text=True)
numbers, stray = [], set()
for number, test in enumerate(json.loads(out.stdout).get("tests", []), start=1):
    exe = os.path.realpath(test.get("command", [""])[0])
    if os.path.basename(exe) in binaries:
        if not left_out(test["name"]):
            numbers.append(number)
    elif any(exe.startswith(os.path.join(build, sub) + "/")
             for sub in ("kernels", "engine", "server")):
        stray.add(os.path.basename(exe))
if strict and stray:
    sys.exit("unit-test binaries not in the sanitizer list: " + " ".join(sorted(stray)))
if not numbers:
    sys.exit("no tests found for " + " ".join(sorted(binaries)))
if unused:
    sys.exit("left-out tests that do not exist (renamed?): " + " ".join(sorted(unused)))
print(",".join(["0", "0", "0"] + [str(n) for n in numbers]))
PY
  ) || return 1
  local rc=0
  # The tests' temporary files (gtest's TempDir()) in the build directory, not a /tmp every
  # build and checkout on the host shares (the Makefile's test target does the same).
  mkdir -p "$dir/test-tmp"
  TEST_TMPDIR="$dir/test-tmp" \
    STREAMD_MODEL="$STREAMD_MODEL" STREAMD_SPM_VOCAB="$STREAMD_SPM_VOCAB" \
    STREAMD_GEMMA_MODEL="$STREAMD_GEMMA_MODEL" STREAMD_VOCAB_DIR="$STREAMD_VOCAB_DIR" \
    ctest --test-dir "$dir" --output-on-failure -j "$JOBS" --timeout 900 -I "$select" \
    > "$dir/sanitize-ctest.log" 2>&1 || rc=1
  log "  $(grep -E 'tests passed|tests failed' "$dir/sanitize-ctest.log" | tail -1)," \
    "$(grep -c -E '\*\*\*Skipped' "$dir/sanitize-ctest.log" || true) skipped"
  if [[ $rc -ne 0 ]]; then
    grep -E 'Failed|Not Run|Timeout|\*\*\*Exception' "$dir/sanitize-ctest.log" | tail -40 >&2
    log "  full log: $dir/sanitize-ctest.log"
  fi
  return $rc
}

FAILED=0
COMMON="-fno-omit-frame-pointer"

if [[ "$WHAT" == asan || "$WHAT" == all ]]; then
  log "asan: configure $ASAN_BUILD"
  configure "$ASAN_BUILD" "-fsanitize=address,undefined -fno-sanitize-recover=undefined $COMMON"
  log "asan: build ${ASAN_TARGETS[*]}"
  build "$ASAN_BUILD" "${ASAN_TARGETS[@]}"
  log "asan: run"
  ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1"
  ASAN_OPTIONS="$ASAN_OPTIONS:strict_string_checks=1:check_initialization_order=1"
  export ASAN_OPTIONS="$ASAN_OPTIONS:strict_init_order=1"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  log "asan: ${#ASAN_EXCLUDE[@]} test(s) left out: ${ASAN_EXCLUDE[*]}"
  STRICT=1 run_ctest "$ASAN_BUILD" "${ASAN_EXCLUDE[*]}" "${ASAN_TARGETS[@]}" || FAILED=1
  unset ASAN_OPTIONS UBSAN_OPTIONS
  log "asan: $([[ $FAILED -eq 0 ]] && echo ok || echo FAILED)"
fi

if [[ "$WHAT" == tsan || "$WHAT" == all ]]; then
  TSAN_FAILED=0
  log "tsan: configure $TSAN_BUILD"
  configure "$TSAN_BUILD" "-fsanitize=thread $COMMON"
  log "tsan: build ${TSAN_TARGETS[*]}"
  build "$TSAN_BUILD" "${TSAN_TARGETS[@]}"
  log "tsan: run"
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
  export TSAN_OPTIONS="$TSAN_OPTIONS:suppressions=$ROOT/tests/sanitizers/tsan.supp"
  log "tsan: ${#TSAN_EXCLUDE[@]} test(s) left out: ${TSAN_EXCLUDE[*]}"
  run_ctest "$TSAN_BUILD" "${TSAN_EXCLUDE[*]}" "${TSAN_TARGETS[@]}" || TSAN_FAILED=1
  unset TSAN_OPTIONS
  log "tsan: $([[ $TSAN_FAILED -eq 0 ]] && echo ok || echo FAILED)"
  [[ $TSAN_FAILED -eq 0 ]] || FAILED=1
fi

log "done"
exit $FAILED
