#!/usr/bin/env bash
# Bad input to the streamd CLI: every case must exit non-zero, print one error line naming the
# value and the limit on stderr, and print nothing on stdout (no partial output as success).
# Usage: STREAMD_MODEL=PATH cli_errors_test.sh STREAMD_BINARY MAKE_TEST_GGUF_BINARY
set -u
bin="$1"
make_gguf="${2:-}"
model="${STREAMD_MODEL:-}"
if [ -z "$model" ] || [ ! -f "$model" ]; then
  echo "FAIL: model path '$model' missing (set STREAMD_MODEL; make test does)"; exit 1
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

# expect_error NAME EXPECTED_SUBSTRING -- ARGS...
expect_error() {
  local name="$1" want="$2"
  shift 3
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local lines
  lines=$(wc -l <"$tmp/err")
  if [ $rc -ne 0 ] && grep -qF -- "$want" "$tmp/err" && [ ! -s "$tmp/out" ] && [ "$lines" -eq 1 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name: rc=$rc, want stderr containing '$want' in one line and empty stdout"
    echo "  stderr: $(head -c 400 "$tmp/err")"
    echo "  stdout: $(head -c 200 "$tmp/out")"
  fi
}

printf 'not a gguf file at all' >"$tmp/bad.gguf"
head -c 100000 "$model" >"$tmp/truncated.gguf"
printf '\xff\xfe' >"$tmp/bad-utf8.txt"

expect_error missing-model "No such file" -- generate --model "$tmp/nope.gguf" --prompt hi -n 4
expect_error directory-model "$tmp" -- generate --model "$tmp" --prompt hi -n 4
expect_error wrong-file-type "not a GGUF file" -- generate --model "$tmp/bad.gguf" --prompt hi -n 4
expect_error truncated-model "truncated.gguf" -- generate --model "$tmp/truncated.gguf" --prompt hi -n 4
expect_error empty-prompt "--prompt" -- generate --model "$model" --prompt "" -n 4
expect_error no-prompt "--prompt" -- generate --model "$model" -n 4
expect_error n-zero "--n-predict = 0 is outside [1," -- generate --model "$model" --prompt hi -n 0
expect_error n-negative "--n-predict = -3 is outside" -- generate --model "$model" --prompt hi -n -3
expect_error n-not-a-number "is not an integer" -- generate --model "$model" --prompt hi -n many
expect_error temperature-negative "--temperature = -0.5 is outside [0, 100]" -- generate --model "$model" --prompt hi --temperature -0.5
expect_error top-p-over "--top-p = 1.5 is outside" -- generate --model "$model" --prompt hi --top-p 1.5
expect_error top-p-zero "--top-p = 0 is outside" -- generate --model "$model" --prompt hi --top-p 0
expect_error min-p-over "--min-p = 2 is outside [0, 1]" -- generate --model "$model" --prompt hi --min-p 2
expect_error top-k-over-vocab "top_k" -- generate --model "$model" --prompt hi --top-k 100000
expect_error nan-temperature "not a finite number" -- generate --model "$model" --prompt hi --temperature nan
expect_error unknown-flag "unknown flag --bogus" -- generate --model "$model" --prompt hi --bogus 1
expect_error context-overflow "over the model context of 8192" -- generate --model "$model" --prompt hi -n 9000
expect_error invalid-utf8-prompt "UTF-8" -- generate --model "$model" --prompt $'\xff\xfe' -n 4
expect_error tokenize-both "exactly one of --text and --file" -- tokenize --model "$model" --text a --file b
expect_error tokenize-missing-file "cannot read --file" -- tokenize --model "$model" --file "$tmp/nope.txt"
expect_error tokenize-bad-utf8 "UTF-8" -- tokenize --model "$model" --file "$tmp/bad-utf8.txt"
expect_error bench-bad-threads "--threads" -- bench --model "$model" --threads 0
expect_error unknown-command "unknown command" -- frobnicate

# A long prompt: over the context by itself.
python3 -c "print('word ' * 9000)" >"$tmp/long.txt"
expect_error long-prompt "over the model context of 8192" -- generate --model "$model" --prompt "$(cat "$tmp/long.txt")" -n 1

# streamd build and streamd plan (docs/BUILD.md): flags, missing and damaged files.
expect_error build-cuda-target "--target cuda: the CUDA target" -- build --model "$model" --target cuda --out "$tmp/p.plan"
expect_error build-bad-target '--target = "tpu"' -- build --model "$model" --target tpu --out "$tmp/p.plan"
expect_error build-calibration "--calibration-text needs --eval-text" -- build --model "$model" --calibration-text x --out "$tmp/p.plan"
expect_error build-bad-kv-cache '--kv-cache = "int4": auto or f16' -- build --model "$model" --kv-cache int4 --out "$tmp/p.plan"
expect_error build-bad-percent 'is not a percentage in [0, 100]' -- build --model "$model" --max-ppl-increase 5x --out "$tmp/p.plan"
expect_error build-negative-percent 'is not a percentage in [0, 100]' -- build --model "$model" --max-ppl-increase -1% --out "$tmp/p.plan"
expect_error build-missing-model "$tmp/none.gguf" -- build --model "$tmp/none.gguf" --out "$tmp/p.plan"
expect_error build-missing-eval "--eval-text: cannot read" -- build --model "$model" --eval-text "$tmp/none.txt" --out "$tmp/p.plan"
printf 'just a few words' >"$tmp/short.txt"
expect_error build-short-eval "the gate needs at least 512" -- build --model "$model" --eval-text "$tmp/short.txt" --out "$tmp/p.plan"
expect_error build-bad-rounds "--rounds" -- build --model "$model" --rounds 0 --out "$tmp/p.plan"
[ -e "$tmp/p.plan" ] && { failed=$((failed + 1)); echo "FAIL: a refused build left $tmp/p.plan"; }
printf 'STRMPLAN' >"$tmp/cut.plan"
expect_error plan-truncated "$tmp/cut.plan: " -- plan inspect "$tmp/cut.plan"
expect_error plan-missing "$tmp/none.plan" -- plan inspect "$tmp/none.plan"
expect_error plan-no-file "which plan file" -- plan inspect
expect_error plan-no-verb "usage: streamd plan inspect" -- plan show x
expect_error bench-plan-not-tenants "not to --tenants" -- bench --model "$model" --tenants --plan "$tmp/cut.plan"
expect_error bench-plan-damaged "$tmp/cut.plan" -- bench --model "$model" --plan "$tmp/cut.plan"

# A model with several problems at once (made with engine/gguf/gguf_writer by make_test_gguf):
# one line naming the architecture, every unsupported tensor type with its count and the
# pre-tokenizer, the path once; `tokenize` reads only the vocabulary, so it names the
# pre-tokenizer alone.
if [ -z "$make_gguf" ] || ! "$make_gguf" several-problems "$tmp/several.gguf"; then
  failed=$((failed + 1)); echo "FAIL: make_test_gguf could not write the broken model"
else
  for part in "$tmp/several.gguf: 3 problems: " 'architecture "gpt-neox" is not supported (supported: llama, qwen2, qwen3, gemma3)' \
      "IQ2_XXS (3 tensors, first 'blk.0.attn_q.weight'), IQ1_S (1 tensor: 'blk.1.ffn_up.weight')" \
      "tokenizer.ggml.pre 'no-such-pre' is not supported"; do
    expect_error several-problems "$part" -- generate --model "$tmp/several.gguf" --prompt hi -n 4
  done
  expect_error several-problems-eval "3 problems: " -- eval --model "$tmp/several.gguf" --text "$tmp/bad-utf8.txt"
  "$bin" generate --model "$tmp/several.gguf" --prompt hi -n 4 2>"$tmp/err" >/dev/null
  n=$(grep -o -F "$tmp/several.gguf" "$tmp/err" | wc -l)
  if [ "$n" -eq 1 ]; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL: the path is named $n times: $(cat "$tmp/err")"; fi
  expect_error several-problems-tokenize "tokenizer.ggml.pre 'no-such-pre' is not supported" -- \
    tokenize --model "$tmp/several.gguf" --text hi
  if grep -q -e "architecture" -e "tensor types" "$tmp/err"; then
    failed=$((failed + 1)); echo "FAIL: tokenize looked past the vocabulary: $(cat "$tmp/err")"
  else passed=$((passed + 1)); fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
