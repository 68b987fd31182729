#!/usr/bin/env bash
# gRPC overhead per token: the same closed-loop load measured inside one process
# (`streamd bench --sessions N`: the engine, token events timed at the engine) and through the
# daemon (`streamd serve` on 127.0.0.1 + grpc_load: N Session streams, token arrivals timed at
# the client), same model, threads, engine limits and token counts, in one run. Rounds alternate
# the order (bench first, then daemon first, ...) so a noisy neighbour or a drift hurts both
# alike; the summary prints medians over rounds, their ratio, and the CPU time per token of
# each side (bench process; daemon + client).
# The daemon runs for its turn only, so its idle threads never compete with the bench.
#
# Usage: tools/bench/grpc_overhead.sh [MODEL]
# Env: SESSIONS ("1,16") P (128) G (64) T (2) B (512: max batch tokens) ROUNDS (3)
#      BUILD (build: holds tools/streamd and tests/e2e/grpc_load) OUT (keeps the raw JSON)
#      SPIN (on): "off" runs both sides with OMP_WAIT_POLICY=passive, so that idle workers
#      sleep instead of spinning (spinning workers collapse when another process competes for
#      the cores; docs/PERFORMANCE.md)
#      PROMPT_FILE (the prose the prompt ids come from; default: Pride and Prejudice from
#      ../shared/data, 400 lines from its first sentence on)
#
# Both sides: sink cache with 4 sinks and a window of P + G (nothing evicted), greedy, P prompt
# tokens per session, G generated. The bench appends random ordinary token ids and ignores
# end-of-generation; over gRPC end-of-generation cannot be ignored, so grpc_load appends the
# first P tokens of real prose, which the model continues for G tokens (it fails the run if a
# generation stops early). Decode cost per token does not depend on which tokens they are.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tools/bench/overhead_common.sh
source tools/bench/overhead_common.sh
overhead_init grpc_overhead "${1:-}"
SESSIONS="${SESSIONS:-1,16}" P="${P:-128}" G="${G:-64}" T="${T:-2}" B="${B:-512}"
ROUNDS="${ROUNDS:-3}" SPIN="${SPIN:-on}"
rm -f "$out/bench.jsonl" "$out/grpc.jsonl" "$out/load.txt"

# The prompt: P token ids of prose (BOS is the server's business: tokenize without it); by
# default 400 lines, about 5,000 tokens: enough for P up to that.
overhead_prompt 400
"$streamd" tokenize --model "$model" --no-bos --file "$out/prompt.txt" >"$out/prompt-ids.json"

omp_env=()
if [ "$SPIN" = off ]; then omp_env=(OMP_WAIT_POLICY=passive); fi
bench_cmd=(env "${omp_env[@]}" "$streamd" bench --model "$model" --sessions "$SESSIONS"
  --prompt-tokens "$P" --gen-tokens "$G" --threads "$T" --max-batch-tokens "$B" --json)
serve_cmd=(env "${omp_env[@]}" "$streamd" serve --model.path="$model"
  --server.listen_address=127.0.0.1:0 --server.metrics_address=127.0.0.1:0
  --engine.threads="$T" --engine.max_batch_tokens="$B" --engine.kv_pool=512MiB
  --sessions.snapshot_dir="$out/sessions" --logging.level=warn --port-file "$out/port")
load_cmd=("$load" --prompt-ids "$out/prompt-ids.json" --sessions "$SESSIONS" --prompt-tokens "$P"
  --gen-tokens "$G" --json)
{
  echo "bench:  ${bench_cmd[*]}"
  echo "daemon: ${serve_cmd[*]}"
  echo "client: ${load_cmd[*]} --address 127.0.0.1:PORT --server-pid PID"
} | tee "$out/commands.txt"

run_bench() {
  "${bench_cmd[@]}" | tail -n 1 >>"$out/bench.jsonl"
}
run_grpc() {
  start_daemon
  "${load_cmd[@]}" --address "127.0.0.1:$(cat "$out/port")" --server-pid "$daemon_pid" |
    tail -n 1 >>"$out/grpc.jsonl"
  stop_daemon
}

alternate_rounds run_bench run_grpc

python3 - "$out/bench.jsonl" "$out/grpc.jsonl" "$G" <<'PY'
import json, statistics, sys
bench = [json.loads(l) for l in open(sys.argv[1])]
grpc = [json.loads(l) for l in open(sys.argv[2])]
gen = int(sys.argv[3])
med = statistics.median
def rows(runs, n, key):
    return [next(r for r in run["results"] if r["sessions"] == n)[key] for run in runs]
print(f"\n{len(bench)} rounds. Wall: decode tok/s aggregated over the N sessions, medians over "
      "rounds, and the median of the per-round ratios (each round's two runs are adjacent in "
      "time). CPU: user + system seconds of the run (bench process; daemon, and daemon + "
      "client) per generated token, prefill included on both sides.")
print(f"{'sessions':>8} {'bench tok/s':>11} {'gRPC tok/s':>10} {'ratio':>6} {'paired':>6} "
      f"{'bench itl':>9} {'gRPC itl':>8} | {'cpu ms/token: bench':>19} {'daemon':>6} "
      f"{'+client':>7} {'diff us':>7}")
for n in [r["sessions"] for r in bench[0]["results"]]:
    b, g = rows(bench, n, "decode_tokens_per_s"), rows(grpc, n, "decode_tokens_per_s")
    paired = med([y / x for x, y in zip(b, g)])
    ib, ig = med(rows(bench, n, "itl_ms_p50")), med(rows(grpc, n, "itl_ms_p50"))
    tokens = n * gen
    cb = med(rows(bench, n, "cpu_s")) / tokens
    cs = med(rows(grpc, n, "server_cpu_s")) / tokens
    cc = med([s + c for s, c in zip(rows(grpc, n, "server_cpu_s"),
                                    rows(grpc, n, "client_cpu_s"))]) / tokens
    print(f"{n:>8} {med(b):>11.1f} {med(g):>10.1f} {med(g) / med(b):>6.3f} {paired:>6.3f} "
          f"{ib:>9.2f} {ig:>8.2f} | {1e3 * cb:>19.2f} {1e3 * cs:>6.2f} {1e3 * cc:>7.2f} "
          f"{1e6 * (cc - cb):>7.0f}")
    print(f"{'':>8} per round: bench {' '.join(f'{x:.1f}' for x in b)} | "
          f"gRPC {' '.join(f'{x:.1f}' for x in g)}")
PY
echo "raw JSON: $out"
