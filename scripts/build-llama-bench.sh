#!/usr/bin/env bash
# Builds llama.cpp's llama-bench (the comparison of scripts/bench-vs-llamacpp.sh and
# docs/PERFORMANCE.md), or another of its tools named as the argument (llama-server: the
# comparisons of tools/bench/sessions_vs_llama_server.sh and agent_turns.sh; llama-quantize:
# scripts/make-quant-variants.sh), from the llama.cpp that the llama-cpp-python==0.3.36 sdist
# vendors (commit 0c1e570), once, into the cache; prints the binary's path. Never part of streamd's
# build. The sdist is the one scripts/fetch-test-vocab.sh keeps (downloaded here if missing,
# checked against its sha256). Default CMake Release configuration, GGML_NATIVE, OpenMP; run it
# with `--repack 0`: its AMX weight repacking SIGILLs when built with GCC 12.
# Usage: scripts/build-llama-bench.sh [TARGET]   (llama-bench, llama-server or llama-quantize;
# default llama-bench)
# Env: JOBS (2), STREAMD_CACHE_DIR (~/.cache/streamd).
set -euo pipefail

cache="${STREAMD_CACHE_DIR:-$HOME/.cache/streamd}"
sdist="$cache/sdist/llama_cpp_python-0.3.36.tar.gz"
sdist_sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
dir="$cache/llama.cpp-0c1e570"
target="${1:-llama-bench}"
case "$target" in
  llama-bench | llama-server | llama-quantize) ;;
  *)
    echo "build-llama-bench: unknown target '$target' (llama-bench, llama-server or llama-quantize)" >&2
    exit 2
    ;;
esac
bin="$dir/build/bin/$target"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
# One build at a time in the shared tree (a benchmark and make-quant-variants.sh may both ask).
mkdir -p "$cache"
exec 9>"$cache/llama-build.lock"
flock 9
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi  # built by the caller we waited for

if [ ! -f "$sdist" ]; then
  mkdir -p "$(dirname "$sdist")"
  echo "build-llama-bench: downloading the llama-cpp-python==0.3.36 sdist (~75 MB)" >&2
  python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$(dirname "$sdist")" \
    "llama-cpp-python==0.3.36" >&2
fi
echo "$sdist_sha256  $sdist" | sha256sum --check --status ||
  { echo "build-llama-bench: $sdist: sha256 mismatch" >&2; exit 1; }

mkdir -p "$dir"
[ -f "$dir/CMakeLists.txt" ] ||
  tar -xzf "$sdist" -C "$dir" --strip-components=3 llama_cpp_python-0.3.36/vendor/llama.cpp
echo "build-llama-bench: building $target in $dir (a few minutes on 2 cores)" >&2
nice -n 10 cmake -S "$dir" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER="$([ "$target" = llama-server ] && echo ON || echo OFF)" >&2
nice -n 10 cmake --build "$dir/build" -j "${JOBS:-2}" --target "$target" >&2
echo "$bin"
