#!/usr/bin/env bash
# The Python client (clients/python) against the freshly built daemon: a venv
# (~/.cache/streamd/python-client-venv, or STREAMD_PYTHON_CLIENT_VENV),
# `pip install './clients/python[pipecat]' pytest pytest-asyncio` (from PyPI: no index = FAIL,
# never a skip), the pytest suite (tests/test_pipecat.py included: a real Pipecat
# pipeline; STREAMD_REQUIRE_PIPECAT=1 makes a missing pipecat a failure, not a skip), then
# examples/agent_loop.py (a kill -9 + restart of its own daemon mid-run), examples/voice_loop.py
# and examples/pipecat_bot.py.
# Usage: STREAMD_MODEL=PATH python_client_test.sh SOURCE_DIR STREAMD_BINARY
set -u
src="$1"
streamd="$2"
model="${STREAMD_MODEL:-}"
if [ -z "$model" ] || [ ! -f "$model" ]; then
  echo "FAIL: model path '$model' missing (set STREAMD_MODEL; make test does)"; exit 1
fi
command -v openssl >/dev/null || { echo "FAIL: openssl is missing (apt-get install openssl)"; exit 1; }
# The venv lives beside the other test venvs (tests/support/make-venv.sh), not in the build
# directory, so that a fresh clone or build reuses the dependencies it installed (on 2 cores
# this test takes 67 s with a new venv, 37 s with a kept one); only the client itself is
# reinstalled every run.
venv="${STREAMD_PYTHON_CLIENT_VENV:-$HOME/.cache/streamd/python-client-venv}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" ||
    { echo "FAIL: python3 -m venv failed (apt-get install python3-venv)"; exit 1; }
fi
# The package is always reinstalled, so its stubs are generated from this tree's proto. A pip
# that cannot reach an index fails here (exit 1): this test never skips.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/clients" "$work/proto/streamd/v1"  # a clean copy: no build/ in the source tree
cp -r "$src/clients/python" "$work/clients/python"
rm -rf "$work/clients/python/build" "$work/clients/python/src/"*.egg-info
cp "$src/proto/streamd/v1/streamd.proto" "$work/proto/streamd/v1/"
if ! "$venv/bin/python" -m pip install --quiet --timeout 30 --retries 2 \
    "$work/clients/python[pipecat]" pytest pytest-asyncio; then
  echo "FAIL: pip install of clients/python[pipecat], pytest, pytest-asyncio failed" \
    "(is PyPI reachable? pipecat-ai needs Python 3.11+)"
  exit 1
fi
"$venv/bin/python" -c "import streamd_client.pipecat" ||
  { echo "FAIL: streamd_client.pipecat does not import (the [pipecat] extra)"; exit 1; }
export STREAMD_BINARY="$streamd" STREAMD_MODEL="$model" STREAMD_REQUIRE_PIPECAT=1
failed=0
cd "$src/clients/python"
# Every test runs, needs_truncate_fork included: the daemon implements Truncate, Fork and
# Append.partial, and a client or server bug there must fail this test.
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests ||
  { echo "FAIL: pytest"; failed=1; }
cd examples
"$venv/bin/python" agent_loop.py --spawn "$streamd" --turns 4 --restart-at 2 ||
  { echo "FAIL: examples/agent_loop.py"; failed=1; }
# Full mode (the default): partial Appends and a checked Truncate after every barge-in. A run
# that fell back to the reduced mode would test neither, so it fails here.
if "$venv/bin/python" voice_loop.py --spawn "$streamd" --turns 3 >"$work/voice.out" 2>&1; then
  cat "$work/voice.out"
  grep -q '^MODE: FULL' "$work/voice.out" ||
    { echo "FAIL: examples/voice_loop.py did not run in full mode"; failed=1; }
else
  cat "$work/voice.out"
  echo "FAIL: examples/voice_loop.py"; failed=1
fi
"$venv/bin/python" pipecat_bot.py --spawn "$streamd" ||
  { echo "FAIL: examples/pipecat_bot.py"; failed=1; }
[ "$failed" -eq 0 ] && echo "PASS: python client"
exit "$failed"
