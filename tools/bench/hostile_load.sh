#!/usr/bin/env bash
# hostile_load.sh: the hostile-client benchmark of docs/PERFORMANCE.md ("Hostile clients").
# Starts `streamd serve` with API keys on loopback, then runs build/tests/e2e/hostile_load: an
# honest session's decode rate alone and beside CONNECTIONS idle connections (a stream each,
# never an Open) and BAD_KEYS calls with unknown keys, REPS rounds, medians.
#
# Environment: BUILD (default build), STREAMD_MODEL (default: scripts/fetch-model.sh),
#   CONNECTIONS (1000), BAD_KEYS (1000), BAD_KEY_SECONDS (2), G (gen tokens, 256), REPS (5),
#   T (engine threads, 2). Extra arguments go to hostile_load (e.g. --json).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
MODEL="${STREAMD_MODEL:-$("$ROOT/scripts/fetch-model.sh")}"
WORK="$(mktemp -d)"
trap 'kill "${PID:-0}" 2>/dev/null || true; rm -rf "$WORK"' EXIT

KEY="$(openssl rand -hex 32)"
cat > "$WORK/keys.yaml" <<YAML
keys:
  - tenant: honest
    role: user
    sha256: $(printf %s "$KEY" | sha256sum | cut -c1-64)
YAML
# The idle connections must outlive a round: server.open_timeout above its length.
"$BUILD/tools/streamd" serve --model.path="$MODEL" --engine.threads="${T:-2}" \
  --server.listen_address=127.0.0.1:0 --port-file="$WORK/port" --server.metrics_address=127.0.0.1:0 \
  --sessions.snapshot_dir= --auth.keys_file="$WORK/keys.yaml" --server.open_timeout=60s \
  --logging.level=error > "$WORK/daemon.log" 2>&1 &
PID=$!
for _ in $(seq 1 300); do
  [ -s "$WORK/port" ] && break
  kill -0 "$PID" 2>/dev/null || { cat "$WORK/daemon.log" >&2; exit 1; }
  sleep 0.2
done
PORT="$(cat "$WORK/port")"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
"$BUILD/tests/e2e/hostile_load" --address 127.0.0.1:"$PORT" --api-key "$KEY" \
  --prompt "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife." \
  --gen-tokens "${G:-256}" --connections "${CONNECTIONS:-1000}" --bad-keys "${BAD_KEYS:-1000}" \
  --bad-key-seconds "${BAD_KEY_SECONDS:-2}" --reps "${REPS:-5}" "$@"
