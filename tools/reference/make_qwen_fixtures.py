#!/usr/bin/env python3
"""Golden fixtures for the qwen2 family from llama.cpp (llama-cpp-python 0.3.36).

The models are the real Qwen2.5-Coder-Instruct Q4_K_M GGUFs that
scripts/fetch-qwen-model.sh fetches: 0.5B (AWQ; Q5_0, Q8_0, Q4_K and Q6_K
tensors) and the held-out 1.5B (Q4_K and Q6_K), both with q/k/v biases and
NEOX RoPE. Nothing in streamd is used here. NOT part of CI: run by
hand, commit the JSON. Same reference build and settings as make_fixtures.py
(fixture_util.py, docs/REFERENCE.md), including use_extra_bufts = false: this GCC 12 build's
AMX repack kernels fault, so every matmul takes ggml-cpu's plain path.

    LLAMA_CPP_LIB_PATH=<llama.cpp build/bin> PYTHONPATH=<sdist dir> \\
        python3 tools/reference/make_qwen_fixtures.py \\
            --model "$(scripts/fetch-qwen-model.sh)" --out tests/fixtures
        ... --model "$(scripts/fetch-qwen-model.sh 1.5b)" --name qwen25coder15b

It writes (ids and numbers only; NAME is --name, default qwen25coder):
  NAME_tokenize.json   make_fixtures.py's tokenizer cases on this vocab
  NAME_pride_512.json  tokens, per-position argmax, top-2 gap and NLL of a dense
                       512-token forward pass over the book's start, plus the
                       top-8 logits every 16 positions
  NAME_greedy.json     pure-argmax continuations of a few prompts
With --exact, NAME_pride_512.json also holds `exact`: the same pass by llama.cpp on an F32
dequantization of the file with an f32 K/V cache (make_quant_variant_fixtures.exact_pass; the
copy, 4 bytes per weight, goes to --f32-dir and is removed afterwards): the function the
weights define, without llama.cpp's 8-bit activations.
"""

import argparse
import os
import sys

import fixture_util as fu
import make_quant_variant_fixtures as qv

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
    fu.add_common_args(ap, "~/.cache/streamd/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--name", default="qwen25coder",
                    help="prefix of the fixture files (qwen25coder15b for the 1.5B)")
    ap.add_argument("--exact", action="store_true",
                    help="add the exact-weights pass (an F32 copy of the file in --f32-dir)")
    ap.add_argument("--f32-dir", default="/tmp")
    args = ap.parse_args()
    fu.start()
    book = fu.read_book(args.book)
    settings = fu.settings(PPL_TOKENS, args.threads)

    fu.tokenizer_fixture(args.model, book, fu.TEXT_CASES, set(),
                         os.path.join(args.out, f"{args.name}_tokenize.json"))

    llm = fu.dense_llama(args.model, PPL_TOKENS, args.threads)
    tokens = fu.book_tokens(llm, book, PPL_TOKENS)
    nll, argmax, gap, ppl = fu.dense_scores(llm, tokens)
    topk = fu.top_rows(llm, PPL_TOKENS, TOPK, TOPK_EVERY)
    cases = fu.greedy_cases(llm, GREEDY_PROMPTS, GREEDY_STEPS)
    del llm
    pride = {
        **fu.model_fields(args.model), "reference": fu.REFERENCE,
        **fu.source_fields(book),
        "definition": fu.ppl_definition(PPL_TOKENS),
        "topk_definition": fu.topk_definition(TOPK, TOPK_EVERY),
        "llama_cpp_settings": settings,
        **fu.scores_fields(nll, argmax, gap, ppl, tokens),
        "topk": topk,
    }
    print(f"ppl = {ppl:.6f}", file=sys.stderr)
    if args.exact:
        assert (qv.PPL_TOKENS, qv.TOPK, qv.TOPK_EVERY) == (PPL_TOKENS, TOPK, TOPK_EVERY)
        pride["exact"] = qv.exact_pass(args.model, tokens, args.threads, args.f32_dir)
        print(f"exact weights: ppl = {pride['exact']['ppl']:.6f}", file=sys.stderr)
    fu.write_json(os.path.join(args.out, f"{args.name}_pride_{PPL_TOKENS}.json"), pride)

    fu.write_json(os.path.join(args.out, f"{args.name}_greedy.json"), {
        **fu.model_fields(args.model), "reference": fu.REFERENCE,
        "definition": fu.greedy_definition(GREEDY_STEPS, " (hit_eog_at records the first)"),
        "llama_cpp_settings": settings,
        "cases": cases,
    })


if __name__ == "__main__":
    main()
