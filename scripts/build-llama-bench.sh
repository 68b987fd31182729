#!/usr/bin/env bash
# Builds llama.cpp's llama-bench (the comparison of scripts/bench-vs-llamacpp.sh and
# docs/PERFORMANCE.md) from the llama.cpp that the llama-cpp-python==0.3.36 sdist vendors
# (commit 0c1e570), once, into the cache; prints the binary's path. Never part of streamd's
# build. The sdist is the one scripts/fetch-test-vocab.sh keeps (downloaded here if missing,
# checked against its sha256). Default CMake Release configuration, GGML_NATIVE, OpenMP; run it
# with `--repack 0`: its AMX weight repacking SIGILLs when built with GCC 12.
# Env: JOBS (2), STREAMD_CACHE_DIR (~/.cache/streamd).
set -euo pipefail

cache="${STREAMD_CACHE_DIR:-$HOME/.cache/streamd}"
sdist="$cache/sdist/llama_cpp_python-0.3.36.tar.gz"
sdist_sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
dir="$cache/llama.cpp-0c1e570"
bin="$dir/build/bin/llama-bench"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi

if [ ! -f "$sdist" ]; then
  mkdir -p "$(dirname "$sdist")"
  echo "build-llama-bench: downloading the llama-cpp-python==0.3.36 sdist (~75 MB)" >&2
  python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$(dirname "$sdist")" \
    "llama-cpp-python==0.3.36" >&2
fi
echo "$sdist_sha256  $sdist" | sha256sum --check --status ||
  { echo "build-llama-bench: $sdist: sha256 mismatch" >&2; exit 1; }

mkdir -p "$dir"
tar -xzf "$sdist" -C "$dir" --strip-components=3 llama_cpp_python-0.3.36/vendor/llama.cpp
echo "build-llama-bench: building llama-bench in $dir (a few minutes on 2 cores)" >&2
nice -n 10 cmake -S "$dir" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=OFF >&2
nice -n 10 cmake --build "$dir/build" -j "${JOBS:-2}" --target llama-bench >&2
echo "$bin"
