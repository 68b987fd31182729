#!/usr/bin/env bash
# The HTTP front door against the official `openai` Python package (pinned, openai-venv.sh):
# openai_e2e_test.py starts its own daemons (port 0) and drives them with the SDK and with raw
# sockets (bad input). No index to install from is a failure, never a skip.
# Usage: STREAMD_MODEL=PATH openai_e2e_test.sh STREAMD_BINARY
set -u
here="$(cd "$(dirname "$0")" && pwd)"
streamd="$1"
model="${STREAMD_MODEL:-}"
if [ -z "$model" ] || [ ! -f "$model" ]; then
  echo "FAIL: model path '$model' missing (set STREAMD_MODEL; make test does)"; exit 1
fi
python="$("$here/openai-venv.sh" "${STREAMD_OPENAI_VENV:-$HOME/.cache/streamd/openai-venv}" | tail -n 1)" ||
  { echo "FAIL: no venv with the openai package"; exit 1; }
STREAMD_BINARY="$streamd" STREAMD_MODEL="$model" exec "$python" "$here/openai_e2e_test.py" -v
