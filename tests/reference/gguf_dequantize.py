#!/usr/bin/env python3
"""Dequantizes raw GGUF blocks with the `gguf` package's numpy code: the independent reference
that streamd's own dequantizers (kernels/cpu/dequantize_reference.cc) are tested against.

Usage: gguf_dequantize.py TYPE_NAME IN_BLOCKS OUT_F32
  TYPE_NAME  a ggml type name, e.g. Q4_K
  IN_BLOCKS  whole blocks of that type, back to back
  OUT_F32    written: every value as little-endian float32, in block order
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    qtype = GGMLQuantizationType[sys.argv[1]]
    block_values, block_bytes = GGML_QUANT_SIZES[qtype]
    raw = np.fromfile(sys.argv[2], dtype=np.uint8)
    if raw.size % block_bytes != 0:
        print(f"{sys.argv[2]}: {raw.size} bytes is not a whole number of {block_bytes}-byte "
              f"{sys.argv[1]} blocks", file=sys.stderr)
        return 1
    # One row of all the blocks: dequantize() takes rows of whole blocks.
    values = dequantize(raw.reshape(1, -1), qtype).astype("<f4")
    assert values.size == raw.size // block_bytes * block_values
    values.tofile(sys.argv[3])
    return 0


if __name__ == "__main__":
    sys.exit(main())
