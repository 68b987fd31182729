#!/usr/bin/env bash
# A venv with the `gguf` PyPI package (pinned here) for the tests that compare streamd's
# dequantizers with its numpy code (tests/reference/gguf_dequantize.py), made and reused by
# tests/support/make-venv.sh. Prints the venv's python as the last line; exits 1 saying why when
# it cannot (no python3-venv, no index), which the tests report as a skip.
# Usage: gguf-venv.sh VENV_DIR
set -u
exec "$(dirname "$0")/../support/make-venv.sh" "$1" "gguf==0.19.0"
