#!/usr/bin/env python3
"""Generate streamd's golden fixtures from an independent implementation.

The reference is llama.cpp, driven through its Python bindings
llama-cpp-python 0.3.36 (PyPI), whose sdist vendors the llama.cpp sources
that were built to provide libllama.so.  Nothing in streamd is used here.
This script is NOT part of CI; run it by hand when the fixtures need to be
regenerated, and commit the JSON files it writes.  See docs/REFERENCE.md.

How to run (from the repository root):

    # a Python venv with numpy and llama-cpp-python 0.3.36 importable, e.g.
    #   pip install numpy llama-cpp-python==0.3.36
    # or the pure-Python package dir of the sdist on PYTHONPATH plus
    #   LLAMA_CPP_LIB_PATH=<dir holding libllama.so / libggml*.so>
    LLAMA_CPP_LIB_PATH=/path/to/llama.cpp/build/bin \
        python3 tools/reference/make_fixtures.py \
            --model ~/.cache/streamd/models/SmolLM2-135M-Instruct.Q4_1.gguf \
            --spm-vocab /path/to/llama.cpp/models/ggml-vocab-llama-spm.gguf \
            --book /work/shared/data/pride-and-prejudice.txt \
            --out tests/fixtures

It writes (all ids only, kept small):
  smollm2_tokenize.json     tokenizer cases for SmolLM2 (GPT-2 style BPE)
  llama_spm_tokenize.json   the same cases for llama.cpp's Llama SPM vocab
  smollm2_pride_2048.json   tokens, per-position argmax and NLL of a dense
                            2048-token forward pass over the book's start
  smollm2_greedy.json       pure-argmax continuations of a few prompts

Run time: well under a minute on 2 CPU cores (threads default to 2).

smollm2_pride_2048_f32.json (the same pass on an exact F32 dequantization of
the weights, no activation quantization) is written by make_exact_fixture.py,
which imports dense_scores() and PPL_DEFINITION from here.
"""

import argparse
import hashlib
import json
import math
import os
import sys

import numpy as np

import llama_cpp
import llama_cpp.llama_cpp as llama_cpp_lib
from llama_cpp import Llama

REF_VERSION = "0.3.36"

# ---------------------------------------------------------------------------
# Tokenizer cases.  (name, text, parse_special)
# ---------------------------------------------------------------------------
TEXT_CASES = [
    ("empty", "", False),
    ("single_space", " ", False),
    ("ascii_sentence", "Hello, world! The quick brown fox jumps over the lazy dog.", False),
    ("french", "Ça va? L'été à Noël, où est la forêt? Élève, cœur, garçon.", False),
    ("german", "Größe, Straße, Übermäßig schöne Äpfel. Fußgängerübergänge!", False),
    ("polish", "Zażółć gęślą jaźń. Łódź, Kraków, Wrocław, Gdańsk.", False),
    ("vietnamese", "Tiếng Việt có dấu: Hà Nội, Sài Gòn, người, được, những.", False),
    ("greek", "Καλημέρα κόσμε! Ελληνικά: αβγδεζηθ ΑΒΓΔ ώ ΐ.", False),
    ("cyrillic", "Привет, мир! Съешь же ещё этих мягких французских булок.", False),
    ("cjk", "你好，世界！日本語のテキスト、カタカナ、한국어 문장입니다。", False),
    ("arabic", "مرحبا بالعالم! اللغة العربية جميلة. ١٢٣٤٥", False),
    ("emoji",
     "Emoji: 😀👍🏽 ❤️ family 👨\u200d👩\u200d👧\u200d👦 rainbow 🏳️\u200d🌈 "
     "flags 🇫🇷🇩🇪🇯🇵 keycap 1️⃣",
     False),
    ("code_python",
     "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n"
     "print([fib(i) for i in range(10)])  # 0, 1, 1, 2\n",
     False),
    ("code_cpp_tabs",
     "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n"
     "\tfor (auto& x : v) {\n\t\tx *= 2;\n\t}\n\treturn v[0] == 2 ? 0 : 1;\n}\n",
     False),
    ("digits",
     "12345678901234567890 3.14159 1,000,000 -42 0x7fff 2024-01-31 31/12/1999 "
     "12:30:45 1e-9 $19.99 100%",
     False),
    ("spaces_runs",
     "a  b   c    d     e      f       g        h         i",
     False),
    ("leading_trailing_spaces", "   leading and trailing   ", False),
    ("newlines", "line1\n\n\nline2\r\nline3\r\n\r\nline4\n \n\t\nend\n", False),
    ("contractions", "don't I'll we've they're she'd it's Can't WON'T y'all", False),
    ("punctuation", "Wait... what?!?! (really) [yes] {no} <tag/> --- *** ### @@ ~~ ;;: \"quoted\" 'single' «guillemets» — dash…", False),
    ("chatml_special",
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", True),
    ("chatml_plain",
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", False),
]

# Llama SPM gets the Llama-2 chat special tokens instead of ChatML.
SPM_EXTRA_CASES = [
    ("llama_special", "<s>[INST] Hi [/INST] Hello!</s><s>[INST] Bye [/INST]", True),
    ("llama_plain", "<s>[INST] Hi [/INST] Hello!</s><s>[INST] Bye [/INST]", False),
]
SPM_BOS_CASES = {"empty", "single_space", "ascii_sentence", "cyrillic", "llama_special"}

GREEDY_PROMPTS = [
    ("plain_fact", "The capital of France is", False),
    ("story", "Once upon a time, in a small village,", False),
    ("chatml",
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
     "<|im_start|>user\nWhat is the largest planet in the solar system?<|im_end|>\n"
     "<|im_start|>assistant\n",
     True),
]
GREEDY_STEPS = 32

PPL_TOKENS = 2048
PPL_DEFINITION = (
    "tokens = first 2048 ids of llama_tokenize(whole book file bytes as on disk, "
    "BOM and CRLF kept, add_special=false, parse_special=false). One sequence, "
    "positions 0..2047, evaluated in a single dense forward pass with full causal "
    "attention over all previous tokens (no sliding window, no chunking, no BOS "
    "prepended). Every token after the first is scored: for i in 0..2046, "
    "logits[i] are the output logits at position i (predicting token i+1); "
    "log-softmax computed in float64 from the float32 logits; "
    "nll[i] = logsumexp(logits[i]) - logits[i][tokens[i+1]]; "
    "argmax[i] = index of the largest logits[i] (lowest index on ties); "
    "argmax_gap[i] = top1 - top2 logit (4 significant digits), useful for "
    "skipping near-ties when comparing; ppl = exp(mean(nll)) over the 2047 values "
    "(computed from unrounded nll). nll values rounded to 6 significant digits.")


def disable_extra_buffer_types():
    """Load models with llama_model_params.use_extra_bufts = false.

    Llama() does not expose this flag, so wrap llama_model_default_params().
    With extra buffer types off, ggml does not repack weights into its AMX (or
    CPU "repack") buffers and every matmul goes through the plain ggml-cpu
    path.  Needed on this build: with GCC 12 the AMX kernel's on-stack tile
    config is dead-store-eliminated and ldtilecfg faults (SIGSEGV in
    ggml_backend_amx_mul_mat whenever a matmul has more than one
    row, i.e. any multi-token batch; llama.cpp issue #20824,
    PR #26954).  Same as llama-bench --repack 0 / llama-cli --no-repack.
    """
    orig = llama_cpp_lib.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p

    llama_cpp_lib.llama_model_default_params = params


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def utf8_prefix(data, limit):
    """Largest prefix of at most `limit` bytes that ends on a UTF-8 char boundary."""
    n = min(limit, len(data))
    # back off while data[n] is a continuation byte (10xxxxxx)
    while 0 < n < len(data) and (data[n] & 0xC0) == 0x80:
        n -= 1
    data[:n].decode("utf-8")  # must be valid
    return n


def vocab_info(llm):
    v = llm._model.vocab
    md = llm.metadata
    return {
        "n_vocab": llm.n_vocab(),
        "tokenizer_model": md.get("tokenizer.ggml.model"),
        "tokenizer_pre": md.get("tokenizer.ggml.pre"),
        "add_bos_token": bool(llama_cpp.llama_vocab_get_add_bos(v)),
        "add_eos_token": bool(llama_cpp.llama_vocab_get_add_eos(v)),
        "add_space_prefix_metadata": md.get("tokenizer.ggml.add_space_prefix"),
        "bos_id": llm.token_bos(),
        "eos_id": llm.token_eos(),
    }


def tok(llm, text_bytes, add_bos, special):
    # llama_tokenize(vocab, text, add_special=add_bos, parse_special=special)
    return llm.tokenize(text_bytes, add_bos=add_bos, special=special)


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)", file=sys.stderr)


def tokenizer_fixture(model_path, book_bytes, cases, bos_cases, out_path):
    llm = Llama(model_path, vocab_only=True, verbose=False)
    info = vocab_info(llm)
    out_cases = []
    for name, text, special in cases:
        b = text.encode("utf-8")
        ids = tok(llm, b, False, special)
        case = {"name": name, "text": text, "parse_special": special, "ids": ids}
        if name in bos_cases:
            case["ids_bos"] = tok(llm, b, True, special)
        # sanity: with the model's own add_bos setting false, add_special=True
        # must give the same ids (no EOS either).
        if not info["add_bos_token"] and not info["add_eos_token"]:
            assert tok(llm, b, True, special) == ids, name
        out_cases.append(case)
    n = utf8_prefix(book_bytes, 20000)
    out_cases.append({
        "name": "pride_20k",
        "source": "pride-and-prejudice.txt",
        "source_sha256": hashlib.sha256(book_bytes).hexdigest(),
        "bytes": n,
        "parse_special": False,
        "ids": tok(llm, book_bytes[:n], False, False),
    })
    obj = {
        "model": os.path.basename(model_path),
        "model_sha256": sha256_file(model_path),
        "reference": f"llama.cpp via llama-cpp-python {REF_VERSION}",
        "vocab": info,
        "tokenize_call": ("llama_tokenize(vocab, utf8(text), add_special=false, "
                          "parse_special=<case.parse_special>); 'ids_bos' (when "
                          "present) uses add_special=true"),
        "pride_20k_note": ("text = first `bytes` bytes of the book file exactly as "
                           "on disk (UTF-8 BOM and CRLF kept); `bytes` is the largest "
                           "count <= 20000 ending on a UTF-8 character boundary"),
        "cases": out_cases,
    }
    write_json(out_path, obj)
    del llm
    return obj


def log_softmax_rows(logits32):
    x = logits32.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
    return x, lse


def dense_scores(llm, tokens):
    """One dense forward pass over `tokens` from an empty KV cache, scored as in
    PPL_DEFINITION.  Returns float64 arrays nll, argmax, gap (len(tokens)-1 each)
    and ppl (from the unrounded nll)."""
    n = len(tokens)
    llm.reset()
    llm.eval(tokens)
    logits = np.array(llm.scores[:n - 1, :], dtype=np.float32)  # rows 0..n-2
    x, lse = log_softmax_rows(logits)
    nxt = np.array(tokens[1:], dtype=np.int64)
    nll = lse - x[np.arange(n - 1), nxt]
    argmax = x.argmax(axis=1)
    srt = np.sort(x, axis=1)
    gap = srt[:, -1] - srt[:, -2]
    ppl = math.exp(float(nll.mean()))
    return nll, argmax, gap, ppl


def sig6(x):
    return float(f"{x:.6g}")


def sig4(x):
    return float(f"{x:.4g}")


def greedy_cases(llm, prompts=None, steps=None):
    """Pure-argmax continuations of `prompts` (default GREEDY_PROMPTS) for `steps` steps
    (default GREEDY_STEPS); see the greedy fixture's definition."""
    prompts = GREEDY_PROMPTS if prompts is None else prompts
    steps = GREEDY_STEPS if steps is None else steps
    eog = set()
    for t in range(llm.n_vocab()):
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, t):
            eog.add(t)
    cases = []
    for name, text, special in prompts:
        prompt_ids = tok(llm, text.encode("utf-8"), False, special)
        llm.reset()
        llm.eval(prompt_ids)
        gen, gaps = [], []
        for _ in range(steps):
            row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            t = int(row.argmax())
            s = np.sort(row.astype(np.float64))
            gaps.append(sig4(s[-1] - s[-2]))
            gen.append(t)
            llm.eval([t])
        cases.append({
            "name": name, "prompt": text, "parse_special": special,
            "prompt_ids": prompt_ids, "generated_ids": gen,
            "argmax_gap": gaps,
            "generated_text": llm.detokenize(gen, special=True).decode("utf-8", "replace"),
            "hit_eog_at": next((i for i, t in enumerate(gen) if t in eog), None),
        })
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/streamd/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--spm-vocab", required=True,
                    help="llama.cpp's models/ggml-vocab-llama-spm.gguf")
    ap.add_argument("--book", default="/work/shared/data/pride-and-prejudice.txt")
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repack", type=int, choices=(0, 1), default=0,
                    help="llama_model_params.use_extra_bufts (default 0; 1 crashes "
                         "in the AMX kernel on GCC-12 builds, see docs/REFERENCE.md)")
    args = ap.parse_args()
    if not args.repack:
        disable_extra_buffer_types()

    if llama_cpp.__version__ != REF_VERSION:
        sys.exit(f"expected llama-cpp-python {REF_VERSION}, got {llama_cpp.__version__}")
    os.makedirs(args.out, exist_ok=True)
    with open(args.book, "rb") as f:
        book = f.read()
    model_name = os.path.basename(args.model)
    model_sha = sha256_file(args.model)
    ref = f"llama.cpp via llama-cpp-python {REF_VERSION}"
    sysinfo = llama_cpp.llama_print_system_info().decode().strip()

    # --- a/b: tokenizer fixtures -------------------------------------------
    tokenizer_fixture(args.model, book, TEXT_CASES, set(),
                      os.path.join(args.out, "smollm2_tokenize.json"))
    spm_cases = [c for c in TEXT_CASES if not c[0].startswith("chatml")] + SPM_EXTRA_CASES
    tokenizer_fixture(args.spm_vocab, book, spm_cases, SPM_BOS_CASES,
                      os.path.join(args.out, "llama_spm_tokenize.json"))

    # --- c: dense 2048-token forward pass ----------------------------------
    llm = Llama(args.model, n_ctx=PPL_TOKENS, n_batch=PPL_TOKENS, n_ubatch=512,
                logits_all=True, n_threads=args.threads,
                n_threads_batch=args.threads, flash_attn=False, verbose=False)
    all_ids = tok(llm, book, False, False)
    tokens = all_ids[:PPL_TOKENS]
    assert len(tokens) == PPL_TOKENS
    nll, argmax, gap, ppl = dense_scores(llm, tokens)
    write_json(os.path.join(args.out, "smollm2_pride_2048.json"), {
        "model": model_name,
        "model_sha256": model_sha,
        "reference": ref,
        "source": "pride-and-prejudice.txt",
        "source_sha256": hashlib.sha256(book).hexdigest(),
        "definition": PPL_DEFINITION,
        "llama_cpp_settings": {
            "n_ctx": PPL_TOKENS, "n_batch": PPL_TOKENS, "n_ubatch": 512,
            "logits_all": True, "kv_cache_type": "f16", "flash_attn": False,
            "n_threads": args.threads, "use_extra_bufts": bool(args.repack),
            "system_info": sysinfo,
        },
        "n_tokens": PPL_TOKENS,
        "ppl": ppl,
        "mean_nll": float(nll.mean()),
        "tokens": tokens,
        "argmax": [int(a) for a in argmax],
        "argmax_gap": [sig4(g) for g in gap],
        "nll": [sig6(v) for v in nll],
    })
    print(f"ppl = {ppl:.6f}", file=sys.stderr)

    # --- d: greedy continuations -------------------------------------------
    cases = greedy_cases(llm)
    write_json(os.path.join(args.out, "smollm2_greedy.json"), {
        "model": model_name,
        "model_sha256": model_sha,
        "reference": ref,
        "definition": (
            f"prompt_ids = llama_tokenize(prompt, add_special=false, "
            f"parse_special=<case.parse_special>), evaluated from an empty KV cache; then "
            f"{GREEDY_STEPS} steps of: next = argmax of the float32 logits at the last "
            f"position (lowest index on ties), feed it back. Pure argmax (no sampler, "
            f"no repetition penalty); generation does NOT stop at end-of-generation "
            f"tokens (hit_eog_at records the first one, or null). argmax_gap = top1-top2 "
            f"logit at each step. generated_text is informational only."),
        "llama_cpp_settings": {
            "n_ctx": PPL_TOKENS, "n_batch": PPL_TOKENS, "n_ubatch": 512,
            "kv_cache_type": "f16", "flash_attn": False, "n_threads": args.threads,
            "use_extra_bufts": bool(args.repack),
        },
        "cases": cases,
    })


if __name__ == "__main__":
    main()
