#!/usr/bin/env bash
# Closed-loop load, streamd engine vs llama.cpp's llama-server, in one run on the same model,
# threads and token counts: SESSIONS concurrent sessions, each a P-token random prompt and G
# greedy tokens. Rounds are interleaved (streamd, llama-server, streamd, ...) so a noisy
# neighbour hurts both alike; the summary prints medians over rounds and their ratio.
# The server is started for its turn only (on 127.0.0.1, a free port) and stopped after it, so
# its idle threads never compete with streamd. llama.cpp is not part of streamd: point
# LLAMA_SERVER at a llama-server binary you built yourself.
#
# Usage: LLAMA_SERVER=/path/to/llama-server tools/bench/sessions_vs_llama_server.sh [MODEL]
# Env: SESSIONS (16) P (128) G (64) T (2) B (512: streamd --max-batch-tokens = llama -b/-ub)
#      ROUNDS (3) STREAMD (build/tools/streamd) OUT (a directory to keep the raw JSON in)
#      SPIN (on): "off" makes llama-server's idle worker threads sleep instead of spinning
#      (OMP_WAIT_POLICY=passive for its OpenMP threads, --poll 0 for its own pool): spinning
#      threads collapse when any other process competes for the cores (docs/PERFORMANCE.md).
#      streamd's thread pool always spins briefly, then sleeps (engine/util/thread_pool.h).
set -euo pipefail
cd "$(dirname "$0")/../.."
model="${1:-${STREAMD_MODEL:-$HOME/.cache/streamd/models/SmolLM2-135M-Instruct.Q4_1.gguf}}"
SESSIONS="${SESSIONS:-16}" P="${P:-128}" G="${G:-64}" T="${T:-2}" B="${B:-512}"
ROUNDS="${ROUNDS:-3}" SPIN="${SPIN:-on}"
streamd="${STREAMD:-build/tools/streamd}"
: "${LLAMA_SERVER:?set LLAMA_SERVER to a llama-server binary}"
# Every slot holds P + G tokens; the context is rounded up to a power of two.
ctx=1
while [ "$ctx" -lt $((SESSIONS * (P + G))) ]; do ctx=$((ctx * 2)); done

out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
server_pid=""
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
trap stop_server EXIT

# --no-repack: llama.cpp's AMX repacking crashes in this build. -cram 0: no prompt cache in RAM.
server_flags=(-m "$model" -t "$T" -tb "$T" -np "$SESSIONS" -c "$ctx" -b "$B" -ub "$B" -fa auto
  --no-repack --no-webui --no-slots -cram 0)
server_env=()
if [ "$SPIN" = off ]; then
  server_flags+=(--poll 0)
  server_env=(OMP_WAIT_POLICY=passive)
fi
echo "llama-server: ${server_env[*]} llama-server ${server_flags[*]}" | tee "$out/commands.txt"
echo "streamd: $streamd bench --sessions $SESSIONS --prompt-tokens $P --gen-tokens $G" \
  "--threads $T --max-batch-tokens $B --json" | tee -a "$out/commands.txt"

for round in $(seq "$ROUNDS"); do
  "$streamd" bench --model "$model" --sessions "$SESSIONS" \
    --prompt-tokens "$P" --gen-tokens "$G" --threads "$T" --max-batch-tokens "$B" --json | tail -n 1 >>"$out/streamd.jsonl"

  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  env "${server_env[@]}" "$LLAMA_SERVER" "${server_flags[@]}" --host 127.0.0.1 --port "$port" >"$out/server-$round.log" 2>&1 &
  server_pid=$!
  python3 tools/bench/llama_server_load.py --port "$port" --sessions "$SESSIONS" \
    --prompt-tokens "$P" --gen-tokens "$G" --json | tail -n 1 >>"$out/llama.jsonl"
  stop_server
  echo "round $round done" >&2
done

python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
s = [json.loads(l)["results"][0] for l in open(f"{out}/streamd.jsonl")]
l = [json.loads(x) for x in open(f"{out}/llama.jsonl")]
def med(rows, f): return statistics.median(f(r) for r in rows)
print(f"{'':<32} {'streamd':>12} {'llama-server':>13} {'ratio':>7}")
for name, f in [("aggregate decode tok/s", lambda r: r["decode_tokens_per_s"]),
                ("steady decode tok/s", lambda r: r["steady_decode_tokens_per_s"]),
                ("output tok/s", lambda r: r["output_tokens_per_s"]),
                ("prompt tok/s", lambda r: r["prompt_tokens_per_s"]),
                ("per-session decode tok/s", lambda r: r["session_decode_tokens_per_s_p50"]),
                ("time to first token p50 (ms)", lambda r: r["ttft_ms_p50"]),
                ("time to first token p99 (ms)", lambda r: r["ttft_ms_p99"])]:
    a, b = med(s, f), med(l, f)
    print(f"{name:<32} {a:>12.1f} {b:>13.1f} {a / b:>7.2f}")
print("rounds, aggregate decode tok/s: streamd",
      [round(r["decode_tokens_per_s"], 1) for r in s], "llama-server",
      [round(r["decode_tokens_per_s"], 1) for r in l])
print(f"raw JSON: {out}")
PY
