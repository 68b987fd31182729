#!/usr/bin/env python3
"""Golden fixtures for the quantized variants of the default model, from llama.cpp.

scripts/make-quant-variants.sh makes SmolLM2-135M-Instruct.<TYPE>.gguf from the default Q4_1
file (llama-quantize --allow-requantize for the K-quants and IQ4 types; the `gguf` package's
numpy quantizer for Q5_0/Q5_1, the CI path). For each variant this script runs llama.cpp
(llama-cpp-python 0.3.36, same build and settings as make_fixtures.py: docs/REFERENCE.md,
use_extra_bufts = false) and writes tests/fixtures/smollm2_quant_<TYPE>.json with:
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


def top_rows(llm):
    rows = []
    for pos in range(0, PPL_TOKENS - 1, TOPK_EVERY):
        row = np.asarray(llm.scores[pos], dtype=np.float32)
        ids = np.argsort(-row.astype(np.float64), kind="stable")[:TOPK]
        rows.append({"position": pos, "ids": [int(i) for i in ids],
                     "logits": [mf.sig6(float(row[i])) for i in ids]})
    return rows


def exact_pass(path, tokens, threads, f32_dir):
    f32_path = os.path.join(f32_dir, os.path.basename(path) + ".f32.gguf")
    write_f32_copy(path, f32_path)
    llm = Llama(f32_path, n_ctx=PPL_TOKENS, n_batch=PPL_TOKENS, n_ubatch=512, logits_all=True,
                n_threads=threads, n_threads_batch=threads, flash_attn=False, type_k=0,
                type_v=0, verbose=False)
    nll, argmax, gap, ppl = mf.dense_scores(llm, tokens)
    out = {
        "definition": ("the same dense pass, by llama.cpp on an F32 copy of the file "
                       "(gguf.quants.dequantize of every tensor), K/V cache f32 (type_k = "
                       "type_v = 0): f32 matmuls, no activation quantization"),
        "f32_model_sha256": mf.sha256_file(f32_path),
        "ppl": ppl, "mean_nll": float(nll.mean()),
        "argmax": [int(a) for a in argmax],
        "argmax_gap": [mf.sig4(g) for g in gap],
        "topk": top_rows(llm),
    }
    del llm
    os.remove(f32_path)
    return out


def variant_fixture(path, type_name, book, threads, how, f32_dir):
    settings = {
        "n_ctx": PPL_TOKENS, "n_batch": PPL_TOKENS, "n_ubatch": 512, "logits_all": True,
        "kv_cache_type": "f16", "flash_attn": False, "n_threads": threads,
        "use_extra_bufts": False,
        "system_info": llama_cpp.llama_print_system_info().decode().strip(),
    }
    llm = Llama(path, n_ctx=PPL_TOKENS, n_batch=PPL_TOKENS, n_ubatch=512, logits_all=True,
                n_threads=threads, n_threads_batch=threads, flash_attn=False, verbose=False)
    tokens = mf.tok(llm, book, False, False)[:PPL_TOKENS]
    assert len(tokens) == PPL_TOKENS
    nll, argmax, gap, ppl = mf.dense_scores(llm, tokens)
    topk = top_rows(llm)
    greedy = mf.greedy_cases(llm, mf.GREEDY_PROMPTS, GREEDY_STEPS)
    del llm
    exact = exact_pass(path, tokens, threads, f32_dir)
    print(f"{type_name}: ppl = {ppl:.6f}, exact weights {exact['ppl']:.6f}", file=sys.stderr)
    return {
        "model": os.path.basename(path), "model_sha256": mf.sha256_file(path),
        "type": type_name, "made_by": how, "tensor_types": tensor_types(path),
        "reference": f"llama.cpp via llama-cpp-python {mf.REF_VERSION}",
        "source": "pride-and-prejudice.txt",
        "source_sha256": hashlib.sha256(book).hexdigest(),
        "definition": mf.PPL_DEFINITION.replace("2048", str(PPL_TOKENS))
                                       .replace("2047", str(PPL_TOKENS - 1))
                                       .replace("2046", str(PPL_TOKENS - 2)),
        "topk_definition": (f"every {TOPK_EVERY}th position of the same pass: the {TOPK} "
                            "largest float32 logits (6 significant digits) and their ids, "
                            "largest first"),
        "greedy_definition": (
            "prompt_ids = llama_tokenize(prompt, add_special=false, "
            "parse_special=<case.parse_special>), evaluated from an empty KV cache; then "
            f"{GREEDY_STEPS} steps of: next = argmax of the float32 logits at the last "
            "position (lowest index on ties), feed it back; no sampler, no stop at "
            "end-of-generation tokens. argmax_gap = top1 - top2 logit at each step."),
        "llama_cpp_settings": settings,
        "n_tokens": PPL_TOKENS, "ppl": ppl, "mean_nll": float(nll.mean()),
        "tokens": tokens,
        "argmax": [int(a) for a in argmax],
        "argmax_gap": [mf.sig4(g) for g in gap],
        "nll": [mf.sig6(v) for v in nll],
        "topk": topk,
        "greedy": greedy,
        "exact": exact,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("types", nargs="+", help="Q4_K_M Q5_K_M ... (the files' suffixes)")
    ap.add_argument("--variants", required=True, help="directory of make-quant-variants.sh")
    ap.add_argument("--book", default="/work/shared/data/pride-and-prejudice.txt")
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--f32-dir", default="/tmp", help="where the F32 copies go (~540 MB each, "
                    "deleted after use)")
    args = ap.parse_args()
    mf.disable_extra_buffer_types()
    if llama_cpp.__version__ != mf.REF_VERSION:
        sys.exit(f"expected llama-cpp-python {mf.REF_VERSION}, got {llama_cpp.__version__}")
    with open(args.book, "rb") as f:
        book = f.read()
    for type_name in args.types:
        path = os.path.join(args.variants, f"SmolLM2-135M-Instruct.{type_name}.gguf")
        how = ("gguf.quants numpy quantizer (scripts/quantize_with_gguf.py)"
               if type_name in ("Q5_0", "Q5_1") else
               f"llama-quantize --allow-requantize (llama.cpp 0c1e570) {type_name}")
        how += " from SmolLM2-135M-Instruct.Q4_1.gguf"
        mf.write_json(os.path.join(args.out, f"smollm2_quant_{type_name}.json"),
                      variant_fixture(path, type_name, book, args.threads, how, args.f32_dir))


if __name__ == "__main__":
    main()
