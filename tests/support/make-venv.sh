#!/usr/bin/env bash
# A Python venv holding pinned PyPI packages, for the tests that drive streamd with a real
# client or check it against a reference (tests/reference/gguf-venv.sh, tests/http/openai-venv.sh
# name the pins). Created on first use at VENV_DIR, reused afterwards: pip asks the index only
# when a pinned version is missing. On success prints the venv's python as the last line; on
# failure (no python3-venv, no index) prints why on stderr and exits 1 (each caller says whether
# its tests then skip or fail).
# Usage: make-venv.sh VENV_DIR NAME==VERSION...
set -u
if [ $# -lt 2 ]; then
  echo "usage: make-venv.sh VENV_DIR NAME==VERSION..." >&2
  exit 2
fi
venv="$1"
shift
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2 ||
    { echo "python3 -m venv $venv failed (apt-get install python3-venv)" >&2; exit 1; }
fi
check='import importlib.metadata as m, sys
name, _, version = sys.argv[1].partition("==")
sys.exit(m.version(name) != version)'
missing=()
for pin in "$@"; do
  case "$pin" in
    *==*) ;;
    *) echo "make-venv.sh: \"$pin\" is not NAME==VERSION" >&2; exit 2 ;;
  esac
  "$venv/bin/python" -c "$check" "$pin" 2>/dev/null || missing+=("$pin")
done
if [ ${#missing[@]} -gt 0 ]; then
  "$venv/bin/python" -m pip install --quiet --timeout 30 --retries 2 "${missing[@]}" >&2 ||
    { echo "pip install ${missing[*]} failed (is PyPI reachable?)" >&2; exit 1; }
fi
echo "$venv/bin/python"
