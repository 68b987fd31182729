#!/usr/bin/env python3
"""Exact-weights reference: smollm2_pride_2048_f32.json.

Same 2048-token dense pass as smollm2_pride_2048.json (make_fixtures.py), but
llama.cpp runs an all-F32 copy of the Q4_1 model (every weight dequantized
exactly, see dequantize_model.py) with an F32 KV cache and flash attention off.
So no activation is quantized anywhere: llama.cpp's CPU path would otherwise
quantize the activations to Q8_1 before every Q4_1 matmul (Q8_0 for the Q8_0
output matrix) and store K/V in f16, and that noise flips near-tie argmaxes.
The result is llama.cpp's f32 evaluation of the function that the Q4_1 weights
define.  See docs/REFERENCE.md, "Exact-weights fixture".  Not part of CI.

How to run (from the repository root):

    export LLAMA_CPP_LIB_PATH=/path/to/llama.cpp/build/bin
    python3 tools/reference/dequantize_model.py \
        ~/.cache/streamd/models/SmolLM2-135M-Instruct.Q4_1.gguf \
        /tmp/SmolLM2-135M-Instruct.Q4_1-dequant-F32.gguf
    python3 tools/reference/make_exact_fixture.py \
        --model ~/.cache/streamd/models/SmolLM2-135M-Instruct.Q4_1.gguf \
        --f32-model /tmp/SmolLM2-135M-Instruct.Q4_1-dequant-F32.gguf \
        --book /work/shared/data/pride-and-prejudice.txt \
        --out tests/fixtures

The script re-checks that --f32-model is the exact dequantization of --model
(same metadata except general.file_type, every tensor bit-identical to
gguf.quants.dequantize of the source), and that its tokens equal those of
<out>/smollm2_pride_2048.json when that file exists.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np

import dequantize_model as dq
import fixture_util as fu

GGML_TYPE_F32 = 0
GREEDY_OUT_NAME = "smollm2_greedy_f32.json"
OUT_NAME = "smollm2_pride_2048_f32.json"
Q_FIXTURE = "smollm2_pride_2048.json"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/streamd/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
        help="the quantized source model")
    ap.add_argument("--f32-model", required=True,
                    help="dequantize_model.py output for --model")
    fu.add_common_args(ap)
    args = ap.parse_args()
    t0 = time.time()
    fu.start()  # repacking off: see fixture_util.py / docs/REFERENCE.md
    dq.verify(args.model, args.f32_model)
    book = fu.read_book(args.book)

    n = fu.PPL_TOKENS
    llm = fu.dense_llama(args.f32_model, n, args.threads, type_k=GGML_TYPE_F32,
                         type_v=GGML_TYPE_F32)
    assert llm.context_params.type_k == GGML_TYPE_F32
    assert llm.context_params.type_v == GGML_TYPE_F32
    assert llm.metadata.get("general.file_type") == "0"
    tokens = fu.book_tokens(llm, book, n)

    q_path = os.path.join(args.out, Q_FIXTURE)
    q_fx = None
    if os.path.exists(q_path):
        with open(q_path, encoding="utf-8") as f:
            q_fx = json.load(f)
        if q_fx["tokens"] != tokens:
            sys.exit(f"tokens differ from {q_path}")

    nll, argmax, gap, ppl = fu.dense_scores(llm, tokens)
    obj = {
        **fu.model_fields(args.model),
        "weights": "f32 dequantization of model",
        "f32_model": os.path.basename(args.f32_model),
        "f32_model_sha256": fu.sha256_file(args.f32_model),
        "reference": f"{fu.REFERENCE}, run on the F32 dequantization of the same Q4_1 weights",
        "reference_note": (
            "Every tensor of `model` was dequantized to F32 exactly as ggml does "
            "(Q4_1: d*q + m, Q8_0: d*q, f16 d/m widened to f32; bit-identical to "
            "ggml's to_float) by tools/reference/dequantize_model.py; metadata "
            "unchanged except general.file_type=0 (ALL_F32). With F32 weights every "
            "matmul is f32 x f32 (no Q8_1/Q8_0 quantization of activations), the K/V "
            "cache is F32 and flash attention is off, so attention is f32 too. This is "
            "llama.cpp's f32 evaluation of the function the Q4_1 weights define; "
            "smollm2_pride_2048.json is the same pass with llama.cpp's default "
            "quantized-activation CPU path and f16 K/V."),
        **fu.source_fields(book),
        "definition": fu.PPL_DEFINITION,
        "llama_cpp_settings": {
            "n_ctx": n, "n_batch": n, "n_ubatch": 512,
            "logits_all": True, "weights_type": "f32",
            "kv_cache_type": "f32", "type_k": GGML_TYPE_F32, "type_v": GGML_TYPE_F32,
            "flash_attn": False, "n_threads": args.threads, "use_extra_bufts": False,
            "system_info": fu.system_info(),
        },
        **fu.scores_fields(nll, argmax, gap, ppl, tokens),
    }
    if q_fx is not None:
        agree = int((np.array(q_fx["argmax"]) == argmax).sum())
        obj["vs_" + Q_FIXTURE.removesuffix(".json")] = {
            "argmax_agree": agree, "of": n - 1,
            "ppl": q_fx["ppl"],
        }
        print(f"argmax agreement with {Q_FIXTURE}: {agree}/{n - 1} "
              f"({agree / (n - 1):.4%}); its ppl {q_fx['ppl']:.6f}", file=sys.stderr)
    fu.write_json(os.path.join(args.out, OUT_NAME), obj)
    # Greedy continuations of the same prompts as smollm2_greedy.json, on the exact weights.
    greedy = {k: obj[k] for k in ("model", "model_sha256", "weights", "f32_model",
                                   "f32_model_sha256", "reference", "llama_cpp_settings")}
    greedy["definition"] = ("as in smollm2_greedy.json, on the F32 dequantization with an "
                            "F32 K/V cache")
    greedy["cases"] = fu.greedy_cases(llm)
    fu.write_json(os.path.join(args.out, GREEDY_OUT_NAME), greedy)
    print(f"ppl = {ppl:.6f} (mean nll {math.log(ppl):.6f}); "
          f"{time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
