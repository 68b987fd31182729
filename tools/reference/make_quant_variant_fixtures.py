#!/usr/bin/env python3
"""Golden fixtures for the quantized variants of the default model, from llama.cpp.

scripts/make-quant-variants.sh makes SmolLM2-135M-Instruct.<TYPE>.gguf from the default Q4_1
file (llama-quantize --allow-requantize for the K-quants and IQ4 types; the `gguf` package's
numpy quantizer for Q5_0/Q5_1, the CI path). For each variant this script runs llama.cpp
(llama-cpp-python 0.3.36, same build and settings as make_fixtures.py: docs/REFERENCE.md,
use_extra_bufts = false; fixture_util.py) and writes tests/fixtures/smollm2_quant_<TYPE>.json with:
  - model_sha256 (make-quant-variants.sh checks its output against it) and the tensor types;
  - a dense pass over the book's first 512 tokens: tokens, argmax, top-2 gap, nll, ppl, and the
    8 largest logits with their ids every 16 positions;
  - greedy continuations (16 steps) of make_fixtures.py's three SmolLM2 prompts;
  - `exact`: the same dense pass by llama.cpp on an F32 dequantization of the same file
    (gguf.quants.dequantize; f32 K/V): the function the weights define, without llama.cpp's
    8-bit activation rounding (docs/REFERENCE.md, "Exact-weights fixture"): ppl, argmax, gap,
    and its top-8 logits at the same positions.
Nothing in streamd is used here. NOT part of CI: run by hand, commit the JSON.

    LLAMA_CPP_LIB_PATH=<llama.cpp build/bin> PYTHONPATH=<sdist dir> \\
        python3 tools/reference/make_quant_variant_fixtures.py \\
            --variants "$(scripts/make-quant-variants.sh --dir)" --out tests/fixtures Q4_K_M ...
"""

import argparse
import collections
import os
import sys

import numpy as np

import fixture_util as fu

PPL_TOKENS = 512
TOPK = 8
TOPK_EVERY = 16
GREEDY_STEPS = 16


def tensor_types(path):
    """{type name: count} of the file's tensors (the `gguf` package, when importable)."""
    try:
        import gguf
    except ImportError:
        return None
    r = gguf.GGUFReader(path)
    return dict(sorted(collections.Counter(t.tensor_type.name for t in r.tensors).items()))


def write_f32_copy(src, dst):
    """An all-F32 copy of `src`: same metadata (general.file_type 0), every tensor dequantized
    with the gguf package (which equals ggml's dequantize_row_* bit for bit for these types;
    streamd's tests check its own dequantizers against it)."""
    import gguf
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, reader.fields["general.architecture"].contents())
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = gguf.GGUFValueType(field.types[0])
        if key == "general.file_type":
            writer.add_uint32(key, 0)
            continue
        sub = gguf.GGUFValueType(field.types[1]) if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        f32 = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        writer.add_tensor(t.name, f32.reshape([int(d) for d in t.shape][::-1]))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def exact_pass(path, tokens, threads, f32_dir, **extra):
    """The dense pass over `tokens` (n_ctx = len(tokens)) on an F32 copy of `path` with an f32
    K/V cache; `extra` adds Llama() parameters (make_gemma_fixtures.py's swa_full)."""
    f32_path = os.path.join(f32_dir, os.path.basename(path) + ".f32.gguf")
    write_f32_copy(path, f32_path)
    n = len(tokens)
    llm = fu.dense_llama(f32_path, n, threads, type_k=0, type_v=0, **extra)
    nll, argmax, gap, ppl = fu.dense_scores(llm, tokens)
    out = {
        "definition": ("the same dense pass, by llama.cpp on an F32 copy of the file "
                       "(gguf.quants.dequantize of every tensor), K/V cache f32 (type_k = "
                       "type_v = 0): f32 matmuls, no activation quantization"),
        "f32_model_sha256": fu.sha256_file(f32_path),
        **fu.scores_fields(nll, argmax, gap, ppl, with_nll=False),
        "topk": fu.top_rows(llm, n, TOPK, TOPK_EVERY),
    }
    del llm
    os.remove(f32_path)
    return out


def variant_fixture(path, type_name, book, threads, how, f32_dir):
    settings = fu.settings(PPL_TOKENS, threads)
    llm = fu.dense_llama(path, PPL_TOKENS, threads)
    tokens = fu.book_tokens(llm, book, PPL_TOKENS)
    nll, argmax, gap, ppl = fu.dense_scores(llm, tokens)
    topk = fu.top_rows(llm, PPL_TOKENS, TOPK, TOPK_EVERY)
    greedy = fu.greedy_cases(llm, fu.GREEDY_PROMPTS, GREEDY_STEPS)
    del llm
    exact = exact_pass(path, tokens, threads, f32_dir)
    print(f"{type_name}: ppl = {ppl:.6f}, exact weights {exact['ppl']:.6f}", file=sys.stderr)
    return {
        **fu.model_fields(path),
        "type": type_name, "made_by": how, "tensor_types": tensor_types(path),
        "reference": fu.REFERENCE,
        **fu.source_fields(book),
        "definition": fu.ppl_definition(PPL_TOKENS),
        "topk_definition": fu.topk_definition(TOPK, TOPK_EVERY),
        "greedy_definition": fu.greedy_definition(GREEDY_STEPS),
        "llama_cpp_settings": settings,
        **fu.scores_fields(nll, argmax, gap, ppl, tokens),
        "topk": topk,
        "greedy": greedy,
        "exact": exact,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("types", nargs="+", help="Q4_K_M Q5_K_M ... (the files' suffixes)")
    ap.add_argument("--variants", required=True, help="directory of make-quant-variants.sh")
    fu.add_common_args(ap)
    ap.add_argument("--f32-dir", default="/tmp", help="where the F32 copies go (~540 MB each, "
                    "deleted after use)")
    args = ap.parse_args()
    fu.start()
    book = fu.read_book(args.book)
    for type_name in args.types:
        path = os.path.join(args.variants, f"SmolLM2-135M-Instruct.{type_name}.gguf")
        if type_name == "LLAMA3_ROPE":
            how = "Llama 3.1's rope_freqs added (scripts/add_llama3_rope_freqs.py)"
        elif type_name == "QWEN3_ARCH":
            how = "rewritten as a qwen3 file (scripts/make_qwen3_variant.py)"
        elif type_name in ("Q5_0", "Q5_1"):
            how = "gguf.quants numpy quantizer (scripts/quantize_with_gguf.py)"
        else:
            how = f"llama-quantize --allow-requantize (llama.cpp 0c1e570) {type_name}"
        how += " from SmolLM2-135M-Instruct.Q4_1.gguf"
        fu.write_json(os.path.join(args.out, f"smollm2_quant_{type_name}.json"),
                      variant_fixture(path, type_name, book, args.threads, how, args.f32_dir))


if __name__ == "__main__":
    main()
