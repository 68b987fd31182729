#!/usr/bin/env bash
# Fetches llama.cpp's test vocabularies (GGUF files with no weights) out of the source
# distribution of llama-cpp-python==0.3.36 on PyPI; the sdist is kept in the cache so a
# re-extraction does not download it again.
#
#   scripts/fetch-test-vocab.sh           ggml-vocab-llama-spm.gguf, the tokenizer tests' SPM
#                                         vocabulary ($STREAMD_SPM_VOCAB); prints its path.
#   scripts/fetch-test-vocab.sh --golden  every models/ggml-vocab-*.gguf with its .inp/.out test
#                                         vectors (input texts, expected ids), and the chat
#                                         templates of models/templates, into one directory
#                                         ($STREAMD_VOCAB_DIR, the golden tokenizer test);
#                                         prints the directory.
#
# Checks the sha256 of the SPM file, or of the sdist before a golden extraction (the extracted
# files then get a SHA256SUMS that later runs check). Does nothing but the checksums when the
# files are already there.
set -euo pipefail

cache="${STREAMD_CACHE_DIR:-$HOME/.cache/streamd}"
sdist_spec="llama-cpp-python==0.3.36"
sdist_dir="$cache/sdist"
sdist="$sdist_dir/llama_cpp_python-0.3.36.tar.gz"
sdist_sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
models="llama_cpp_python-0.3.36/vendor/llama.cpp/models"

verify() { echo "$1  $2" | sha256sum --check --status; }

fetch_sdist() {
  mkdir -p "$sdist_dir"
  if [ ! -f "$sdist" ]; then
    echo "fetch-test-vocab: downloading the $sdist_spec source distribution (~75 MB)" >&2
    # --no-binary: the vocabulary files are only in the sdist, not in wheels.
    python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$sdist_dir" \
      "$sdist_spec" >&2
  fi
}

fetch_spm() {
  local name="ggml-vocab-llama-spm.gguf"
  local sha256="16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69"
  local dir="$cache/vocab"
  local dest="$dir/$name"
  if [ -f "$dest" ] && verify "$sha256" "$dest"; then
    echo "$dest"
    return 0
  fi
  mkdir -p "$dir"
  fetch_sdist
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  if ! tar -xzf "$sdist" -C "$tmp" "$models/$name"; then
    echo "fetch-test-vocab: $models/$name not found in $sdist" >&2
    exit 1
  fi
  if ! verify "$sha256" "$tmp/$models/$name"; then
    echo "fetch-test-vocab: sha256 mismatch for $name (expected $sha256)" >&2
    exit 1
  fi
  mv "$tmp/$models/$name" "$dest"
  echo "$dest"
}

fetch_golden() {
  local dest="$cache/vocab-golden"
  if [ -f "$dest/SHA256SUMS" ] &&
    (cd "$dest" && sha256sum --check --status --strict SHA256SUMS); then
    echo "$dest"
    return 0
  fi
  fetch_sdist
  if ! verify "$sdist_sha256" "$sdist"; then
    echo "fetch-test-vocab: sha256 mismatch for $sdist (expected $sdist_sha256);" \
      "delete it to download it again" >&2
    exit 1
  fi
  tmp="$(mktemp -d "$cache/vocab-golden.tmp.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  tar -xzf "$sdist" -C "$tmp" --strip-components=4 --wildcards \
    "$models/ggml-vocab-*" "$models/templates/*.jinja"
  if ! ls "$tmp"/ggml-vocab-*.gguf.inp > /dev/null 2>&1; then
    echo "fetch-test-vocab: no ggml-vocab-*.gguf.inp in $sdist" >&2
    exit 1
  fi
  (cd "$tmp" && find . -type f ! -name SHA256SUMS -print0 | sort -z |
    xargs -0 sha256sum > SHA256SUMS)
  # Replace the whole directory, so no file of an older extraction lingers.
  rm -rf "$dest"
  mv "$tmp" "$dest"
  trap - EXIT
  echo "$dest"
}

case "${1:-}" in
  "") fetch_spm ;;
  --golden) fetch_golden ;;
  *) echo "usage: $0 [--golden]" >&2; exit 2 ;;
esac
