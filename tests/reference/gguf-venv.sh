#!/usr/bin/env bash
# A venv with the `gguf` PyPI package (pinned) for the tests that compare streamd's dequantizers
# with its numpy code (tests/reference/gguf_dequantize.py). Created on first use under VENV_DIR
# (the build directory's gguf-venv, or ~/.cache), reused afterwards: pip asks the index only when
# the pinned version is missing. On success prints the venv's python as the last line; on failure
# (no python3-venv, no index) prints why on stderr and exits 1, which the tests report as a skip.
# Usage: gguf-venv.sh VENV_DIR
set -u
venv="$1"
version="0.19.0"
pin="gguf==$version"
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2 ||
    { echo "python3 -m venv $venv failed (apt-get install python3-venv)" >&2; exit 1; }
fi
check='import importlib.metadata as m, sys; sys.exit(m.version("gguf") != sys.argv[1])'
if ! "$venv/bin/python" -c "$check" "$version" 2>/dev/null; then
  "$venv/bin/python" -m pip install --quiet --timeout 30 --retries 2 "$pin" >&2 ||
    { echo "pip install $pin failed (is PyPI reachable?)" >&2; exit 1; }
fi
echo "$venv/bin/python"
