#!/usr/bin/env bash
# A venv with the official `openai` Python package (pinned) for the HTTP front door's end-to-end
# test (openai_e2e_test.py). Created on first use under VENV_DIR (default
# ~/.cache/streamd/openai-venv), reused afterwards: pip asks the index only when the pinned
# version is missing. Prints the venv's python as the last line; exits 1 saying why when it
# cannot (no python3-venv, no index), which the test reports as a failure, never a skip.
# Usage: openai-venv.sh [VENV_DIR]
set -u
venv="${1:-$HOME/.cache/streamd/openai-venv}"
version="1.109.1"
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2 ||
    { echo "python3 -m venv $venv failed (apt-get install python3-venv)" >&2; exit 1; }
fi
check='import importlib.metadata as m, sys; sys.exit(m.version("openai") != sys.argv[1])'
if ! "$venv/bin/python" -c "$check" "$version" 2>/dev/null; then
  "$venv/bin/python" -m pip install --quiet --timeout 30 --retries 2 "openai==$version" >&2 ||
    { echo "pip install openai==$version failed (is PyPI reachable?)" >&2; exit 1; }
fi
echo "$venv/bin/python"
