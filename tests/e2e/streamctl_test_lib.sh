# shellcheck shell=bash
# Shared by the streamctl tests against a real `streamd serve` (source it first: the script's
# arguments are STREAMD_BINARY STREAMCTL_BINARY, and STREAMD_MODEL names the model). It sets
# $streamd, $streamctl and $model, makes $tmp (removed on exit, the daemon in $pid killed) and
# counts failures in $failed; end with `exit "$failed"`.
#   fail MESSAGE
#   start_streamd FLAGS...   serves on port 0 with the tests' pool, chunk and window and FLAGS
#                            (its stdout and stderr in $tmp/out, $tmp/err); sets $pid and $addr,
#                            and exits if the daemon does not start
#   ctl ARGS...              streamctl ARGS against $addr
#   stop_streamd             SIGTERM; a failure unless the daemon then exits 0
set -u
streamd="$1"
streamctl="$2"
model="${STREAMD_MODEL:-}"
if [ -z "$model" ] || [ ! -f "$model" ]; then
  echo "FAIL: model path '$model' missing (set STREAMD_MODEL; make test does)"; exit 1
fi
tmp="$(mktemp -d)"
pid=""
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
failed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

start_streamd() {
  "$streamd" serve --port-file "$tmp/port" --model.path="$model" \
    --server.listen_address=127.0.0.1:0 --server.metrics_address=127.0.0.1:0 \
    --engine.kv_pool=64MiB --engine.max_chunk=64 --sessions.default_window=128 \
    --logging.level=warn "$@" >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  for _ in $(seq 1 600); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  [ -s "$tmp/port" ] || { echo "FAIL: daemon did not start: $(cat "$tmp/err")"; exit 1; }
  addr="127.0.0.1:$(cat "$tmp/port")"
}

ctl() { "$streamctl" "$@" --address "$addr"; }

stop_streamd() {
  kill -TERM "$pid"
  for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  wait "$pid"
  local rc=$?
  pid=""
  [ "$rc" -eq 0 ] || fail "daemon exit code $rc after SIGTERM: $(tail -c 400 "$tmp/err")"
}
