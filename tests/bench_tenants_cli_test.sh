#!/usr/bin/env bash
# `streamd bench --tenants` on a synthetic model with tiny counts: it runs the five runs and
# prints one JSON object with the expected fields as its last line (no timing is checked);
# bad flag values exit non-zero with one error line naming the value and the limit.
# Needs no model file. Usage: bench_tenants_cli_test.sh STREAMD_BINARY
set -u
bin="$1"
# shellcheck source=cli_test_lib.sh
. "$(dirname "$0")/cli_test_lib.sh"

s=(bench --synthetic smollm2)

# A flood of 4 over 2 session slots: over-subscribed, so the runs with and without tenants
# both happen, and the shared cap of 2 tokens adds its run; the table names every run and the
# last line is the JSON.
if "$bin" "${s[@]}" --tenants --flood 4 --max-batch-sessions 2 --prompt-tokens 8 \
    --gen-tokens 6 --window 16 --threads 2 --reps 1 --shared-step-tokens 2 --json >"$tmp/out" 2>"$tmp/err"; then
  passed=$((passed + 1))
else
  fail "tenants run: rc=$?: $(head -c 400 "$tmp/err")"
fi
for row in "alone " "full " "flood " "flood, off " "flood, shared " \
    "goal: B's itl beside the flood" "goal with --shared-step-tokens 2"; do
  if grep -q "^$row" "$tmp/out"; then
    passed=$((passed + 1))
  else
    fail "the table has no row starting '$row': $(head -c 600 "$tmp/out")"
  fi
done
check_json tenants "(r := j['results']) is not None and (
      j['flood'] == 4 and j['max_batch_sessions'] == 2 and j['gen_tokens'] == 6 and
      j['reps'] == 1 and j['goal_x_alone'] == 1.5 and isinstance(j['goal_met'], bool) and
      [x['run'] for x in r] == ['alone', 'full', 'flood', 'flood, off', 'flood, shared'] and
      [x['a_sessions'] for x in r] == [0, 1, 4, 4, 4] and
      [x['fair_tenants'] for x in r] == [True, True, True, False, True] and
      [x['shared_step_tokens'] for x in r] == [0, 0, 0, 0, 2] and
      j['shared_step_tokens'] == 2 and isinstance(j['shared_goal_met'], bool) and
      all(all(k in x for k in ('itl_ms_p50', 'itl_ms_p90', 'itl_ms_p99', 'ttft_ms',
                               'tokens_per_s', 'flood_tokens', 'x_alone_p50', 'x_alone_p90',
                               'x_full_p50', 'x_full_p90', 'runs'))
          for x in r) and
      all(x['itl_ms_p50'] > 0 and x['itl_ms_p90'] >= x['itl_ms_p50'] and len(x['runs']) == 1
          for x in r) and
      r[0]['x_alone_p50'] == 1.0 and r[1]['x_full_p50'] == 1.0 and r[0]['flood_tokens'] == 0 and
      all(x['flood_tokens'] > 0 for x in r[1:]))"

expect_error flood-zero '--flood = 0 is outside [1, 4096]' -- "${s[@]}" --tenants --flood 0
expect_error flood-alone '--flood needs --tenants' -- "${s[@]}" --flood 10
expect_error shared-alone '--shared-step-tokens needs --tenants' -- "${s[@]}" --shared-step-tokens 2
expect_error shared-over-tokens '--shared-step-tokens = 600 is outside [0, --max-batch-tokens = 512]' -- "${s[@]}" --tenants --shared-step-tokens 600
expect_error slots-alone '--max-batch-sessions needs --tenants' -- "${s[@]}" --max-batch-sessions 4
expect_error with-sessions '--sessions does not apply to --tenants' -- "${s[@]}" --tenants --sessions 2
expect_error with-snapshot '--snapshot does not apply to --tenants' -- "${s[@]}" --tenants --snapshot
expect_error slots-over-tokens '--max-batch-sessions = 600 is over --max-batch-tokens = 512' -- "${s[@]}" --tenants --max-batch-sessions 600
expect_error gen-short '--gen-tokens must be >= 3 with --tenants' -- "${s[@]}" --tenants --gen-tokens 2
expect_error window-zero '--window must be >= 1 with --tenants' -- "${s[@]}" --tenants --window 0
expect_error threads-list '--threads takes one thread count with --tenants' -- "${s[@]}" --tenants --threads 1,2

finish
