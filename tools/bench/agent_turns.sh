#!/usr/bin/env bash
# A 40-turn agent conversation three ways, turn by turn (agent_turns.py): streamd's
# /v1/responses with previous_response_id (only the new turn prefilled), streamd's
# /v1/chat/completions re-sent statelessly (whole history every turn, no session header), and
# llama.cpp's llama-server /v1/chat/completions (whole history every turn; its prompt cache,
# cache_prompt, on by default, reuses what its slot holds). Same model file, threads and
# max tokens; greedy; fixed seed. Both servers run during the whole run (one slot each way:
# the turns are sequential), each idle while the other answers.
#
# streamd's sessions get a window of the whole model context (sinks 4 + window 8188 = 8192, so
# nothing is evicted and every way sees the whole conversation); llama-server gets -c 8192, one
# slot, its defaults otherwise (cache_prompt on, --cache-reuse 0, its RAM prompt cache).
#
# Usage: LLAMA_SERVER=/path/to/llama-server tools/bench/agent_turns.sh [MODEL]
#   (scripts/build-llama-bench.sh llama-server builds one; LLAMA_SERVER= runs streamd only)
# Env: TURNS (40) MAX_TOKENS (48) T (2 threads) ROUNDS (3) SEED (7) BUILD (build)
#      OUT (a directory to keep the raw JSON lines and logs in)
#      SPIN (off): llama-server's idle workers sleep (OMP_WAIT_POLICY=passive, --poll 0) instead
#      of spinning: both servers stay up, and a spinning idle server (or any other process on a
#      shared machine) makes the other collapse (docs/PERFORMANCE.md). "on": its defaults.
#      streamd's pool always spins briefly, then sleeps (engine/util/thread_pool.h).
set -euo pipefail
cd "$(dirname "$0")/../.."
model="${1:-${STREAMD_MODEL:-$HOME/.cache/streamd/models/SmolLM2-135M-Instruct.Q4_1.gguf}}"
TURNS="${TURNS:-40}" MAX_TOKENS="${MAX_TOKENS:-48}" T="${T:-2}" ROUNDS="${ROUNDS:-3}"
SEED="${SEED:-7}" SPIN="${SPIN:-off}"
streamd="${BUILD:-build}/tools/streamd"
llama="${LLAMA_SERVER-}"
[ -x "$streamd" ] || { echo "agent_turns: no $streamd (cmake --build build --target streamd)" >&2; exit 1; }
[ -f "$model" ] || { echo "agent_turns: no model at $model (scripts/fetch-model.sh)" >&2; exit 1; }
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"

pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_all EXIT
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_http() {  # port pid log
  for _ in $(seq 600); do
    if python3 -c 'import sys, urllib.request; urllib.request.urlopen("http://127.0.0.1:" + sys.argv[1] + "/v1/models", timeout=1)' "$1" 2>/dev/null; then
      return 0
    fi
    kill -0 "$2" 2>/dev/null || { cat "$3" >&2; exit 1; }
    sleep 0.2
  done
  echo "agent_turns: nothing answers on port $1" >&2
  exit 1
}

sport="$(free_port)"
serve_cmd=("$streamd" serve --model.path="$model" --server.listen_address=127.0.0.1:0
  --server.metrics_address=127.0.0.1:0 --server.http_address="127.0.0.1:$sport"
  --engine.threads="$T" --engine.kv_pool=512MiB --sessions.default_window=8188
  --sessions.snapshot_dir="$out/sessions" --logging.level=warn)
echo "streamd: ${serve_cmd[*]}" | tee "$out/commands.txt"
"${serve_cmd[@]}" >"$out/streamd.log" 2>&1 &
pids+=($!)
wait_http "$sport" "${pids[-1]}" "$out/streamd.log"

lport=0
if [ -n "$llama" ]; then
  lport="$(free_port)"
  # --no-repack: llama.cpp's AMX repacking SIGILLs in this build (scripts/build-llama-bench.sh).
  llama_cmd=("$llama" -m "$model" -t "$T" -tb "$T" -np 1 -c 8192 --no-repack --no-webui
    --host 127.0.0.1 --port "$lport")
  llama_env=()
  if [ "$SPIN" = off ]; then
    llama_cmd+=(--poll 0)
    llama_env=(OMP_WAIT_POLICY=passive)
  fi
  echo "llama-server: ${llama_env[*]} ${llama_cmd[*]}" | tee -a "$out/commands.txt"
  env "${llama_env[@]}" "${llama_cmd[@]}" >"$out/llama.log" 2>&1 &
  pids+=($!)
  wait_http "$lport" "${pids[-1]}" "$out/llama.log"
fi

client=(python3 tools/bench/agent_turns.py --streamd-port "$sport" --llama-port "$lport"
  --turns "$TURNS" --max-tokens "$MAX_TOKENS" --seed "$SEED" --rounds "$ROUNDS")
echo "client: ${client[*]}" | tee -a "$out/commands.txt"
echo "start: $(date -u +%FT%TZ) $(uptime)" | tee "$out/load.txt"
"${client[@]}" | tee "$out/turns.txt"
echo "end: $(date -u +%FT%TZ) $(uptime)" | tee -a "$out/load.txt"
echo "raw: $out"
