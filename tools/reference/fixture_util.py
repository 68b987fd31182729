"""What the fixture scripts share: the reference's setup, its dense and greedy passes, and the
JSON pieces every fixture repeats.

make_fixtures.py, make_exact_fixture.py, make_qwen_fixtures.py, make_gemma_fixtures.py and
make_quant_variant_fixtures.py import this (nothing in streamd does). The definitions here are
the fixtures' definitions: a change here changes every fixture, so regenerate them all and check
`git diff tests/fixtures` (docs/REFERENCE.md).
"""

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
REFERENCE = f"llama.cpp via llama-cpp-python {REF_VERSION}"
BOOK = "/work/shared/data/pride-and-prejudice.txt"
BOOK_NAME = "pride-and-prejudice.txt"
N_UBATCH = 512

# ---------------------------------------------------------------------------
# Tokenizer cases (make_fixtures.py's vocabularies and Qwen's).  (name, text, parse_special)
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

# SmolLM2's greedy prompts (make_fixtures.py, make_exact_fixture.py and, for 16 steps,
# make_quant_variant_fixtures.py).
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
# The dense pass's definition, in three parts: which tokens, how they attend, how they are scored.
# {n}: the number of tokens; {last} = n - 1 (the last position, and the number of scored
# positions); {n2} = n - 2 (the last scored position).
PPL_TOKENS_CLAUSE = (
    "tokens = first {n} ids of llama_tokenize(whole book file bytes as on disk, "
    "BOM and CRLF kept, add_special=false, parse_special=false).")
PPL_ATTENTION_CLAUSE = (
    "with full causal attention over all previous tokens (no sliding window, no chunking, "
    "no BOS prepended).")
_PPL_TEMPLATE = (
    "{tokens} One sequence, "
    "positions 0..{last}, evaluated in a single dense forward pass {attention} "
    "Every token after the first is scored: for i in 0..{n2}, "
    "logits[i] are the output logits at position i (predicting token i+1); "
    "log-softmax computed in float64 from the float32 logits; "
    "nll[i] = logsumexp(logits[i]) - logits[i][tokens[i+1]]; "
    "argmax[i] = index of the largest logits[i] (lowest index on ties); "
    "argmax_gap[i] = top1 - top2 logit (4 significant digits), useful for "
    "skipping near-ties when comparing; ppl = exp(mean(nll)) over the {last} values "
    "(computed from unrounded nll). nll values rounded to 6 significant digits.")


def ppl_definition(n_tokens, tokens=PPL_TOKENS_CLAUSE, attention=PPL_ATTENTION_CLAUSE):
    """The definition of a dense pass over `n_tokens` tokens. `tokens` (which may use {n},
    {last} and {n2}) and `attention` replace the default clauses for a model that wants a BOS
    or has sliding-window layers (make_gemma_fixtures.py)."""
    counts = {"n": n_tokens, "last": n_tokens - 1, "n2": n_tokens - 2}
    return _PPL_TEMPLATE.format(tokens=tokens.format(**counts),
                                attention=attention.format(**counts), **counts)


PPL_DEFINITION = ppl_definition(PPL_TOKENS)


def topk_definition(k, every):
    return (f"every {every}th position of the same pass: the {k} largest float32 logits "
            "(6 significant digits) and their ids, largest first")


def greedy_definition(steps, eog_note="", add_special="false"):
    """The greedy fixtures' definition (qwen's, gemma's and the quant variants'); `eog_note`
    follows "end-of-generation tokens"; `add_special` is what llama_tokenize was given (with,
    where it matters, what that did)."""
    return (f"prompt_ids = llama_tokenize(prompt, add_special={add_special}, "
            "parse_special=<case.parse_special>), evaluated from an empty KV cache; then "
            f"{steps} steps of: next = argmax of the float32 logits at the last "
            "position (lowest index on ties), feed it back; no sampler, no stop at "
            f"end-of-generation tokens{eog_note}. argmax_gap = top1 - top2 logit at each step.")


# ---------------------------------------------------------------------------
# Setup
# ---------------------------------------------------------------------------
def add_common_args(ap, model_default=None):
    """--model (when given a default), --book, --out and --threads."""
    if model_default is not None:
        ap.add_argument("--model", default=os.path.expanduser(model_default))
    ap.add_argument("--book", default=BOOK)
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--threads", type=int, default=2)


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


def start(repack=False):
    """Repacking off (unless `repack`), and the reference's version checked."""
    if not repack:
        disable_extra_buffer_types()
    if llama_cpp.__version__ != REF_VERSION:
        sys.exit(f"expected llama-cpp-python {REF_VERSION}, got {llama_cpp.__version__}")


def read_book(path):
    with open(path, "rb") as f:
        return f.read()


def system_info():
    return llama_cpp.llama_print_system_info().decode().strip()


def dense_llama(path, n_ctx, threads, **extra):
    """llama.cpp for one dense pass of up to `n_ctx` tokens in one batch, every position's
    logits kept; `extra` adds Llama() parameters (the exact-weights passes' type_k/type_v)."""
    return Llama(path, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=N_UBATCH, logits_all=True,
                 n_threads=threads, n_threads_batch=threads, flash_attn=False, verbose=False,
                 **extra)


def settings(n_ctx, threads, repack=False):
    """The llama_cpp_settings of a dense pass made by dense_llama() with f16 K/V."""
    return {
        "n_ctx": n_ctx, "n_batch": n_ctx, "n_ubatch": N_UBATCH, "logits_all": True,
        "kv_cache_type": "f16", "flash_attn": False, "n_threads": threads,
        "use_extra_bufts": bool(repack), "system_info": system_info(),
    }


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------
def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def model_fields(path):
    return {"model": os.path.basename(path), "model_sha256": sha256_file(path)}


def source_fields(book):
    return {"source": BOOK_NAME, "source_sha256": hashlib.sha256(book).hexdigest()}


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)", file=sys.stderr)


def tok(llm, text_bytes, add_bos, special):
    # llama_tokenize(vocab, text, add_special=add_bos, parse_special=special)
    return llm.tokenize(text_bytes, add_bos=add_bos, special=special)


def sig6(x):
    return float(f"{x:.6g}")


def sig4(x):
    return float(f"{x:.4g}")


# ---------------------------------------------------------------------------
# Tokenizer fixtures
# ---------------------------------------------------------------------------
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
        "source": BOOK_NAME,
        "source_sha256": hashlib.sha256(book_bytes).hexdigest(),
        "bytes": n,
        "parse_special": False,
        "ids": tok(llm, book_bytes[:n], False, False),
    })
    obj = {
        **model_fields(model_path),
        "reference": REFERENCE,
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


# ---------------------------------------------------------------------------
# Dense pass and greedy continuations
# ---------------------------------------------------------------------------
def log_softmax_rows(logits32):
    x = logits32.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
    return x, lse


def book_tokens(llm, book, n):
    """The book's first `n` tokens (llama_tokenize of the whole file, no BOS)."""
    tokens = tok(llm, book, False, False)[:n]
    assert len(tokens) == n
    return tokens


def dense_scores(llm, tokens):
    """One dense forward pass over `tokens` from an empty KV cache, scored as in
    PPL_DEFINITION.  Returns float64 arrays nll, argmax, gap (len(tokens)-1 each)
    and ppl (from the unrounded nll).  The pass's logits stay in llm.scores."""
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


def scores_fields(nll, argmax, gap, ppl, tokens=None, with_nll=True):
    """A dense pass's fields in the fixtures' order: n_tokens (with `tokens`), ppl, mean_nll,
    tokens, argmax, argmax_gap, nll (unless not `with_nll`)."""
    out = {} if tokens is None else {"n_tokens": len(tokens)}
    out.update({"ppl": ppl, "mean_nll": float(nll.mean())})
    if tokens is not None:
        out["tokens"] = tokens
    out["argmax"] = [int(a) for a in argmax]
    out["argmax_gap"] = [sig4(g) for g in gap]
    if with_nll:
        out["nll"] = [sig6(v) for v in nll]
    return out


def top_rows(llm, n_tokens, k, every):
    """The `k` largest logits (6 significant digits) and their ids, largest first, at every
    `every`th scored position of the pass dense_scores() left in llm.scores."""
    rows = []
    for pos in range(0, n_tokens - 1, every):
        row = np.asarray(llm.scores[pos], dtype=np.float32)
        ids = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        rows.append({"position": pos, "ids": [int(i) for i in ids],
                     "logits": [sig6(float(row[i])) for i in ids]})
    return rows


def greedy_cases(llm, prompts=None, steps=None, add_special=False):
    """Pure-argmax continuations of `prompts` (default GREEDY_PROMPTS) for `steps` steps
    (default GREEDY_STEPS), each prompt tokenized with `add_special`; see the greedy fixture's
    definition."""
    prompts = GREEDY_PROMPTS if prompts is None else prompts
    steps = GREEDY_STEPS if steps is None else steps
    eog = set()
    for t in range(llm.n_vocab()):
        if llama_cpp.llama_vocab_is_eog(llm._model.vocab, t):
            eog.add(t)
    cases = []
    for name, text, special in prompts:
        prompt_ids = tok(llm, text.encode("utf-8"), add_special, special)
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
