#!/usr/bin/env bash
# A venv with the official `openai` Python package (pinned here) for the HTTP front door's
# end-to-end test (openai_e2e_test.py) and tools/bench, made and reused by
# tests/support/make-venv.sh. Prints the venv's python as the last line; exits 1 saying why when
# it cannot (no python3-venv, no index), which the test reports as a failure, never a skip.
# Usage: openai-venv.sh [VENV_DIR]   (default ~/.cache/streamd/openai-venv)
set -u
exec "$(dirname "$0")/../support/make-venv.sh" "${1:-$HOME/.cache/streamd/openai-venv}" \
  "openai==1.109.1"
