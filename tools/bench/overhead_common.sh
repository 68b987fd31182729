# overhead_common.sh: what grpc_overhead.sh and http_overhead.sh share (sourced, not run): the
# binaries and model they check, the output folder, the prose prompt, one `streamd serve` at a
# time, and the rounds that alternate which of two runs goes first (so that a drift or a noisy
# neighbour hurts both alike). Each caller sets its own defaults and summary.
# shellcheck shell=bash

# overhead_init TOOL [MODEL]: sets tool, model, build, streamd, load (grpc_load) and out, and
# fails with a message naming TOOL when a binary or the model is missing. BUILD and OUT as the
# callers document.
overhead_init() {
  tool=$1
  model="${2:-${STREAMD_MODEL:-$HOME/.cache/streamd/models/SmolLM2-135M-Instruct.Q4_1.gguf}}"
  build="${BUILD:-build}"
  streamd="$build/tools/streamd"
  load="$build/tests/e2e/grpc_load"
  local bin
  for bin in "$streamd" "$load"; do
    if [ ! -x "$bin" ]; then
      echo "$tool: $bin not found; build it: cmake --build $build --target streamd grpc_load" >&2
      exit 1
    fi
  done
  [ -f "$model" ] || { echo "$tool: no model at $model (scripts/fetch-model.sh)" >&2; exit 1; }
  out="${OUT:-$(mktemp -d)}"
  mkdir -p "$out"
}

# overhead_prompt LINES [INTRO]: $out/prompt.txt is $PROMPT_FILE, or else INTRO and a blank line
# (when given) and Pride and Prejudice from ../shared/data, its first sentence and the LINES
# lines after it.
overhead_prompt() {
  if [ -n "${PROMPT_FILE:-}" ]; then
    cp "$PROMPT_FILE" "$out/prompt.txt"
    return
  fi
  {
    if [ -n "${2:-}" ]; then printf '%s\n\n' "$2"; fi
    sed -n "/It is a truth universally acknowledged/,+${1}p" ../shared/data/pride-and-prejudice.txt
  } >"$out/prompt.txt"
}

# start_daemon: runs the caller's serve_cmd (an array; it must write its gRPC port with
# --port-file "$out/port") in the background as $daemon_pid, and waits until it listens.
# stop_daemon: SIGTERM, then waits; also on exit.
daemon_pid=""
start_daemon() {
  rm -f "$out/port"
  # shellcheck disable=SC2154  # serve_cmd is the caller's
  "${serve_cmd[@]}" >"$out/serve.log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 600); do
    [ -s "$out/port" ] && break
    kill -0 "$daemon_pid" 2>/dev/null || { cat "$out/serve.log" >&2; exit 1; }
    sleep 0.2
  done
  [ -s "$out/port" ] || { echo "$tool: the daemon did not listen" >&2; exit 1; }
}
stop_daemon() {
  if [ -n "$daemon_pid" ]; then
    kill -TERM "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=""
  fi
}
trap stop_daemon EXIT

# alternate_rounds A B: $ROUNDS rounds of the commands A and B, A first in odd rounds and B first
# in even ones; each round's start (UTC time, uptime) is printed and kept in $out/load.txt. With
# DAEMON_PER_ROUND=1 each round runs in a fresh daemon (start_daemon ... stop_daemon).
alternate_rounds() {
  local round
  for round in $(seq "$ROUNDS"); do
    echo "round $round: $(date -u +%FT%TZ) $(uptime)" | tee -a "$out/load.txt"
    if [ "${DAEMON_PER_ROUND:-0}" = 1 ]; then start_daemon; fi
    if [ $((round % 2)) -eq 1 ]; then "$1"; "$2"; else "$2"; "$1"; fi
    if [ "${DAEMON_PER_ROUND:-0}" = 1 ]; then stop_daemon; fi
  done
  echo "end: $(date -u +%FT%TZ) $(uptime)" | tee -a "$out/load.txt"
}
