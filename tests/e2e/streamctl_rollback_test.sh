#!/usr/bin/env bash
# streamctl sessions truncate / fork against a real `streamd serve` (port 0): a truncated
# session continues exactly as one that generated only the kept tokens; a fork continues exactly
# as its parent; the errors (out of range, another generation, malformed ids, unknown sessions,
# missing flags, bad request ids) come with their code, the field and a non-zero exit.
# Usage: STREAMD_MODEL=PATH streamctl_rollback_test.sh STREAMD_BINARY STREAMCTL_BINARY
# shellcheck source=streamctl_test_lib.sh
. "$(dirname "$0")/streamctl_test_lib.sh"

# One session per step: greedy tokens of different sessions are compared, and on the CPU a
# step's sums differ in their last bits between batch shapes.
start_streamd --engine.max_batch_sessions=1 --sessions.snapshot_dir="$tmp/sessions"
# A field of the last JSON line of stdin: a number, or a "string" / [array] as written.
field() { tail -1 | grep -oE "\"$1\":(\"[^\"]*\"|\[[^]]*\]|-?[0-9]+)" | head -1 | cut -d: -f2-; }
# Expects the command to fail with stderr matching the pattern.
refused() {
  local pattern="$1"; shift
  if ctl "$@" >/dev/null 2>"$tmp/e"; then
    fail "$* succeeded"
  elif ! grep -qE "$pattern" "$tmp/e"; then
    fail "$*: expected /$pattern/, got: $(cat "$tmp/e")"
  fi
}
prompt="1, 2, 3, 4, 5, 6, 7, 8,"

# A: 12 tokens generated as "g1", then truncated to the first 5.
out=$(ctl generate --prompt "$prompt" -n 12 --temperature 0 --request-id g1 --keep --json)
a=$(echo "$out" | field session_id | tr -d '"')
a_ids=$(echo "$out" | field token_ids)
[ "$(echo "$out" | field output_tokens)" = 12 ] || fail "generate 12: $out"
seen=$(ctl sessions get "$a" --json | field tokens_seen)
out=$(ctl sessions truncate "$a" --request-id g1 --keep 5 --json)
[ "$(echo "$out" | field tokens_seen)" = $((seen - 7)) ] ||
  fail "truncate --keep 5 of 12 from tokens_seen $seen: $out"
[ "$(echo "$out" | field keep_tokens)" = 5 ] || fail "truncate --json keep_tokens: $out"
[ "$(ctl sessions get "$a" --json | field tokens_seen)" = $((seen - 7)) ] ||
  fail "sessions get after truncate: $(ctl sessions get "$a" --json)"
ctl sessions get "$a" --json | grep -q '"attached":false' || fail "truncate left $a attached"
text=$(ctl sessions truncate "$a" --request-id g1 --keep 5)
echo "$text" | grep -q "^truncated session $a: generation \"g1\" keeps 5 tokens; tokens_seen " ||
  fail "truncate (text): $text"

# B: the same prompt, only 5 tokens generated: the first 5 of A's.
out=$(ctl generate --prompt "$prompt" -n 5 --temperature 0 --request-id g1 --keep --json)
b=$(echo "$out" | field session_id | tr -d '"')
b_ids=$(echo "$out" | field token_ids)
case "$a_ids" in
  "${b_ids%]},"*) ;;
  *) fail "B's 5 tokens $b_ids are not A's first 5 ($a_ids)" ;;
esac
# The same input next: A and B continue alike.
next_a=$(ctl generate --session "$a" --prompt " 20," -n 10 --temperature 0 --json | field token_ids)
next_b=$(ctl generate --session "$b" --prompt " 20," -n 10 --temperature 0 --json | field token_ids)
[ -n "$next_a" ] && [ "$next_a" = "$next_b" ] ||
  fail "truncated A continues as $next_a, B (never saw the tail) as $next_b"

# Fork B: the fork starts where B is and continues as B does.
out=$(ctl sessions fork "$b" --request-id f1 --json)
f=$(echo "$out" | field session_id | tr -d '"')
echo "$f" | grep -qE '^[0-9a-f]{32}$' && [ "$f" != "$b" ] || fail "fork: $out"
[ "$(echo "$out" | field forked_from)" = "\"$b\"" ] || fail "fork forked_from: $out"
[ "$(echo "$out" | field request_id)" = '"f1"' ] || fail "fork request_id: $out"
[ "$(echo "$out" | field tokens_seen)" = "$(ctl sessions get "$b" --json | field tokens_seen)" ] ||
  fail "fork tokens_seen $(echo "$out" | field tokens_seen) is not its parent's"
ctl sessions list --json | grep -q "\"session_id\":\"$f\"" || fail "sessions list lacks the fork"
ctl sessions fork "$b" | grep -qE "^forked session $b: [0-9a-f]{32} \(tokens_seen [0-9]+\)$" ||
  fail "fork (text)"
fork_next=$(ctl generate --session "$f" --prompt " 30," -n 8 --temperature 0 --json |
  field token_ids)
parent_next=$(ctl generate --session "$b" --prompt " 30," -n 8 --temperature 0 --json |
  field token_ids)
[ -n "$fork_next" ] && [ "$fork_next" = "$parent_next" ] ||
  fail "the fork continues as $fork_next, its parent as $parent_next"

# Errors: the server's, with the field and the limit, and streamctl's own before any call.
ctl generate --session "$a" --prompt " 40," -n 6 --temperature 0 --request-id g2 >/dev/null ||
  fail "generate g2"
refused 'INVALID_ARGUMENT: truncate.keep_tokens = 7 is outside \[0, 6\]' \
  sessions truncate "$a" --request-id g2 --keep 7
refused 'NOT_FOUND: truncate.request_id "g1" is not the last generation .*"g2"' \
  sessions truncate "$a" --request-id g1 --keep 0
refused 'INVALID_ARGUMENT: truncate.request_id has a byte outside printable ASCII at offset 1' \
  sessions truncate "$a" --request-id $'g\x01' --keep 0
refused 'INVALID_ARGUMENT: fork.request_id is 129 bytes, over the limit of 128' \
  sessions fork "$a" --request-id "$(printf 'x%.0s' $(seq 1 129))"
refused 'INVALID_ARGUMENT: --keep is required' sessions truncate "$a" --request-id g2
refused 'INVALID_ARGUMENT: --keep = -1 is outside \[0, ' sessions truncate "$a" --keep -1
refused 'INVALID_ARGUMENT: sessions truncate "7" is not a session id' sessions truncate 7 --keep 0
refused 'INVALID_ARGUMENT: sessions fork needs a session id' sessions fork
refused 'NOT_FOUND: resume.session_id: session 0123456789abcdef0123456789abcdef does not exist' \
  sessions fork 0123456789abcdef0123456789abcdef
# Nothing of that changed A: keeping all of g2 is allowed and leaves it as it was.
seen=$(ctl sessions get "$a" --json | field tokens_seen)
[ "$(ctl sessions truncate "$a" --request-id g2 --keep 6 --json | field tokens_seen)" = "$seen" ] ||
  fail "truncate --keep all changed tokens_seen"

stop_streamd
[ "$failed" -eq 0 ] && echo "PASS: streamctl truncate and fork"
exit "$failed"
