#!/usr/bin/env bash
# `streamd build`'s stage lines (tools/build_stages.h) on a tiny synthetic model: every stage
# the build runs is announced and then closed with its time, in order, on stderr, with --quiet
# too; stdout keeps the result ("wrote"); a --reuse of a current plan runs no stage. No timing
# is checked. Usage: build_stages_cli_test.sh STREAMD_BINARY MAKE_TEST_GGUF_BINARY
set -u
bin="$1"
make_gguf="$2"
# shellcheck source=cli_test_lib.sh
. "$(dirname "$0")/cli_test_lib.sh"

"$make_gguf" good "$tmp/m.gguf" || { echo "FAIL: make_test_gguf good"; exit 1; }

# Without an eval text there is no eval gate and no int8 calibration: load, tune, time steps,
# write.
for quiet in "" --quiet; do
  rm -f "$tmp/m.plan"
  if "$bin" build --model "$tmp/m.gguf" --out "$tmp/m.plan" --rounds 1 --window 16 $quiet \
      >"$tmp/out" 2>"$tmp/err"; then
    passed=$((passed + 1))
  else
    fail "build $quiet: rc=$?: $(head -c 400 "$tmp/err")"
    continue
  fi
  grep -q "^streamd build: wrote $tmp/m.plan" "$tmp/out" && passed=$((passed + 1)) ||
    fail "build $quiet: no 'wrote' line on stdout: $(head -c 400 "$tmp/out")"
  # Each stage: "[T s] NAME: what" then "[T s] NAME: done in D s", in this order.
  want=""
  for stage in load tune "time steps" write; do
    want+="${stage}: begin"$'\n'"${stage}: done"$'\n'
  done
  got=$(sed -nE 's/^streamd build: \[[0-9]+\.[0-9] s\] ([a-z ]+): (done in [0-9]+\.[0-9] s.*)?.*$/\1: \2/p' \
          "$tmp/err" | sed -E 's/: done in .*/: done/; s/: $/: begin/')
  if [ "$got"$'\n' = "$want" ]; then
    passed=$((passed + 1))
  else
    fail "build $quiet: stage lines differ; stderr:"$'\n'"$(cat "$tmp/err")"
  fi
  # --quiet leaves stdout to the result lines.
  if [ -n "$quiet" ]; then
    [ "$(wc -l <"$tmp/out")" -eq 2 ] && passed=$((passed + 1)) ||
      fail "build --quiet: stdout has more than the result: $(head -c 400 "$tmp/out")"
  fi
done

# A current plan is kept: no stage runs.
if "$bin" build --model "$tmp/m.gguf" --out "$tmp/m.plan" --reuse --quiet >"$tmp/out" 2>"$tmp/err" &&
    grep -q "is current" "$tmp/out" && [ ! -s "$tmp/err" ]; then
  passed=$((passed + 1))
else
  fail "build --reuse: want 'is current' and no stage lines; stderr: $(head -c 400 "$tmp/err")"
fi

finish
