#!/usr/bin/env bash
# streamctl against a real `streamd serve` (port 0): health (every service name a probe asks,
# an unknown one, --timeout against a port that never answers), generate (text, --tokens, --json),
# sessions list/get/close and --session by their 32-hex-digit ids, and errors reported with their
# code and a non-zero exit (malformed ids before any call, unknown ones from the server); then
# sessions export/import between two daemons (the session continues alike on both), the
# offloaded column of sessions list, and the transfers' errors.
# Usage: STREAMD_MODEL=PATH streamctl_test.sh STREAMD_BINARY STREAMCTL_BINARY
# shellcheck source=streamctl_test_lib.sh
. "$(dirname "$0")/streamctl_test_lib.sh"

start_streamd --sessions.snapshot_dir="$tmp/sessions"

[ "$(ctl health)" = "SERVING" ] || fail "health is not SERVING"
# The names the probes ask (deploy/kubernetes/deployment.yaml): each SERVING, exit 0.
for service in "" streamd.v1.Streamd liveness readiness; do
  out=$(ctl health --service "$service" --timeout 5) || fail "health --service '$service' exit $?"
  [ "$out" = "SERVING" ] || fail "health --service '$service': $out"
done
ctl health --service readiness --json | grep -q '"status":"SERVING"' || fail "health --json"
if ctl health --service nope 2>"$tmp/e" >/dev/null; then fail "health of an unknown service"; fi
grep -q 'NOT_FOUND.*nope' "$tmp/e" || fail "health --service nope: $(cat "$tmp/e")"
# --timeout bounds the wait: a port that accepts and never answers (a listen backlog nobody
# accepts from) fails within it, saying so, instead of hanging for the default 10 s.
python3 -c 'import socket,sys,time
s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(8); print(s.getsockname()[1], flush=True)
time.sleep(60)' >"$tmp/silent_port" &
silent=$!
for _ in $(seq 1 50); do [ -s "$tmp/silent_port" ] && break; sleep 0.1; done
start=$(date +%s%N)
if "$streamctl" health --address "127.0.0.1:$(cat "$tmp/silent_port")" --timeout 0.5 \
    2>"$tmp/e" >/dev/null; then
  fail "health of a silent port succeeded"
fi
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
kill "$silent" 2>/dev/null
grep -q "DEADLINE_EXCEEDED" "$tmp/e" || fail "health --timeout: $(cat "$tmp/e")"
[ "$elapsed_ms" -lt 5000 ] || fail "health --timeout 0.5 took ${elapsed_ms} ms"
if ctl health --timeout 0 2>"$tmp/e"; then fail "health --timeout 0 was accepted"; fi
grep -q -- "--timeout" "$tmp/e" || fail "health --timeout 0: $(cat "$tmp/e")"

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

stop_streamd

# sessions export / import: a session moves from daemon A to daemon B (same model, each its own
# snapshot directory) and continues there as it does on A. One token per step on both, so that
# both compute every token alike (the CPU's sums differ in their last bits between batch shapes).
start_daemon() {  # NAME [FLAGS...]: starts a daemon; its address in $tmp/NAME.addr
  local name="$1"; shift
  "$streamd" serve --port-file "$tmp/$name.port" --model.path="$model" \
    --server.listen_address=127.0.0.1:0 --server.metrics_address=127.0.0.1:0 \
    --engine.kv_pool=64MiB --engine.max_batch_tokens=1 --engine.max_batch_sessions=1 \
    --engine.max_chunk=1 --sessions.default_window=64 --sessions.snapshot_dir="$tmp/$name" \
    --logging.level=warn "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  echo $! >"$tmp/$name.pid"
  for _ in $(seq 1 600); do [ -s "$tmp/$name.port" ] && break; sleep 0.1; done
  if [ ! -s "$tmp/$name.port" ]; then
    echo "FAIL: daemon $name did not start: $(cat "$tmp/$name.err")"
    exit 1
  fi
  echo "127.0.0.1:$(cat "$tmp/$name.port")" >"$tmp/$name.addr"
}
stop_daemon() {
  local p; p=$(cat "$tmp/$1.pid")
  kill -TERM "$p"
  for _ in $(seq 1 600); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  wait "$p" || fail "daemon $1 exit code $? after SIGTERM"
}
cleanup() {
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
  for f in "$tmp"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
  rm -rf "$tmp"
}
# B offloads detached sessions after 1 s, so that its listing shows one.
start_daemon a
start_daemon b --sessions.offload_after=1s
ctl_a() { "$streamctl" "$@" --address "$(cat "$tmp/a.addr")"; }
ctl_b() { "$streamctl" "$@" --address "$(cat "$tmp/b.addr")"; }
prompt="504,2365,6354,16438,27003,690,260,23790,2767,30"
ctl_a generate --tokens --prompt "$prompt" -n 6 --temperature 0 --keep >/dev/null 2>"$tmp/keep" ||
  fail "generate --keep on a"
id=$(grep -oE 'session [0-9a-f]{32} left open' "$tmp/keep" | awk '{print $2}')
[ -n "$id" ] || fail "--keep printed no session id: $(cat "$tmp/keep")"
seen_a=$(ctl_a sessions get "$id" --json | grep -oE '"tokens_seen":[0-9]+')
[ "$seen_a" = '"tokens_seen":16' ] || fail "session on a: $seen_a"

out=$(ctl_a sessions export "$id" --out "$tmp/s.snap") || fail "sessions export --out: $out"
echo "$out" | grep -qE "^exported session $id: [0-9]+ bytes to $tmp/s.snap$" || fail "export: $out"
[ -s "$tmp/s.snap" ] || fail "export --out wrote nothing"
[ -e "$tmp/s.snap.partial" ] && fail "export left its temporary file"
ctl_a sessions export "$id" >"$tmp/s2.snap" || fail "sessions export to stdout"
[ "$(stat -c %s "$tmp/s.snap")" = "$(stat -c %s "$tmp/s2.snap")" ] ||
  fail "export to stdout and to --out differ in size"
head -c 8 "$tmp/s2.snap" | grep -q "STRMDSNP" || fail "stdout does not hold a snapshot"
# A terminal is refused (script(1) gives the command one), with a message and exit 1.
if command -v script >/dev/null; then
  script -qec "$streamctl sessions export $id --address $(cat "$tmp/a.addr")" /dev/null \
    >"$tmp/tty" 2>&1 && fail "export to a terminal succeeded"
  grep -q "FAILED_PRECONDITION: sessions export: stdout is a terminal" "$tmp/tty" ||
    fail "export to a terminal: $(cat "$tmp/tty")"
fi

out=$(ctl_b sessions import "$tmp/s.snap" --json) || fail "sessions import: $out"
echo "$out" | grep -q "\"session_id\":\"$id\"" || fail "import --json: $out"
echo "$out" | grep -q '"resident":true' || fail "import --json resident: $out"
echo "$out" | grep -q '"tokens_seen":16' || fail "import --json tokens_seen: $out"
# In b's model directory (<snapshot_dir>/<fingerprint prefix>/, docs/SESSIONS.md).
ls "$tmp"/b/*/"$id.snap" >/dev/null 2>&1 || fail "the import is not in b's snapshot directory"
if ctl_b sessions import - <"$tmp/s2.snap" 2>"$tmp/e" >/dev/null; then
  fail "a second import of $id succeeded"
fi
grep -q "ALREADY_EXISTS: import: session $id already exists here" "$tmp/e" ||
  fail "second import: $(cat "$tmp/e")"
# Detached on b for over offload_after: listed as offloaded, with the same context.
for _ in $(seq 1 100); do
  ctl_b sessions list | grep -q "^$id .* offloaded detached" && break
  sleep 0.1
done
ctl_b sessions list | grep -q "^$id .* offloaded detached" ||
  fail "sessions list on b does not show $id offloaded: $(ctl_b sessions list)"
ctl_b sessions get "$id" --json | grep -q '"offloaded":true' || fail "get --json offloaded"
seen_b=$(ctl_b sessions get "$id" --json | grep -oE '"tokens_seen":[0-9]+')
[ "$seen_b" = "$seen_a" ] || fail "tokens_seen on b ($seen_b) differs from a ($seen_a)"
# The same continuation on both (b reads it back from disk first).
more="5765,1024,3004"
cont_a=$(ctl_a generate --session "$id" --tokens --prompt "$more" -n 8 --temperature 0 --json |
  tail -1 | grep -oE '"token_ids":\[[0-9,]*\]')
cont_b=$(ctl_b generate --session "$id" --tokens --prompt "$more" -n 8 --temperature 0 --json |
  tail -1 | grep -oE '"token_ids":\[[0-9,]*\]')
[ -n "$cont_a" ] && [ "$cont_a" = "$cont_b" ] ||
  fail "continuation on b ($cont_b) differs from a ($cont_a)"

# Errors: one line naming the value and the reason, exit 1.
if ctl_a sessions export 0123456789abcdef0123456789abcdef --out "$tmp/x.snap" 2>"$tmp/e"; then
  fail "export of an unknown session succeeded"
fi
grep -q "NOT_FOUND: session_id: session 0123456789abcdef0123456789abcdef" "$tmp/e" ||
  fail "export unknown: $(cat "$tmp/e")"
[ -e "$tmp/x.snap" ] || [ -e "$tmp/x.snap.partial" ] && fail "a failed export left a file"
if ctl_b sessions import "$tmp/nonexistent.snap" 2>"$tmp/e"; then fail "import of no file"; fi
grep -q "NOT_FOUND: sessions import: cannot open \"$tmp/nonexistent.snap\"" "$tmp/e" ||
  fail "import of no file: $(cat "$tmp/e")"
: >"$tmp/empty.snap"
if ctl_b sessions import "$tmp/empty.snap" 2>"$tmp/e"; then fail "import of an empty file"; fi
grep -q "INVALID_ARGUMENT: sessions import: \"$tmp/empty.snap\" is empty" "$tmp/e" ||
  fail "import of an empty file: $(cat "$tmp/e")"
head -c 5000 "$tmp/s2.snap" >"$tmp/cut.snap"
if ctl_b sessions import "$tmp/cut.snap" 2>"$tmp/e"; then fail "import of a truncated file"; fi
grep -q "DATA_LOSS: " "$tmp/e" || fail "import of a truncated file: $(cat "$tmp/e")"
[ "$(wc -l <"$tmp/e")" -eq 1 ] || fail "the error is not one line: $(cat "$tmp/e")"
if ctl_b sessions import 2>"$tmp/e"; then fail "import without a file"; fi
grep -q "INVALID_ARGUMENT: sessions import needs a snapshot file" "$tmp/e" ||
  fail "import without a file: $(cat "$tmp/e")"
if ctl_b sessions list --out "$tmp/x" 2>"$tmp/e"; then fail "list --out succeeded"; fi
grep -q "INVALID_ARGUMENT: --out is for sessions export only" "$tmp/e" ||
  fail "list --out: $(cat "$tmp/e")"
stop_daemon a
stop_daemon b

[ "$failed" -eq 0 ] && echo "streamctl_test: all passed"
exit "$failed"
