#!/usr/bin/env python3
"""Rewrites the default `llama` GGUF as a `qwen3` file, to run the qwen3 family on real weights.

PyPI carries no Qwen3 GGUF. A qwen3 layer is a llama layer plus two things: an RMSNorm of each
query and key head (its own weight per head dimension, `blk.N.attn_q_norm.weight` and
`attn_k_norm.weight`) before RoPE, and NEOX RoPE (rotating dimension i with i + head_dim/2, where
GGUF's llama files rotate neighbours 2i, 2i+1). So this script:
  - renames the `llama.*` metadata keys to `qwen3.*` and the architecture to qwen3;
  - undoes the converter's row permutation of attn_q and attn_k (llama.cpp's convert script
    reorders each head's rows so that neighbour rotation equals Hugging Face's rotate-half), so
    that NEOX RoPE on these rows is the rotation the model was trained with;
  - adds per-head q and k norm weights (deterministic: 2.5 + 0.5 sin(i) and 2.5 + 0.5 cos(i),
    so that the normalised heads still give attention scores of a useful size).
The model was not trained with the norms, so its text gets worse; what matters is that streamd
and llama.cpp compute the same function of these weights (tests/quant_variants_golden_test.cc,
variant QWEN3_ARCH). Every other tensor is copied as stored. Deterministic. Part of
scripts/make-quant-variants.sh (`make test` runs it).

    python3 scripts/make_qwen3_variant.py IN.gguf OUT.gguf
"""

import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T

from gguf_copy import copy_metadata, write_out


def unpermute_rows(rows, n_head):
    """The inverse of the converter's permutation: in each head, GGUF row 2i + j came from
    row j * head_dim/2 + i."""
    n_rows = rows.shape[0]
    half = n_rows // n_head // 2
    out = np.empty_like(rows)
    for h in range(n_head):
        for i in range(half):
            for j in range(2):
                out[h * 2 * half + j * half + i] = rows[h * 2 * half + 2 * i + j]
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(src)
    if reader.fields["general.architecture"].contents() != "llama":
        sys.exit(f"{src}: not a llama file")
    n_embd = int(reader.fields["llama.embedding_length"].contents())
    n_head = int(reader.fields["llama.attention.head_count"].contents())
    n_head_kv = int(reader.fields["llama.attention.head_count_kv"].contents())
    n_layer = int(reader.fields["llama.block_count"].contents())
    head_dim = n_embd // n_head

    def as_qwen3(key, value):
        if key == "general.name":
            value += " as qwen3"
        if key.startswith("llama."):
            key = "qwen3." + key[len("llama."):]
        return key, value

    writer = gguf.GGUFWriter(dst, "qwen3")
    copy_metadata(reader, writer, as_qwen3)

    i = np.arange(head_dim, dtype=np.float64)
    q_norm = (2.5 + 0.5 * np.sin(i)).astype(np.float32)
    k_norm = (2.5 + 0.5 * np.cos(i)).astype(np.float32)
    for t in reader.tensors:
        data = np.asarray(t.data)
        if t.name.endswith(".attn_q.weight") or t.name.endswith(".attn_k.weight"):
            heads = n_head if t.name.endswith(".attn_q.weight") else n_head_kv
            rows = int(t.shape[1])
            data = unpermute_rows(data.reshape(rows, -1), heads).reshape(data.shape)
        writer.add_tensor(t.name, data, raw_dtype=t.tensor_type)
        if t.name.endswith(".attn_k.weight"):
            layer = t.name.split(".")[1]
            writer.add_tensor(f"blk.{layer}.attn_q_norm.weight", q_norm, raw_dtype=T.F32)
            writer.add_tensor(f"blk.{layer}.attn_k_norm.weight", k_norm, raw_dtype=T.F32)
    write_out(writer)
    print(f"qwen3 variant: {n_layer} layers, {n_head} heads / {n_head_kv} KV heads of "
          f"{head_dim}, q/k rows un-permuted for NEOX RoPE, q/k norms added", file=sys.stderr)


if __name__ == "__main__":
    main()
