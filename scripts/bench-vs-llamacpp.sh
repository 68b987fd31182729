#!/usr/bin/env bash
# Measures streamd and llama.cpp side by side, in one run, on the same model and thread counts:
# prefill (P tokens in one batch) and decode (G single-token steps), median of R repetitions.
# The two are interleaved (streamd, llama.cpp, streamd, ...) so that a noisy neighbour hurts
# both alike. llama.cpp is not part of streamd: LLAMA_BENCH names a llama-bench binary, by
# default the one scripts/build-llama-bench.sh builds from the llama-cpp-python sdist (see
# docs/PERFORMANCE.md for the version and options used).
#
# Usage: [LLAMA_BENCH=/path/to/llama-bench] scripts/bench-vs-llamacpp.sh [MODEL] [THREADS...]
# Env: P (512) G (128) R (5) ROUNDS (3) STREAMD (build/tools/streamd)
#      PLAN: a build plan of MODEL (streamd build); streamd then also runs with it, in the same
#      rounds, and both are compared with llama.cpp.
#      TWELVE (off): "on" also runs streamd with --k-quant-activation-bits 12 (a K-quant file's
#      12-bit products, as before they took 8-bit activations without a plan), in the same rounds.
#      SPIN (on): "off" makes llama.cpp's idle threads sleep instead of spin (OMP_WAIT_POLICY=
#      passive, --poll 0), which is what streamd's own thread pool does after a short spin; on
#      a machine shared with other work spinning threads collapse (docs/PERFORMANCE.md).
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-}"
[ -n "$model" ] || model="$(scripts/fetch-model.sh)"
[ $# -gt 0 ] && shift
if [ $# -gt 0 ]; then threads=("$@"); else threads=(1 2); fi
P="${P:-512}" G="${G:-128}" R="${R:-5}" ROUNDS="${ROUNDS:-3}" SPIN="${SPIN:-on}"
llama_env=() llama_flags=()
if [ "$SPIN" = off ]; then
  llama_env=(OMP_WAIT_POLICY=passive)
  llama_flags=(--poll 0)
fi
streamd="${STREAMD:-build/tools/streamd}"
PLAN="${PLAN:-}"
LLAMA_BENCH="${LLAMA_BENCH:-$(scripts/build-llama-bench.sh)}"

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for round in $(seq "$ROUNDS"); do
  for t in "${threads[@]}"; do
    "$streamd" bench --model "$model" --threads "$t" --prompt-tokens "$P" --gen-tokens "$G" \
      --reps "$R" --json | tail -n 1 >>"$out/streamd-$t.jsonl"
    if [ "${TWELVE:-off}" = on ]; then
      "$streamd" bench --model "$model" --k-quant-activation-bits 12 --threads "$t" \
        --prompt-tokens "$P" --gen-tokens "$G" --reps "$R" --json | tail -n 1 \
        >>"$out/streamd-12bit-$t.jsonl"
    fi
    if [ -n "$PLAN" ]; then
      "$streamd" bench --model "$model" --plan "$PLAN" --threads "$t" --prompt-tokens "$P" \
        --gen-tokens "$G" --reps "$R" --json | tail -n 1 >>"$out/streamd+plan-$t.jsonl"
    fi
    # --repack 0: llama.cpp's AMX repacking crashes in this build (see docs/PERFORMANCE.md).
    env "${llama_env[@]}" "$LLAMA_BENCH" -m "$model" -t "$t" -p "$P" -n "$G" -r "$R" --repack 0 \
      "${llama_flags[@]}" -o jsonl \
      2>/dev/null >>"$out/llama-$t.jsonl"
  done
done

python3 - "$out" "${threads[@]}" <<'PY'
import json, os, statistics, sys
out, threads = sys.argv[1], sys.argv[2:]
print(f"{'threads':>7} {'':>10} {'engine':>13} {'streamd tok/s':>14} {'llama.cpp tok/s':>16} "
      f"{'ratio':>7}  rounds (streamd / llama.cpp)")
for t in threads:
    l = [json.loads(x) for x in open(f"{out}/llama-{t}.jsonl")]
    lp = [r["avg_ts"] for r in l if r["n_prompt"] > 0]
    ld = [r["avg_ts"] for r in l if r["n_gen"] > 0]
    for engine in ("streamd", "streamd-12bit", "streamd+plan"):
        path = f"{out}/{engine}-{t}.jsonl"
        if not os.path.exists(path):
            continue
        s = [json.loads(x) for x in open(path)]
        sp = [r["results"][0]["prefill_tokens_per_s"] for r in s]
        sd = [r["results"][0]["decode_tokens_per_s"] for r in s]
        for name, a, b in (("prefill", sp, lp), ("decode", sd, ld)):
            ma, mb = statistics.median(a), statistics.median(b)
            rounds = " ".join(f"{x:.1f}/{y:.1f}" for x, y in zip(a, b))
            print(f"{t:>7} {name:>10} {engine:>13} {ma:>14.1f} {mb:>16.1f} {ma/mb:>7.2f}  {rounds}")
PY
