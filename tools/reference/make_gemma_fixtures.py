#!/usr/bin/env python3
"""Golden fixtures for the gemma3 family from llama.cpp (llama-cpp-python 0.3.36).

The model is the real Gemma 3 270M (base) Q4_K_M GGUF that scripts/fetch-gemma-model.sh fetches
(Gemma Terms of Use: fetched, never committed): 18 layers, dim 640, 4 query heads / 1 KV head of
256, q/k RMS norms, post-attention and post-FFN norms, GELU-tanh FFN, token embeddings scaled
by sqrt(640) and tied to the output; Q5_0, Q8_0, Q4_K and Q6_K tensors. 15 of the 18 layers
(all but 5, 11 and 17) attend through a 512-token sliding window, the others globally; the
vocabulary (SentencePiece, 262144 pieces) asks for a BOS (add_bos_token = true), and the
fixtures follow it. Nothing in streamd is used here. NOT part of CI: run by hand, commit the
JSON. Same reference build and settings as make_qwen_fixtures.py (fixture_util.py,
docs/REFERENCE.md), use_extra_bufts = false included, and in every context swa_full = true
(the K/V cache of the sliding-window layers keeps every position; the window is applied by the
attention mask, so the logits are the model's own function whatever the cache size).

    LLAMA_CPP_LIB_PATH=<llama.cpp build/bin> PYTHONPATH=<sdist dir>:tools/reference \\
        python3 tools/reference/make_gemma_fixtures.py --exact \\
            --model "$(scripts/fetch-gemma-model.sh)" --out tests/fixtures

It writes (ids and numbers only; NAME is --name, default gemma3_270m):
  NAME_tokenize.json   make_fixtures.py's tokenizer cases and Gemma's turn markers on this
                       vocab, with `ids_bos` (add_special=true) for a few of them
  NAME_pride_1024.json tokens (BOS, then the book's first 1023), per-position argmax, top-2
                       gap and NLL of a dense 1024-token forward pass, plus the top-8 logits
                       every 16 positions. 1024, not 512 as for qwen: only positions past 511
                       see the sliding window cut anything off.
  NAME_greedy.json     pure-argmax continuations of a few prompts, BOS first
With --exact, NAME_pride_1024.json also holds `exact`: the same pass by llama.cpp on an F32
dequantization of the file with an f32 K/V cache (make_quant_variant_fixtures.exact_pass; the
copy, about 1.1 GB, goes to --f32-dir and is removed afterwards).
"""

import argparse
import os
import sys

import numpy as np

import fixture_util as fu
import make_quant_variant_fixtures as qv

PPL_TOKENS = 1024
TOPK = 8
TOPK_EVERY = 16
GREEDY_STEPS = 16
# Every context: keep the whole window's K/V (llama.cpp's own default, set explicitly).
SWA_FULL = True
GREEDY_PROMPTS = [
    ("plain_fact", "The capital of France is", False),
    ("code", "def quicksort(arr):\n", False),
    ("gemma_turn",
     "<start_of_turn>user\nWrite a Python function that reverses a string.<end_of_turn>\n"
     "<start_of_turn>model\n",
     True),
]
# Gemma's turn markers, after make_fixtures.py's cases; and a text that already starts with
# <bos> (Gemma's chat template writes one), to record what add_special=true does with it.
GEMMA_CASES = [
    ("gemma_turn_special", "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", True),
    ("gemma_turn_plain", "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", False),
    ("gemma_bos_in_text", "<bos><start_of_turn>user\nHi<end_of_turn>\n", True),
]
BOS_CASES = {"empty", "ascii_sentence", "gemma_turn_special", "gemma_bos_in_text"}

TOKENS_CLAUSE = (
    "tokens = first {n} ids of llama_tokenize(whole book file bytes as on disk, "
    "BOM and CRLF kept, add_special=true, parse_special=false): the vocabulary's BOS "
    "(id %d; tokenizer.ggml.add_bos_token = true), then the book's first {last} ids "
    "(those of add_special=false).")
ATTENTION_CLAUSE = (
    "with the model's causal attention, no chunking: in its sliding-window layers "
    "(%s; gemma3.attention.sliding_window = %d) position i attends to the positions j <= i "
    "with i - j < %d, in its global layers (%s) to every j <= i; the K/V cache keeps every "
    "position (swa_full = true) and the window is applied by the attention mask.")


def layer_kinds(llm):
    """(sliding-window layers, global layers, window) as llama.cpp's gemma3 loader sets them:
    sliding_window from the file, and without a sliding_window_pattern key, every 6th layer
    (il % 6 == 5) global."""
    md = llm.metadata
    n_layer = int(md["gemma3.block_count"])
    window = int(md["gemma3.attention.sliding_window"])
    assert "gemma3.attention.sliding_window_pattern" not in md, "pattern key: read it"
    swa = [il for il in range(n_layer) if il % 6 < 5]
    full = [il for il in range(n_layer) if il % 6 == 5]
    return swa, full, window


def layer_list(layers):
    return "layers " + ", ".join(str(il) for il in layers)


def bos_tokens(llm, book, n):
    """The first `n` ids of the book tokenized with add_special=true, checked to be the BOS
    followed by the add_special=false ids."""
    bos = llm.token_bos()
    with_bos = fu.tok(llm, book, True, False)[:n]
    plain = fu.book_tokens(llm, book, n - 1)
    assert with_bos == [bos] + plain, "add_special=true is not BOS + the plain ids"
    return with_bos


def check_prompt_bos(llm, cases):
    """Every greedy prompt's ids are the BOS and then its add_special=false ids."""
    bos = llm.token_bos()
    for (name, text, special), case in zip(GREEDY_PROMPTS, cases):
        plain = fu.tok(llm, text.encode("utf-8"), False, special)
        assert case["prompt_ids"] == [bos] + plain, name


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    fu.add_common_args(ap, "~/.cache/streamd/models/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--name", default="gemma3_270m", help="prefix of the fixture files")
    ap.add_argument("--exact", action="store_true",
                    help="add the exact-weights pass (an F32 copy of the file in --f32-dir)")
    ap.add_argument("--f32-dir", default="/tmp")
    args = ap.parse_args()
    fu.start()
    book = fu.read_book(args.book)
    settings = {**fu.settings(PPL_TOKENS, args.threads), "swa_full": SWA_FULL}

    vocab = fu.tokenizer_fixture(args.model, book, fu.TEXT_CASES + GEMMA_CASES, BOS_CASES,
                                 os.path.join(args.out, f"{args.name}_tokenize.json"))["vocab"]
    if not vocab["add_bos_token"]:
        sys.exit("this file's vocabulary asks for no BOS: the definitions here assume one")

    llm = fu.dense_llama(args.model, PPL_TOKENS, args.threads, swa_full=SWA_FULL)
    swa, full, window = layer_kinds(llm)
    tokens = bos_tokens(llm, book, PPL_TOKENS)
    nll, argmax, gap, ppl = fu.dense_scores(llm, tokens)
    topk = fu.top_rows(llm, PPL_TOKENS, TOPK, TOPK_EVERY)
    cases = fu.greedy_cases(llm, GREEDY_PROMPTS, GREEDY_STEPS, add_special=True)
    check_prompt_bos(llm, cases)
    del llm
    definition = fu.ppl_definition(
        PPL_TOKENS, TOKENS_CLAUSE % vocab["bos_id"],
        ATTENTION_CLAUSE % (layer_list(swa), window, window, layer_list(full)))
    pride = {
        **fu.model_fields(args.model), "reference": fu.REFERENCE,
        **fu.source_fields(book),
        "definition": definition,
        "topk_definition": fu.topk_definition(TOPK, TOPK_EVERY),
        "llama_cpp_settings": settings,
        **fu.scores_fields(nll, argmax, gap, ppl, tokens),
        "topk": topk,
    }
    print(f"ppl = {ppl:.6f}; tokens[:8] = {tokens[:8]}; argmax[:8] = {pride['argmax'][:8]}",
          file=sys.stderr)
    if args.exact:
        assert (qv.TOPK, qv.TOPK_EVERY) == (TOPK, TOPK_EVERY)
        exact = qv.exact_pass(args.model, tokens, args.threads, args.f32_dir,
                              swa_full=SWA_FULL)
        pride["exact"] = exact
        same = np.array(exact["argmax"]) == np.array(pride["argmax"])
        print(f"exact weights: ppl = {exact['ppl']:.6f}; argmax agreement with the quantized "
              f"pass {same.mean():.4f} ({same.sum()}/{same.size}), at positions >= {window} "
              f"{same[window:].mean():.4f}", file=sys.stderr)
    fu.write_json(os.path.join(args.out, f"{args.name}_pride_{PPL_TOKENS}.json"), pride)

    fu.write_json(os.path.join(args.out, f"{args.name}_greedy.json"), {
        **fu.model_fields(args.model), "reference": fu.REFERENCE,
        "definition": fu.greedy_definition(
            GREEDY_STEPS, " (hit_eog_at records the first)",
            f"true (llama.cpp prepended the BOS, id {vocab['bos_id']}, to every prompt, as the "
            "vocabulary's add_bos_token = true asks, and appended nothing)"),
        "bos_id": vocab["bos_id"],
        "llama_cpp_settings": settings,
        "cases": cases,
    })
    for c in cases:
        print(f"greedy {c['name']}: {c['generated_text']!r}", file=sys.stderr)


if __name__ == "__main__":
    main()
