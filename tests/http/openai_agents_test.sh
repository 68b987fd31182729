#!/usr/bin/env bash
# The OpenAI Agents SDK (`openai-agents`, pinned; its own venv, since it needs a newer `openai`
# than openai_e2e_test.py pins) in a tool-less agent loop against the daemon
# (openai_agents_test.py). No index to install from is a failure, never a skip.
# Usage: STREAMD_MODEL=PATH openai_agents_test.sh STREAMD_BINARY
set -u
here="$(cd "$(dirname "$0")" && pwd)"
model="${STREAMD_MODEL:-}"
if [ -z "$model" ] || [ ! -f "$model" ]; then
  echo "FAIL: model path '$model' missing (set STREAMD_MODEL; make test does)"; exit 1
fi
python="$("$here/../support/make-venv.sh" \
  "${STREAMD_AGENTS_VENV:-$HOME/.cache/streamd/agents-venv}" "openai-agents==0.24.0" |
  tail -n 1)" || { echo "FAIL: no venv with the openai-agents package"; exit 1; }
cd "$here" && STREAMD_BINARY="$1" STREAMD_MODEL="$model" exec "$python" openai_agents_test.py -v
