# Shared by the CLI tests that check a binary's output and its errors (source it after setting
# `bin`). It makes $tmp (removed on exit) and counts passed/failed; end with `finish`.
#   fail MESSAGE
#   expect_error NAME EXPECTED_SUBSTRING -- ARGS...   exit non-zero, one stderr line, no stdout
#   check_json NAME PYTHON_EXPRESSION                  the last line of $tmp/out is a JSON
#                                                      object `j` for which it holds
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

fail() {
  failed=$((failed + 1))
  echo "FAIL: $*"
}

expect_error() {
  local name="$1" want="$2"
  shift 3
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local lines
  lines=$(wc -l <"$tmp/err")
  if [ $rc -ne 0 ] && grep -qF -- "$want" "$tmp/err" && [ ! -s "$tmp/out" ] && [ "$lines" -eq 1 ]; then
    passed=$((passed + 1))
  else
    fail "$name: rc=$rc, want stderr containing '$want' in one line and empty stdout"
    echo "  stderr: $(head -c 400 "$tmp/err")"
    echo "  stdout: $(head -c 200 "$tmp/out")"
  fi
}

check_json() {
  local name="$1" check="$2"
  if tail -n 1 "$tmp/out" | python3 -c "
import json, sys
j = json.loads(sys.stdin.read())
assert isinstance(j, dict), 'not an object'
ok = ($check)
sys.exit(0 if ok else 1)
"; then
    passed=$((passed + 1))
  else
    fail "$name: the last line is not the JSON expected"
    echo "  stdout tail: $(tail -n 3 "$tmp/out" | head -c 600)"
  fi
}

finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
