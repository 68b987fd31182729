#!/usr/bin/env bash
# `streamd bench --snapshot` and `streamd bench --sessions ... --snapshot-every`: both run on a
# synthetic model with tiny counts and print one JSON object with the expected keys as their
# last line; bad flag values exit non-zero with one error line naming the value and the limit.
# Needs no model file. Usage: bench_snapshot_cli_test.sh STREAMD_BINARY
set -u
bin="$1"
# shellcheck source=cli_test_lib.sh
. "$(dirname "$0")/cli_test_lib.sh"

s=(bench --synthetic smollm2)

# --snapshot: two windows' worth of tiny cases, one of them past eviction, into a given --dir.
if "$bin" "${s[@]}" --snapshot --window 12 --tokens-seen 20,3000 --reps 1 --dir "$tmp/snaps" \
    --json >"$tmp/out" 2>"$tmp/err"; then
  passed=$((passed + 1))
else
  fail "snapshot run: rc=$?: $(head -c 400 "$tmp/err")"
fi
check_json snapshot-keys "
all(k in j for k in ('model', 'backend', 'sinks', 'reps', 'bytes_per_token', 'results',
                     'sessions_per_gib')) and
len(j['results']) == 2 and
all(all(k in r for k in ('window', 'tokens_seen', 'cached_tokens', 'kv_bytes', 'snapshot_bytes',
                         'snapshot_to_kv', 'size_goal_met', 'capture_ms', 'encode_ms',
                         'write_ms', 'snapshot_ms', 'read_ms', 'decode_ms', 'restore_ms',
                         'restore_total_ms', 'snapshot_cpu_ms', 'restore_cpu_ms',
                         'read_cold_ms', 'runs'))
    for r in j['results']) and
[r['tokens_seen'] for r in j['results']] == [20, 3000] and
all(r['cached_tokens'] == 15 and r['kv_bytes'] == 15 * j['bytes_per_token'] and
    r['size_goal_met'] and r['snapshot_ms'] > 0 and r['restore_total_ms'] > 0
    for r in j['results']) and
len(j['sessions_per_gib']) == 1 and
all(c['sessions'] == c['formula_sessions'] and c['sessions'] > c['old_formula_sessions']
    for c in j['sessions_per_gib'])"
if [ -d "$tmp/snaps" ] && [ -z "$(ls -A "$tmp/snaps")" ]; then
  passed=$((passed + 1))
else
  fail "snapshot run: --dir should exist and hold no snapshot afterwards: $(ls -A "$tmp/snaps" 2>&1)"
fi

# --kv-dtype f16,int8: both caches side by side; an int8 session's K/V are half the bytes and
# its snapshot (int8 values + scales) smaller than the f16 one's; it restores and generates.
if "$bin" "${s[@]}" --snapshot --window 60 --tokens-seen 3000 --kv-dtype f16,int8 --reps 1 \
    --json >"$tmp/out" 2>"$tmp/err"; then
  passed=$((passed + 1))
else
  fail "snapshot f16,int8 run: rc=$?: $(head -c 400 "$tmp/err")"
fi
check_json snapshot-int8 "
[r['kv_dtype'] for r in j['results']] == ['f16', 'int8'] and
j['results'][1]['kv_bytes'] * 2 == j['results'][0]['kv_bytes'] and
j['results'][1]['snapshot_bytes'] < 0.7 * j['results'][0]['snapshot_bytes'] and
all(r['size_goal_met'] and r['restore_total_ms'] > 0 for r in j['results']) and
[c['kv_dtype'] for c in j['sessions_per_gib']] == ['f16', 'int8'] and
j['sessions_per_gib'][1]['sessions'] > 1.9 * j['sessions_per_gib'][0]['sessions']"
expect_error kv-dtype-unknown '--kv-dtype: "fp8" is not f16 or int8' -- "${s[@]}" --snapshot --kv-dtype f16,fp8
expect_error kv-dtype-twice '--kv-dtype: int8 is listed twice' -- "${s[@]}" --snapshot --kv-dtype int8,int8
expect_error kv-dtype-alone '--kv-dtype needs --snapshot' -- "${s[@]}" --sessions 2 --kv-dtype int8

# --sessions with --snapshot-every: the off and on intervals alternate, writes are counted. The
# run is long enough (~0.5 s) that a 50 ms interval writes even when ctest's other tests hold
# the cores (with 8 tokens it lasted 150 ms, and a starved writer wrote nothing).
if "$bin" "${s[@]}" --sessions 2 --prompt-tokens 32 --gen-tokens 32 --threads 2 \
    --snapshot-every 0,50 --reps 1 --json >"$tmp/out" 2>"$tmp/err"; then
  passed=$((passed + 1))
else
  fail "sessions run: rc=$?: $(head -c 400 "$tmp/err")"
fi
check_json sessions-snapshot-keys "
j['snapshot_every_ms'] == [0, 50] and j['resting_sessions'] == 2 and
len(j['results']) == 2 and
all(all(k in r for k in ('steady_decode_tokens_per_s', 'snapshot_every_ms', 'snapshot_writes',
                         'snapshot_writes_steady', 'snapshot_write_ms_p50', 'x_off',
                         'paired_x_off'))
    for r in j['results']) and
j['results'][0]['snapshot_writes'] == 0 and j['results'][1]['snapshot_writes'] >= 1"

expect_error window-zero '--window: "0" is not a count in [1, 8192]' -- "${s[@]}" --snapshot --window 0
expect_error window-over '--window: "9000" is not a count in [1, 8192]' -- "${s[@]}" --snapshot --window 252,9000
expect_error window-context '--sinks + --window = 8 + 8190 = 8198 is over the model context of 8192' -- "${s[@]}" --snapshot --sinks 8 --window 8190
expect_error tokens-seen-zero '--tokens-seen: "0" is not a count in [1, 1099511627776]' -- "${s[@]}" --snapshot --tokens-seen 0
expect_error tokens-seen-text '--tokens-seen: "many" is not a count in [1,' -- "${s[@]}" --snapshot --tokens-seen 10,many
expect_error tokens-seen-huge '--tokens-seen: "99999999999999999999" is not a count in [1,' -- "${s[@]}" --snapshot --tokens-seen 99999999999999999999
expect_error sinks-over '--sinks = 65 is outside [0, 64]' -- "${s[@]}" --snapshot --sinks 65
expect_error reps-zero '--reps = 0 is outside [1, 100]' -- "${s[@]}" --snapshot --reps 0
expect_error snapshot-with-sessions '--sessions does not apply to --snapshot' -- "${s[@]}" --snapshot --sessions 4
expect_error tokens-seen-alone '--tokens-seen needs --snapshot' -- "${s[@]}" --sessions 2 --tokens-seen 10
expect_error dir-alone '--dir needs --sessions' -- "${s[@]}" --dir /tmp/x
expect_error every-negative '--snapshot-every: "-5" is not a count in [0, 3600000]' -- "${s[@]}" --sessions 2 --snapshot-every 0,-5
expect_error every-over '--snapshot-every: "3600001" is not a count in [0, 3600000]' -- "${s[@]}" --sessions 2 --snapshot-every 3600001
expect_error every-alone '--snapshot-every needs --sessions' -- "${s[@]}" --snapshot-every 100
expect_error every-decode '--snapshot-every does not apply to --decode-steps' -- "${s[@]}" --sessions 2 --decode-steps 3 --snapshot-every 100
expect_error sessions-window-list '--window takes one size except with --snapshot' -- "${s[@]}" --sessions 2 --window 12,60

finish
