#!/usr/bin/env bash
# streamctl against a real `streamd serve` (port 0): health, generate (text, --tokens, --json),
# sessions list/get/close and --session by their 32-hex-digit ids, and errors reported with their
# code and a non-zero exit (malformed ids before any call, unknown ones from the server).
# Usage: STREAMD_MODEL=PATH streamctl_test.sh STREAMD_BINARY STREAMCTL_BINARY
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

"$streamd" serve --port-file "$tmp/port" --model.path="$model" \
  --server.listen_address=127.0.0.1:0 --server.metrics_address=127.0.0.1:0 \
  --engine.kv_pool=64MiB --engine.max_chunk=64 --sessions.default_window=128 \
  --sessions.snapshot_dir="$tmp/sessions" --logging.level=warn >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 1 600); do [ -s "$tmp/port" ] && break; sleep 0.1; done
[ -s "$tmp/port" ] || { echo "FAIL: daemon did not start: $(cat "$tmp/err")"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
ctl() { "$streamctl" "$@" --address "$addr"; }

[ "$(ctl health)" = "SERVING" ] || fail "health is not SERVING"

out=$(ctl generate --prompt "Once upon a time" -n 4 --temperature 0 --json | tail -1)
echo "$out" | grep -q '"reason":"length"' || fail "generate --json: $out"
echo "$out" | grep -q '"output_tokens":4' || fail "generate --json output_tokens: $out"

out=$(ctl generate --tokens --prompt "1,2,3" -n 2 --temperature 0 --json | tail -1)
echo "$out" | grep -qE '"token_ids":\[[0-9]+,[0-9]+\]' || fail "generate --tokens: $out"

text=$(ctl generate --chat --prompt "What is the capital of France?" -n 12 --temperature 0)
echo "$text" | grep -q "Paris" || fail "generate --chat: $text"

ctl generate --prompt "Hello" -n 2 --temperature 0 --keep >/dev/null 2>"$tmp/keep" || fail "--keep"
id=$(grep -oE 'session [0-9a-f]{32} left open' "$tmp/keep" | awk '{print $2}')
[ -n "$id" ] || fail "--keep printed no session id: $(cat "$tmp/keep")"
ctl sessions list --json | grep -q "\"session_id\":\"$id\"" || fail "sessions list lacks $id"
ctl sessions list | grep -q "^$id " || fail "sessions list (text) lacks $id"
ctl sessions get "$id" --json | grep -q '"attached":false' || fail "sessions get $id"
upper=$(echo "$id" | tr 'a-f' 'A-F')
ctl sessions get "$upper" --json | grep -q "\"session_id\":\"$id\"" || fail "sessions get $upper"
out=$(ctl generate --session "$id" --prompt " and" -n 2 --temperature 0 --json | tail -1)
echo "$out" | grep -q "\"session_id\":\"$id\"" || fail "generate --session $id: $out"
ctl sessions get "$id" --json | grep -q '"attached":false' || fail "--session left $id attached"
ctl sessions close "$id" | grep -q "^closed session $id$" || fail "sessions close $id"
if ctl sessions get "$id" 2>"$tmp/e"; then fail "get of a closed session succeeded"; fi
grep -q "NOT_FOUND" "$tmp/e" || fail "closed session: $(cat "$tmp/e")"
if ctl generate --session "$id" --prompt "x" -n 2 2>"$tmp/e" >/dev/null; then
  fail "--session of a closed session succeeded"
fi
grep -q "NOT_FOUND: resume.session_id: session $id does not exist" "$tmp/e" ||
  fail "--session of a closed session: $(cat "$tmp/e")"

# Malformed ids are refused before any call; a well-formed unknown one is the server's NOT_FOUND.
if ctl sessions get 7 2>"$tmp/e"; then fail "sessions get 7 succeeded"; fi
grep -q 'INVALID_ARGUMENT: sessions get "7" is not a session id (32 hex digits' "$tmp/e" ||
  fail "sessions get 7: $(cat "$tmp/e")"
if ctl sessions close 0123456789abcdef0123456789abcdeg 2>"$tmp/e"; then
  fail "sessions close of a non-hex id succeeded"
fi
grep -q 'INVALID_ARGUMENT: sessions close: character 31' "$tmp/e" || fail "non-hex: $(cat "$tmp/e")"
if ctl generate --session 12345 --prompt "x" -n 2 2>"$tmp/e" >/dev/null; then
  fail "generate --session 12345 succeeded"
fi
grep -q 'INVALID_ARGUMENT: --session "12345" is not a session id' "$tmp/e" ||
  fail "--session 12345: $(cat "$tmp/e")"
if ctl sessions get 0123456789abcdef0123456789abcdef 2>"$tmp/e"; then
  fail "get of an unknown session succeeded"
fi
grep -q "NOT_FOUND: session_id: session 0123456789abcdef0123456789abcdef" "$tmp/e" ||
  fail "unknown session: $(cat "$tmp/e")"

if ctl generate --tokens --prompt "99999999" -n 2 2>"$tmp/e" >/dev/null; then
  fail "an out-of-vocabulary id was accepted"
fi
grep -q "INVALID_ARGUMENT: append.tokens\[0\]" "$tmp/e" || fail "oov: $(cat "$tmp/e")"
if ctl generate --prompt "x" -n 0 --max-tokens 99999 2>"$tmp/e" >/dev/null; then
  fail "max_tokens over the limit was accepted"
fi
grep -q "generate.max_tokens" "$tmp/e" || fail "max_tokens: $(cat "$tmp/e")"

kill -TERM "$pid"
for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
wait "$pid"
rc=$?
pid=""
[ "$rc" -eq 0 ] || fail "daemon exit code $rc after SIGTERM"

[ "$failed" -eq 0 ] && echo "streamctl_test: all passed"
exit "$failed"
