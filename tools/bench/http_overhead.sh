#!/usr/bin/env bash
# HTTP against gRPC: the same closed-loop load through one `streamd serve` with both transports,
# side by side. gRPC: grpc_load, N Session streams, each Append of the prompt as a user chat turn
# + Generate of G tokens. HTTP: http_load.py, N stateless streamed /v1/chat/completions with
# that prompt as the one user message, max_tokens G (each request opens, appends, generates and
# closes its session: an OpenAI client's whole cost). Same model, threads, prompt tokens (the same
# chat template over the same text), greedy, G tokens each (a run whose generation ends early
# fails). Figures: the daemon's CPU time per generated token (user + system from /proc/PID/stat,
# from t0 to the last token; prefill included) and decode tok/s at the client.
# Rounds: a fresh daemon each, the two transports in alternating order (gRPC first, then HTTP
# first, ...) so a drift or a noisy neighbour hurts both alike; medians over rounds, and the
# median of the per-round ratios. The clients differ (C++ gRPC, Python HTTP); their CPU is shown
# apart and not counted in the daemon's figure.
#
# Usage: tools/bench/http_overhead.sh [MODEL]
# Env: SESSIONS ("1,16") G (64) T (2) ROUNDS (5) REPS (2: runs per transport per round; medians)
#      BUILD (build: holds tools/streamd and tests/e2e/grpc_load) OUT (keeps the raw JSON)
#      PROMPT_FILE (the user message; default: a request to continue 80 lines of Pride and
#      Prejudice from ../shared/data, which SmolLM2 answers for more than 64 tokens)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tools/bench/overhead_common.sh
source tools/bench/overhead_common.sh
overhead_init http_overhead "${1:-}"
SESSIONS="${SESSIONS:-1,16}" G="${G:-64}" T="${T:-2}" ROUNDS="${ROUNDS:-5}" REPS="${REPS:-2}"
rm -f "$out/grpc.jsonl" "$out/http.jsonl" "$out/load.txt"
overhead_prompt 6 "Continue this story in the same style:"

hport="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
serve_cmd=("$streamd" serve --model.path="$model" --server.listen_address=127.0.0.1:0
  --server.metrics_address=127.0.0.1:0 --server.http_address="127.0.0.1:$hport"
  --engine.threads="$T" --engine.kv_pool=512MiB --sessions.snapshot_dir="$out/sessions"
  --logging.level=warn --port-file "$out/port")
grpc_cmd=("$load" --prompt-text "$out/prompt.txt" --sessions "$SESSIONS" --gen-tokens "$G"
  --reps "$REPS" --json)
http_cmd=(python3 tools/bench/http_load.py --port "$hport" --prompt-text "$out/prompt.txt"
  --sessions "$SESSIONS" --gen-tokens "$G" --reps "$REPS" --json)
{
  echo "daemon: ${serve_cmd[*]}"
  echo "gRPC:   ${grpc_cmd[*]} --address 127.0.0.1:PORT --server-pid PID"
  echo "HTTP:   ${http_cmd[*]} --server-pid PID"
} | tee "$out/commands.txt"

run_grpc() {
  "${grpc_cmd[@]}" --address "127.0.0.1:$(cat "$out/port")" --server-pid "$daemon_pid" |
    tail -n 1 >>"$out/grpc.jsonl"
}
run_http() {
  "${http_cmd[@]}" --server-pid "$daemon_pid" | tail -n 1 >>"$out/http.jsonl"
}

DAEMON_PER_ROUND=1 alternate_rounds run_grpc run_http

python3 - "$out/grpc.jsonl" "$out/http.jsonl" "$G" <<'PY'
import json, statistics, sys
grpc = [json.loads(l) for l in open(sys.argv[1])]
http = [json.loads(l) for l in open(sys.argv[2])]
gen = int(sys.argv[3])
med = statistics.median
def rows(runs, n, key):
    return [next(r for r in run["results"] if r["sessions"] == n)[key] for run in runs]
print(f"\n{len(grpc)} rounds; medians over rounds. daemon CPU ms per generated token (prefill "
      "included), its HTTP/gRPC ratio (median of per-round ratios), decode tok/s at the client")
print(f"{'streams':>7} {'gRPC cpu':>9} {'HTTP cpu':>9} {'ratio':>6} | {'gRPC tok/s':>10} "
      f"{'HTTP tok/s':>10} {'ratio':>6} | {'client cpu ms/tok gRPC':>22} {'HTTP':>6}")
for n in [r["sessions"] for r in grpc[0]["results"]]:
    tokens = n * gen
    cg = [x / tokens for x in rows(grpc, n, "server_cpu_s")]
    ch = [x / tokens for x in rows(http, n, "server_cpu_s")]
    wg, wh = rows(grpc, n, "decode_tokens_per_s"), rows(http, n, "decode_tokens_per_s")
    kg = med(rows(grpc, n, "client_cpu_s")) / tokens
    kh = med(rows(http, n, "client_cpu_s")) / tokens
    print(f"{n:>7} {1e3 * med(cg):>9.3f} {1e3 * med(ch):>9.3f} "
          f"{med([h / g for g, h in zip(cg, ch)]):>6.3f} | {med(wg):>10.1f} {med(wh):>10.1f} "
          f"{med([h / g for g, h in zip(wg, wh)]):>6.3f} | {1e3 * kg:>22.3f} {1e3 * kh:>6.3f}")
    print(f"{'':>7} per round, cpu ms/token: gRPC {' '.join(f'{1e3 * x:.3f}' for x in cg)} | "
          f"HTTP {' '.join(f'{1e3 * x:.3f}' for x in ch)}")
PY
echo "raw JSON: $out"
