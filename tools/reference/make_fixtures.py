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
which shares dense_scores() and PPL_DEFINITION with it through fixture_util.py (as do
make_qwen_fixtures.py and make_quant_variant_fixtures.py).
"""

import argparse
import os
import sys

import fixture_util as fu

# Llama SPM gets the Llama-2 chat special tokens instead of ChatML.
SPM_EXTRA_CASES = [
    ("llama_special", "<s>[INST] Hi [/INST] Hello!</s><s>[INST] Bye [/INST]", True),
    ("llama_plain", "<s>[INST] Hi [/INST] Hello!</s><s>[INST] Bye [/INST]", False),
]
SPM_BOS_CASES = {"empty", "single_space", "ascii_sentence", "cyrillic", "llama_special"}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    fu.add_common_args(ap, "~/.cache/streamd/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--spm-vocab", required=True,
                    help="llama.cpp's models/ggml-vocab-llama-spm.gguf")
    ap.add_argument("--repack", type=int, choices=(0, 1), default=0,
                    help="llama_model_params.use_extra_bufts (default 0; 1 crashes "
                         "in the AMX kernel on GCC-12 builds, see docs/REFERENCE.md)")
    args = ap.parse_args()
    fu.start(repack=args.repack)
    os.makedirs(args.out, exist_ok=True)
    book = fu.read_book(args.book)
    n = fu.PPL_TOKENS
    settings = fu.settings(n, args.threads, args.repack)

    # --- a/b: tokenizer fixtures -------------------------------------------
    fu.tokenizer_fixture(args.model, book, fu.TEXT_CASES, set(),
                         os.path.join(args.out, "smollm2_tokenize.json"))
    spm_cases = [c for c in fu.TEXT_CASES if not c[0].startswith("chatml")] + SPM_EXTRA_CASES
    fu.tokenizer_fixture(args.spm_vocab, book, spm_cases, SPM_BOS_CASES,
                         os.path.join(args.out, "llama_spm_tokenize.json"))

    # --- c: dense 2048-token forward pass ----------------------------------
    llm = fu.dense_llama(args.model, n, args.threads)
    tokens = fu.book_tokens(llm, book, n)
    nll, argmax, gap, ppl = fu.dense_scores(llm, tokens)
    fu.write_json(os.path.join(args.out, "smollm2_pride_2048.json"), {
        **fu.model_fields(args.model),
        "reference": fu.REFERENCE,
        **fu.source_fields(book),
        "definition": fu.PPL_DEFINITION,
        "llama_cpp_settings": settings,
        **fu.scores_fields(nll, argmax, gap, ppl, tokens),
    })
    print(f"ppl = {ppl:.6f}", file=sys.stderr)

    # --- d: greedy continuations -------------------------------------------
    cases = fu.greedy_cases(llm)
    fu.write_json(os.path.join(args.out, "smollm2_greedy.json"), {
        **fu.model_fields(args.model),
        "reference": fu.REFERENCE,
        "definition": (
            f"prompt_ids = llama_tokenize(prompt, add_special=false, "
            f"parse_special=<case.parse_special>), evaluated from an empty KV cache; then "
            f"{fu.GREEDY_STEPS} steps of: next = argmax of the float32 logits at the last "
            f"position (lowest index on ties), feed it back. Pure argmax (no sampler, "
            f"no repetition penalty); generation does NOT stop at end-of-generation "
            f"tokens (hit_eog_at records the first one, or null). argmax_gap = top1-top2 "
            f"logit at each step. generated_text is informational only."),
        "llama_cpp_settings": {k: v for k, v in settings.items()
                               if k not in ("logits_all", "system_info")},
        "cases": cases,
    })


if __name__ == "__main__":
    main()
