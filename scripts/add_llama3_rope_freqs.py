#!/usr/bin/env python3
"""Copies a `llama` GGUF and adds Llama 3.1's RoPE frequency factors (`rope_freqs.weight`).

Llama 3.1 and 3.2 files carry their frequency scaling as this one F32 tensor of head_dim / 2
divisors: a rotary frequency whose wavelength is shorter than original_context /
high_freq_factor keeps its rate (1), one longer than original_context / low_freq_factor is slowed
by `factor`, and the band between is interpolated. PyPI has no Llama 3.x GGUF small enough for
CI, so the test file is the default model with the factors Meta's rope_scaling config defines
(factor 8, low_freq_factor 1, high_freq_factor 4, original context 8192), computed from the
file's own rope base and head size. The model was not trained with them, so its text gets
worse; what matters is that streamd and llama.cpp compute the same function of a real model's
weights with the factors applied (tests/quant_variants_golden_test.cc, type LLAMA3_ROPE).

Every other tensor is copied as stored, the metadata in order (general.name gets a suffix).
Deterministic. Part of scripts/make-quant-variants.sh (`make test` runs it).

    python3 scripts/add_llama3_rope_freqs.py IN.gguf OUT.gguf
"""

import math
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T

from gguf_copy import copy_metadata, write_out

# Llama 3.1's rope_scaling (its config.json: "rope_type": "llama3").
FACTOR = 8.0
LOW_FREQ_FACTOR = 1.0
HIGH_FREQ_FACTOR = 4.0
ORIGINAL_CONTEXT = 8192


def frequency_divisors(base, head_dim):
    """The divisor of each rotary frequency base^(-2i/head_dim), i < head_dim / 2."""
    long_wavelength = ORIGINAL_CONTEXT / LOW_FREQ_FACTOR
    short_wavelength = ORIGINAL_CONTEXT / HIGH_FREQ_FACTOR
    out = []
    for i in range(head_dim // 2):
        wavelength = 2 * math.pi * base ** (2 * i / head_dim)
        if wavelength < short_wavelength:
            out.append(1.0)
        elif wavelength > long_wavelength:
            out.append(FACTOR)
        else:
            # Between the two: the rate is a mix of the kept and the slowed one.
            mix = (ORIGINAL_CONTEXT / wavelength - LOW_FREQ_FACTOR) / (
                HIGH_FREQ_FACTOR - LOW_FREQ_FACTOR)
            out.append(1.0 / ((1.0 - mix) / FACTOR + mix))
    return np.asarray(out, dtype=np.float32)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    if arch != "llama":
        sys.exit(f"{src}: architecture {arch!r}, not llama")
    if any(t.name == "rope_freqs.weight" for t in reader.tensors):
        sys.exit(f"{src} already has rope_freqs.weight")
    base = float(reader.fields[f"{arch}.rope.freq_base"].contents())
    n_embd = int(reader.fields[f"{arch}.embedding_length"].contents())
    n_head = int(reader.fields[f"{arch}.attention.head_count"].contents())
    divisors = frequency_divisors(base, n_embd // n_head)

    writer = gguf.GGUFWriter(dst, arch)
    copy_metadata(reader, writer, lambda key, value: (
        key, value + " + Llama 3.1 rope_freqs" if key == "general.name" else value))
    # llama.cpp's converter writes the factors first; the order does not change what they mean.
    writer.add_tensor("rope_freqs.weight", divisors, raw_dtype=T.F32)
    for t in reader.tensors:
        writer.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    write_out(writer)
    print(f"rope_freqs.weight: {len(divisors)} divisors from base {base:g}: "
          f"{np.array2string(divisors, precision=3, max_line_width=200)}", file=sys.stderr)


if __name__ == "__main__":
    main()
