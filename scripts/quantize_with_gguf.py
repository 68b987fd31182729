#!/usr/bin/env python3
"""Requantizes a GGUF model to Q5_0 or Q5_1 with the `gguf` package's numpy quantizer.

This is the CI path of scripts/make-quant-variants.sh: it needs no llama.cpp build, only the
pinned `gguf` venv that `make test` already makes (tests/reference/gguf-venv.sh). Each quantized
2-D weight is dequantized to f32 (gguf.quants.dequantize) and quantized again
(gguf.quants.quantize), with the type llama-quantize would choose for the same ftype: the
target type everywhere, except the tied token embedding / output matrix, which llama-quantize
gives the output's type (Q6_K, falling back to Q8_0 when its row length is not a multiple of
256). F32 tensors (the norms) are copied. The metadata is copied in order; general.file_type
becomes the ftype's number. Deterministic: numpy rounding, one thread.

    python3 scripts/quantize_with_gguf.py IN.gguf OUT.gguf Q5_0|Q5_1
"""

import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T

from gguf_copy import copy_metadata, write_out

# llama_ftype numbers (llama.h) of the types this script makes.
FTYPE = {"Q5_0": 8, "Q5_1": 9}


def target_type(name, shape, qtype, tied_output):
    """llama-quantize's choice for one tensor (llama-quant.cpp: llama_tensor_get_type)."""
    if len(shape) < 2:
        return None  # norms stay F32
    if name == "output.weight" or (tied_output and name == "token_embd.weight"):
        return T.Q6_K if shape[0] % 256 == 0 else T.Q8_0
    return qtype


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in FTYPE:
        sys.exit(__doc__)
    src, dst, type_name = sys.argv[1], sys.argv[2], sys.argv[3]
    qtype = T[type_name]
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    names = {t.name for t in reader.tensors}
    tied = "output.weight" not in names
    writer = gguf.GGUFWriter(dst, arch)
    copy_metadata(reader, writer, lambda key, value: (
        key, FTYPE[type_name] if key == "general.file_type" else value))
    for t in reader.tensors:
        shape = [int(d) for d in t.shape]  # ggml order: row length first
        new_type = target_type(t.name, shape, qtype, tied)
        if new_type is None or t.tensor_type == T.F32 and len(shape) < 2:
            writer.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
            continue
        f32 = gguf.quants.dequantize(t.data, t.tensor_type)
        q = gguf.quants.quantize(f32.reshape(shape[::-1]), new_type)
        writer.add_tensor(t.name, q, raw_dtype=new_type)
    write_out(writer)


if __name__ == "__main__":
    main()
