#!/usr/bin/env bash
# Makes the quantized variants of the default model that tests/quant_variants_golden_test.cc
# compares with llama.cpp (fixtures tests/fixtures/smollm2_quant_<TYPE>.json, docs/MODELS.md):
# SmolLM2-135M-Instruct.<TYPE>.gguf, requantized from the default Q4_1 file (PyPI has no F16 or
# Q8_0 SmolLM2-135M GGUF), into the variants directory.
#   Q5_0 Q5_1: the `gguf` package's numpy quantizer (scripts/quantize_with_gguf.py), seconds, no
#     llama.cpp needed: `make test` makes these (CI).
#   LLAMA3_ROPE: not a type, the Q4_1 file with Llama 3.1's rope_freqs tensor added
#     (scripts/add_llama3_rope_freqs.py, the gguf package, a second; in CI too).
#   QWEN3_ARCH: not a type either, the Q4_1 file rewritten as a qwen3 one (q/k norms, NEOX RoPE;
#     scripts/make_qwen3_variant.py, the gguf package, a second; in CI too).
#   Q4_K_M Q5_K_M Q6_K Q3_K_M Q2_K IQ4_NL IQ4_XS: llama.cpp's llama-quantize --allow-requantize,
#     built once from the llama-cpp-python sdist into the llama.cpp build directory of
#     scripts/build-llama-bench.sh (~6-10 min on 2 cores the first time; under the lock file
#     llama-build.lock in the cache, so that two callers build once).
# Each output's sha256 must equal its fixture's model_sha256 (the quantizers are deterministic);
# a file that does not is not kept, and the script fails. Prints the variants directory.
# Usage: make-quant-variants.sh [--dir] [TYPE...]   (no TYPE: all of them; --dir: print, exit)
# Env: STREAMD_MODEL (the Q4_1 source; default: scripts/fetch-model.sh), STREAMD_QUANT_VARIANTS
# (the directory, default ~/.cache/streamd/models/quant-variants), STREAMD_GGUF_PYTHON (a python
# with the gguf package; default: tests/reference/gguf-venv.sh's venv), LLAMA_QUANTIZE (a
# llama-quantize binary of the same llama.cpp; default: built here, see above).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${STREAMD_CACHE_DIR:-$HOME/.cache/streamd}"
dir="${STREAMD_QUANT_VARIANTS:-$cache/models/quant-variants}"
if [ "${1:-}" = "--dir" ]; then echo "$dir"; exit 0; fi
numpy_types="Q5_0 Q5_1 LLAMA3_ROPE QWEN3_ARCH"
llama_types="Q4_K_M Q5_K_M Q6_K Q3_K_M Q2_K IQ4_NL IQ4_XS"
types=("$@")
[ ${#types[@]} -gt 0 ] || read -r -a types <<<"$numpy_types $llama_types"

src="${STREAMD_MODEL:-}"
[ -n "$src" ] || src="$("$root/scripts/fetch-model.sh")"
mkdir -p "$dir"

# llama.cpp's llama-quantize, built once (in the tree build-llama-bench.sh builds llama-bench in).
llama_quantize() { "$root/scripts/build-llama-bench.sh" llama-quantize; }

fixture_sha() {  # the model_sha256 recorded in the type's fixture (none: empty)
  local f="$root/tests/fixtures/smollm2_quant_$1.json"
  [ -f "$f" ] || return 0
  sed -n 's/.*"model_sha256":"\([0-9a-f]\{64\}\)".*/\1/p' \
    "$f" | head -n 1
}

for t in "${types[@]}"; do
  out="$dir/SmolLM2-135M-Instruct.$t.gguf"
  want="$(fixture_sha "$t")"
  if [ -n "$want" ] && [ -f "$out" ] && echo "$want  $out" | sha256sum --check --status; then
    continue
  fi
  tmp="$out.tmp.$$"
  case " $numpy_types " in
    *" $t "*)
      py="${STREAMD_GGUF_PYTHON:-}"
      [ -n "$py" ] || py="$("$root/tests/reference/gguf-venv.sh" "$cache/gguf-venv" | tail -n 1)"
      if [ "$t" = LLAMA3_ROPE ]; then
        echo "make-quant-variants: $t: Llama 3.1's rope_freqs added with the gguf package" >&2
        "$py" "$root/scripts/add_llama3_rope_freqs.py" "$src" "$tmp" >&2
      elif [ "$t" = QWEN3_ARCH ]; then
        echo "make-quant-variants: $t: rewritten as qwen3 with the gguf package" >&2
        "$py" "$root/scripts/make_qwen3_variant.py" "$src" "$tmp" >&2
      else
        echo "make-quant-variants: $t with the gguf package's quantizer" >&2
        "$py" "$root/scripts/quantize_with_gguf.py" "$src" "$tmp" "$t" >&2
      fi ;;
    *)
      case " $llama_types " in *" $t "*) ;; *)
        echo "make-quant-variants: unknown type '$t' (known: $numpy_types $llama_types)" >&2
        exit 1 ;;
      esac
      quantize="${LLAMA_QUANTIZE:-}"
      [ -n "$quantize" ] || quantize="$(llama_quantize)"
      echo "make-quant-variants: $t with llama-quantize" >&2
      "$quantize" --allow-requantize "$src" "$tmp" "$t" 2 >"$tmp.log" 2>&1 ||
        { cat "$tmp.log" >&2; rm -f "$tmp" "$tmp.log"; exit 1; }
      rm -f "$tmp.log" ;;
  esac
  got="$(sha256sum "$tmp" | cut -d' ' -f1)"
  if [ -n "$want" ] && [ "$got" != "$want" ]; then
    rm -f "$tmp"
    echo "make-quant-variants: $t: sha256 $got, but tests/fixtures/smollm2_quant_$t.json" \
      "was made from $want: the quantizer is not the one the fixture used" >&2
    exit 1
  fi
  mv "$tmp" "$out"
  [ -n "$want" ] || echo "make-quant-variants: $t: no fixture yet; sha256 $got" >&2
done
echo "$dir"
