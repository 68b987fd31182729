#!/usr/bin/env bash
# `streamd eval` on the default model: error handling (one line on stderr naming the value and
# the limit, non-zero exit, nothing on stdout) and a small correctness check on the first
# tokens of Pride and Prejudice:
#   - dense perplexity of the first 300 tokens matches llama.cpp's (tests/fixtures) within 1%;
#   - sink, window and recompute equal dense exactly while nothing is evicted (N <= S + W);
#   - once N > S + W they differ, and window-only loses the most;
#   - --csv, --segment-csv and --plot write what they promise.
# Usage: STREAMD_MODEL=PATH eval_cli_test.sh STREAMD_BINARY SHARED_DATA_DIR FIXTURES_DIR
set -u
bin="$1"
data="$2"
fixtures="$3"
model="${STREAMD_MODEL:-}"
if [ -z "$model" ] || [ ! -f "$model" ]; then
  echo "FAIL: model path '$model' missing (set STREAMD_MODEL; make test does)"; exit 1
fi
book="$data/pride-and-prejudice.txt"
if [ ! -f "$book" ]; then
  echo "FAIL: $book missing (the team's shared data folder)"; exit 1
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }

# expect_error NAME EXPECTED_SUBSTRING -- ARGS...
expect_error() {
  local name="$1" want="$2"
  shift 3
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local lines
  lines=$(wc -l <"$tmp/err")
  if [ $rc -ne 0 ] && grep -qF -- "$want" "$tmp/err" && [ ! -s "$tmp/out" ] && [ "$lines" -eq 1 ]; then
    ok
  else
    bad "$name: rc=$rc, want stderr containing '$want' in one line and empty stdout"
    echo "  stderr: $(head -c 400 "$tmp/err")"
    echo "  stdout: $(head -c 200 "$tmp/out")"
  fi
}

# --- bad input ---------------------------------------------------------------------------
printf 'Hello\xff world' >"$tmp/bad-utf8.txt"
printf 'a' >"$tmp/one-token.txt"
printf 'It is a truth universally acknowledged' >"$tmp/short.txt"
e=(eval --model "$model" --threads 1)
expect_error non-utf8 "--text $tmp/bad-utf8.txt: text is not valid UTF-8: byte 0xFF at offset 5" -- "${e[@]}" --text "$tmp/bad-utf8.txt"
expect_error missing-text "cannot read --text $tmp/nope.txt" -- "${e[@]}" --text "$tmp/nope.txt"
expect_error no-text "--text FILE is required" -- "${e[@]}"
expect_error bad-mode '--mode "streaming" is not one of dense, window, sink, recompute' -- "${e[@]}" --text "$book" --mode sink,streaming
expect_error empty-mode-item "has an empty item" -- "${e[@]}" --text "$book" --mode sink,,dense
expect_error sinks-negative "--sinks = -1 is outside [0," -- "${e[@]}" --text "$book" --sinks -1
expect_error window-zero "--window = 0 is outside [1," -- "${e[@]}" --text "$book" --window 0
expect_error over-context "--sinks + --window = 4 + 8190 = 8194 is over the model context of 8192" -- "${e[@]}" --text "$book" --window 8190
expect_error cache-size-over "--cache-size = 9000 is over the model context of 8192" -- "${e[@]}" --text "$book" --cache-size 9000
expect_error cache-size-no-window "--cache-size = 4 leaves no window after --sinks 4" -- "${e[@]}" --text "$book" --cache-size 4
expect_error tokens-one "--tokens = 1 is outside [2," -- "${e[@]}" --text "$book" --tokens 1
expect_error text-one-token "encodes to 1 token(s); eval needs at least 2" -- "${e[@]}" --text "$tmp/one-token.txt"
expect_error tokens-over-text "--tokens = 50 is more than the 6 tokens of $tmp/short.txt" -- "${e[@]}" --text "$tmp/short.txt" --tokens 50
expect_error dense-over-context "N = 9000 tokens is over the model context of 8192" -- "${e[@]}" --text "$book" --mode sink,dense --tokens 9000
expect_error chunk-zero "--chunk = 0 is outside [1," -- "${e[@]}" --text "$book" --chunk 0
expect_error csv-unwritable "cannot write $tmp/no/such/dir.csv" -- "${e[@]}" --text "$book" --csv "$tmp/no/such/dir.csv"
# gnuplot missing: refused before the run, not after it.
PATH=/nonexistent "$bin" "${e[@]}" --text "$book" --plot "$tmp/p.png" --tokens 10 >"$tmp/out" 2>"$tmp/err"
if [ $? -ne 0 ] && grep -qF "gnuplot is not on PATH, cannot write $tmp/p.png" "$tmp/err" && [ ! -s "$tmp/out" ]; then
  ok
else
  bad "no-gnuplot: $(head -c 300 "$tmp/err")"
fi
expect_error memory-bad-chunk "--chunk = 0 is outside [1," -- bench-memory --synthetic --chunk 0
expect_error memory-synthetic-and-model "--synthetic takes no --model or --text" -- bench-memory --synthetic --model "$model"

# --- no eviction: every mode equals dense ------------------------------------------------
# (300 tokens <= S + W = 4 + 1020; recompute's first L targets use the whole prefix.)
"$bin" "${e[@]}" --text "$book" --tokens 300 --mode dense,sink,window,recompute --json \
  >"$tmp/same.out" 2>"$tmp/same.err"
if [ $? -ne 0 ]; then
  bad "eval without eviction failed: $(cat "$tmp/same.err")"
else
  python3 - "$tmp/same.out" "$fixtures/smollm2_pride_2048.json" <<'EOF' && ok || bad "no-eviction check"
import json, math, sys
run = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
fx = json.load(open(sys.argv[2]))
r = {x["label"]: x for x in run["results"]}
dense = r["dense"]["ppl"]
ref = math.exp(sum(fx["nll"][:299]) / 299)  # llama.cpp, same 300 tokens (no BOS for this model)
print(f"dense ppl {dense:.4f}, llama.cpp {ref:.4f}")
assert not run["add_bos"], "the fixture has no BOS; this check assumes the model adds none"
assert r["dense"]["scored_tokens"] == 299
assert abs(dense / ref - 1) < 0.01, f"dense ppl {dense} vs llama.cpp {ref}"
for label in ("sink 4+1020", "window 1024", "recompute 1024"):
    assert r[label]["evicted_scored_tokens"] == 0, label
    assert abs(r[label]["ppl"] - dense) <= 1e-9 * dense, f"{label} {r[label]['ppl']} != dense {dense}"
EOF
fi

# --- eviction: modes part ways once N > S + W --------------------------------------------
"$bin" "${e[@]}" --text "$book" --tokens 300 --mode dense,sink,window --sinks 4 --window 60 \
  --segment 64 --json --csv "$tmp/tok.csv" --segment-csv "$tmp/seg.csv" >"$tmp/diff.out" 2>"$tmp/diff.err"
if [ $? -ne 0 ]; then
  bad "eval with eviction failed: $(cat "$tmp/diff.err")"
else
  python3 - "$tmp/diff.out" "$tmp/tok.csv" "$tmp/seg.csv" <<'EOF' && ok || bad "eviction check"
import csv, json, math, sys
run = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
r = {x["label"]: x for x in run["results"]}
dense, sink, window = r["dense"], r["sink 4+60"], r["window 64"]
print({k: round(v["ppl"], 4) for k, v in r.items()})
assert sink["evicted_scored_tokens"] == 300 - 65 and window["evicted_scored_tokens"] == 300 - 65
# The first segment (targets 1..63, nothing evicted yet) is identical in every mode.
assert dense["segments"][0]["ppl"] == sink["segments"][0]["ppl"] == window["segments"][0]["ppl"]
assert sink["ppl"] != dense["ppl"] and window["ppl"] != sink["ppl"]
# Dropping the first tokens hurts: window-only is worse than sink over the evicted tokens.
assert window["ppl_evicted"] > sink["ppl_evicted"], (window["ppl_evicted"], sink["ppl_evicted"])
rows = list(csv.DictReader(open(sys.argv[2])))
assert len(rows) == 3 * 299, len(rows)
sink_rows = [x for x in rows if x["mode"] == "sink"]
assert [int(x["token"]) for x in sink_rows] == list(range(1, 300))
mean = sum(float(x["nll"]) for x in sink_rows) / 299
assert abs(math.exp(mean) / sink["ppl"] - 1) < 1e-5
assert abs(float(sink_rows[-1]["running_ppl"]) / sink["ppl"] - 1) < 1e-5
segs = list(csv.DictReader(open(sys.argv[3])))
assert len(segs) == 3 * 5 and sum(int(x["tokens"]) for x in segs if x["mode"] == "window") == 299
EOF
fi

# --- recompute: re-encodes the last L tokens; identical to dense up to L ------------------
"$bin" "${e[@]}" --text "$book" --tokens 70 --cache-size 32 --mode dense,window,recompute \
  --csv "$tmp/re.csv" >"$tmp/re.out" 2>"$tmp/re.err"
if [ $? -ne 0 ]; then
  bad "recompute failed: $(cat "$tmp/re.err")"
else
  python3 - "$tmp/re.csv" <<'EOF' && ok || bad "recompute check"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
nll = {m: {int(x["token"]): float(x["nll"]) for x in rows if x["mode"] == m}
       for m in ("dense", "window", "recompute")}
assert all(nll["recompute"][t] == nll["dense"][t] for t in range(1, 33))
assert any(nll["recompute"][t] != nll["dense"][t] for t in range(33, 70))
assert any(nll["recompute"][t] != nll["window"][t] for t in range(34, 70))
EOF
fi

# --- plot ---------------------------------------------------------------------------------
if command -v gnuplot >/dev/null 2>&1; then
  "$bin" "${e[@]}" --text "$book" --tokens 40 --mode sink,window --sinks 4 --window 12 \
    --segment 10 --plot "$tmp/p.png" --plot-with "$tmp/seg.csv" >/dev/null 2>"$tmp/plot.err"
  if [ $? -eq 0 ] && [ "$(head -c 4 "$tmp/p.png" | od -An -c | tr -d ' ')" = "211PNG" ]; then
    ok
  else
    bad "plot: $(cat "$tmp/plot.err")"
  fi
else
  echo "SKIP: plot (gnuplot is not installed)"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
