#!/usr/bin/env bash
# Fetches ggml-vocab-llama-spm.gguf, llama.cpp's LLaMA SentencePiece vocabulary (no weights),
# which the tokenizer tests use as their SPM vocabulary ($STREAMD_SPM_VOCAB). It ships inside
# the source distribution of llama-cpp-python==0.3.36 on PyPI; the sdist is kept in the cache
# so a re-extraction does not download it again. Checks the sha256 and prints the path.
# Does nothing but the checksum when the file is already there.
set -euo pipefail

cache="${STREAMD_CACHE_DIR:-$HOME/.cache/streamd}"
dir="$cache/vocab"
name="ggml-vocab-llama-spm.gguf"
sha256="16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69"
sdist_spec="llama-cpp-python==0.3.36"
sdist_dir="$cache/sdist"
sdist="$sdist_dir/llama_cpp_python-0.3.36.tar.gz"
member="llama_cpp_python-0.3.36/vendor/llama.cpp/models/$name"
dest="$dir/$name"

verify() { echo "$sha256  $1" | sha256sum --check --status; }

if [ -f "$dest" ] && verify "$dest"; then
  echo "$dest"
  exit 0
fi

mkdir -p "$dir" "$sdist_dir"
if [ ! -f "$sdist" ]; then
  echo "fetch-test-vocab: downloading the $sdist_spec source distribution (~75 MB)" >&2
  # --no-binary: the vocabulary files are only in the sdist, not in wheels.
  python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$sdist_dir" \
    "$sdist_spec" >&2
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if ! tar -xzf "$sdist" -C "$tmp" "$member"; then
  echo "fetch-test-vocab: $member not found in $sdist" >&2
  exit 1
fi
if ! verify "$tmp/$member"; then
  echo "fetch-test-vocab: sha256 mismatch for $name (expected $sha256)" >&2
  exit 1
fi
mv "$tmp/$member" "$dest"
echo "$dest"
