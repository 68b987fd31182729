#!/usr/bin/env python3
"""Golden fixtures for the qwen2 family from llama.cpp (llama-cpp-python 0.3.36).

The model is the real Qwen2.5-Coder-0.5B-Instruct (AWQ) Q4_K_M GGUF that
scripts/fetch-qwen-model.sh fetches (Q5_0, Q8_0, Q4_K and Q6_K tensors, q/k/v
biases, NEOX RoPE). Nothing in streamd is used here. NOT part of CI: run by
hand, commit the JSON. Same reference build and settings as make_fixtures.py
(docs/REFERENCE.md), including use_extra_bufts = false: this GCC 12 build's
AMX repack kernels fault, so every matmul takes ggml-cpu's plain path.

    LLAMA_CPP_LIB_PATH=<llama.cpp build/bin> PYTHONPATH=<sdist dir> \\
        python3 tools/reference/make_qwen_fixtures.py \\
            --model "$(scripts/fetch-qwen-model.sh)" --out tests/fixtures

It writes (ids and numbers only):
  qwen25coder_tokenize.json   make_fixtures.py's tokenizer cases on this vocab
  qwen25coder_pride_512.json  tokens, per-position argmax, top-2 gap and NLL of
                              a dense 512-token forward pass over the book's
                              start, plus the top-8 logits every 16 positions
  qwen25coder_greedy.json     pure-argmax continuations of a few prompts
"""

import argparse
import hashlib
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (the shared definitions and helpers)

from llama_cpp import Llama  # noqa: E402
import llama_cpp  # noqa: E402

PPL_TOKENS = 512
TOPK = 8
TOPK_EVERY = 16
GREEDY_STEPS = 16
GREEDY_PROMPTS = [
    ("plain_fact", "The capital of France is", False),
    ("code", "def quicksort(arr):\n", False),
    ("chatml",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
     "assistant.<|im_end|>\n<|im_start|>user\nWrite a Python function that reverses a "
     "string.<|im_end|>\n<|im_start|>assistant\n",
     True),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/streamd/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--book", default="/work/shared/data/pride-and-prejudice.txt")
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    mf.disable_extra_buffer_types()
    if llama_cpp.__version__ != mf.REF_VERSION:
        sys.exit(f"expected llama-cpp-python {mf.REF_VERSION}, got {llama_cpp.__version__}")
    with open(args.book, "rb") as f:
        book = f.read()
    model_name = os.path.basename(args.model)
    model_sha = mf.sha256_file(args.model)
    ref = f"llama.cpp via llama-cpp-python {mf.REF_VERSION}"
    sysinfo = llama_cpp.llama_print_system_info().decode().strip()
    settings = {
        "n_ctx": PPL_TOKENS, "n_batch": PPL_TOKENS, "n_ubatch": 512, "logits_all": True,
        "kv_cache_type": "f16", "flash_attn": False, "n_threads": args.threads,
        "use_extra_bufts": False, "system_info": sysinfo,
    }

    mf.tokenizer_fixture(args.model, book, mf.TEXT_CASES, set(),
                         os.path.join(args.out, "qwen25coder_tokenize.json"))

    llm = Llama(args.model, n_ctx=PPL_TOKENS, n_batch=PPL_TOKENS, n_ubatch=512,
                logits_all=True, n_threads=args.threads, n_threads_batch=args.threads,
                flash_attn=False, verbose=False)
    tokens = mf.tok(llm, book, False, False)[:PPL_TOKENS]
    assert len(tokens) == PPL_TOKENS
    nll, argmax, gap, ppl = mf.dense_scores(llm, tokens)
    # dense_scores leaves the pass's logits in llm.scores: the top-k rows come from it.
    topk = []
    for pos in range(0, PPL_TOKENS - 1, TOPK_EVERY):
        row = np.asarray(llm.scores[pos], dtype=np.float32)
        ids = np.argsort(-row.astype(np.float64), kind="stable")[:TOPK]
        topk.append({"position": pos, "ids": [int(i) for i in ids],
                     "logits": [mf.sig6(float(row[i])) for i in ids]})
    mf.write_json(os.path.join(args.out, f"qwen25coder_pride_{PPL_TOKENS}.json"), {
        "model": model_name, "model_sha256": model_sha, "reference": ref,
        "source": "pride-and-prejudice.txt",
        "source_sha256": hashlib.sha256(book).hexdigest(),
        "definition": mf.PPL_DEFINITION.replace("2048", str(PPL_TOKENS))
                                       .replace("2047", str(PPL_TOKENS - 1))
                                       .replace("2046", str(PPL_TOKENS - 2)),
        "topk_definition": (f"every {TOPK_EVERY}th position of the same pass: the {TOPK} "
                            "largest float32 logits (6 significant digits) and their ids, "
                            "largest first"),
        "llama_cpp_settings": settings,
        "n_tokens": PPL_TOKENS, "ppl": ppl, "mean_nll": float(nll.mean()),
        "tokens": tokens,
        "argmax": [int(a) for a in argmax],
        "argmax_gap": [mf.sig4(g) for g in gap],
        "nll": [mf.sig6(v) for v in nll],
        "topk": topk,
    })
    print(f"ppl = {ppl:.6f}", file=sys.stderr)

    cases = mf.greedy_cases(llm, GREEDY_PROMPTS, GREEDY_STEPS)
    mf.write_json(os.path.join(args.out, "qwen25coder_greedy.json"), {
        "model": model_name, "model_sha256": model_sha, "reference": ref,
        "definition": (
            "prompt_ids = llama_tokenize(prompt, add_special=false, "
            "parse_special=<case.parse_special>), evaluated from an empty KV cache; then "
            f"{GREEDY_STEPS} steps of: next = argmax of the float32 logits at the last "
            "position (lowest index on ties), feed it back; no sampler, no stop at "
            "end-of-generation tokens (hit_eog_at records the first). argmax_gap = "
            "top1 - top2 logit at each step."),
        "llama_cpp_settings": settings,
        "cases": cases,
    })


if __name__ == "__main__":
    main()
