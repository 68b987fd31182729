#!/usr/bin/env python3
"""Golden fixtures for the qwen2 family from llama.cpp (llama-cpp-python 0.3.36).

The model is the real Qwen2.5-Coder-0.5B-Instruct (AWQ) Q4_K_M GGUF that
scripts/fetch-qwen-model.sh fetches (Q5_0, Q8_0, Q4_K and Q6_K tensors, q/k/v
biases, NEOX RoPE). Nothing in streamd is used here. NOT part of CI: run by
hand, commit the JSON. Same reference build and settings as make_fixtures.py
(fixture_util.py, docs/REFERENCE.md), including use_extra_bufts = false: this GCC 12 build's
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
import os
import sys

import fixture_util as fu

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
    args = ap.parse_args()
    fu.start()
    book = fu.read_book(args.book)
    settings = fu.settings(PPL_TOKENS, args.threads)

    fu.tokenizer_fixture(args.model, book, fu.TEXT_CASES, set(),
                         os.path.join(args.out, "qwen25coder_tokenize.json"))

    llm = fu.dense_llama(args.model, PPL_TOKENS, args.threads)
    tokens = fu.book_tokens(llm, book, PPL_TOKENS)
    nll, argmax, gap, ppl = fu.dense_scores(llm, tokens)
    fu.write_json(os.path.join(args.out, f"qwen25coder_pride_{PPL_TOKENS}.json"), {
        **fu.model_fields(args.model), "reference": fu.REFERENCE,
        **fu.source_fields(book),
        "definition": fu.ppl_definition(PPL_TOKENS),
        "topk_definition": fu.topk_definition(TOPK, TOPK_EVERY),
        "llama_cpp_settings": settings,
        **fu.scores_fields(nll, argmax, gap, ppl, tokens),
        "topk": fu.top_rows(llm, PPL_TOKENS, TOPK, TOPK_EVERY),
    })
    print(f"ppl = {ppl:.6f}", file=sys.stderr)

    cases = fu.greedy_cases(llm, GREEDY_PROMPTS, GREEDY_STEPS)
    fu.write_json(os.path.join(args.out, "qwen25coder_greedy.json"), {
        **fu.model_fields(args.model), "reference": fu.REFERENCE,
        "definition": fu.greedy_definition(GREEDY_STEPS, " (hit_eog_at records the first)"),
        "llama_cpp_settings": settings,
        "cases": cases,
    })


if __name__ == "__main__":
    main()
