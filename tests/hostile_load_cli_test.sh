#!/usr/bin/env bash
# The hostile-client benchmark runs end to end (tools/bench/hostile_load.sh, small numbers):
# every bad-key call is refused UNAUTHENTICATED and the honest session generates beside the
# attack. No rate is asserted here (PERFORMANCE.md records the measured ratio).
# Usage: hostile_load_cli_test.sh BUILD_DIR
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
out="$(BUILD="$1" CONNECTIONS=50 BAD_KEYS=40 BAD_KEY_SECONDS=1 G=96 REPS=1 \
  "$ROOT/tools/bench/hostile_load.sh" --json | tail -1)"
echo "$out"
python3 - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
assert r["bad_keys_refused"] == 40, r
assert r["median_alone_tok_s"] > 0 and r["median_attacked_tok_s"] > 0, r
assert len(r["alone_tok_s"]) == 1 and len(r["attacked_tok_s"]) == 1, r
print("hostile_load_cli: ok")
PY
