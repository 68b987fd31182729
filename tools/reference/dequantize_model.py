#!/usr/bin/env python3
"""Write an all-F32 copy of a GGUF model: same metadata, every tensor dequantized.

Used to make the exact-weights reference fixture (docs/REFERENCE.md,
"Exact-weights fixture"): llama.cpp running the F32 copy computes the function
that the quantized weights define, with f32 activations, instead of quantizing
activations to Q8_1/Q8_0 before every quantized matmul as its CPU path does.

    /opt/ref/venv/bin/python tools/reference/dequantize_model.py \
        ~/.cache/streamd/models/SmolLM2-135M-Instruct.Q4_1.gguf \
        /tmp/SmolLM2-135M-Instruct.Q4_1-dequant-F32.gguf \
        [--ggml-lib <dir holding libggml-base.so>]

The output (about 540 MB for SmolLM2-135M) does not belong in the repository.

What it does:
  * copies every metadata key (in the same order, same value types, tokenizer
    arrays and chat template included) except general.file_type, which is set
    to 0 (ALL_F32);
  * writes the tensors in the same order with the same names and shapes, each
    converted to F32 with gguf.quants.dequantize (F32 tensors are copied);
  * checks the dequantized values bit for bit against ggml's own formula:
    always against a direct numpy transcription of ggml's dequantize_row_*
    (Q4_1: y = (float)q * d + m with d, m the block's f16 scale/min widened to
    f32; Q8_0: y = (float)q * d), and, when --ggml-lib (or LLAMA_CPP_LIB_PATH)
    points at a llama.cpp build, against ggml_get_type_traits(type)->to_float
    from libggml-base.so itself.

Rounding note: for Q4_1, q*d is exact in f32 (a 4-bit integer times an f16
with an 11-bit significand needs at most 15 bits), so q*d + m has a single
rounding whether or not the compiler contracts it to an FMA; the same holds
for Q8_0 (8-bit times 11-bit, no addition).  The dequantized weights are thus
uniquely defined and identical to what ggml's scalar code produces.
"""

import argparse
import ctypes
import os
import sys
import time

import numpy as np

from gguf import GGUFReader, GGUFWriter, GGUFValueType, GGMLQuantizationType, Keys, quants

FILE_TYPE_ALL_F32 = 0  # llama_ftype LLAMA_FTYPE_ALL_F32


# ---------------------------------------------------------------------------
# ggml's formulas, transcribed from ggml/src/ggml-quants.c (dequantize_row_*)
# ---------------------------------------------------------------------------
def ggml_formula(raw, qtype):
    """raw: uint8 array [..., n_blocks*type_size] -> f32 array [..., n_blocks*block]."""
    if qtype == GGMLQuantizationType.Q4_1:
        b = raw.reshape(-1, 20)  # block_q4_1: f16 d, f16 m, uint8 qs[16]
        d = b[:, 0:2].copy().view(np.float16).astype(np.float32)  # [nb, 1]
        m = b[:, 2:4].copy().view(np.float16).astype(np.float32)
        qs = b[:, 4:20]
        x0 = (qs & 0x0F).astype(np.float32)  # y[j]      = x0*d + m
        x1 = (qs >> 4).astype(np.float32)    # y[j + 16] = x1*d + m
        y = np.concatenate([x0 * d + m, x1 * d + m], axis=1)
    elif qtype == GGMLQuantizationType.Q8_0:
        b = raw.reshape(-1, 34)  # block_q8_0: f16 d, int8 qs[32]
        d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
        y = b[:, 2:34].copy().view(np.int8).astype(np.float32) * d
    else:
        return None
    return y.astype(np.float32).reshape(*raw.shape[:-1], -1)


class GGMLToFloat:
    """ggml_get_type_traits(type)->to_float from libggml-base.so, via ctypes."""

    class Traits(ctypes.Structure):
        _fields_ = [("type_name", ctypes.c_char_p),
                    ("blck_size", ctypes.c_int64),
                    ("blck_size_interleave", ctypes.c_int64),
                    ("type_size", ctypes.c_size_t),
                    ("is_quantized", ctypes.c_bool),
                    ("to_float", ctypes.c_void_p),
                    ("from_float_ref", ctypes.c_void_p)]

    TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)

    def __init__(self, libdir):
        self.lib = ctypes.CDLL(os.path.join(libdir, "libggml-base.so"))
        self.lib.ggml_get_type_traits.restype = ctypes.POINTER(self.Traits)
        self.lib.ggml_get_type_traits.argtypes = [ctypes.c_int]

    def __call__(self, raw, qtype, n_elems):
        tr = self.lib.ggml_get_type_traits(int(qtype)).contents
        if not tr.to_float:
            return None
        src = np.ascontiguousarray(raw)
        out = np.empty(n_elems, dtype=np.float32)
        self.TO_FLOAT(tr.to_float)(src.ctypes.data, out.ctypes.data, n_elems)
        return out


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--ggml-lib", default=os.environ.get("LLAMA_CPP_LIB_PATH"),
                    help="dir with libggml-base.so for the to_float cross-check "
                         "(default: $LLAMA_CPP_LIB_PATH; skipped if unset)")
    args = ap.parse_args()
    if os.path.abspath(args.input) == os.path.abspath(args.output):
        sys.exit("output must differ from input")
    t0 = time.time()

    reader = GGUFReader(args.input, "r")
    arch = reader.get_field(Keys.General.ARCHITECTURE).contents()
    writer = GGUFWriter(args.output, arch)  # writes general.architecture first

    # --- metadata: copy everything, change general.file_type only -----------
    n_kv = 0
    for field in reader.fields.values():
        if field.name == Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself / virtual header fields
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        if vtype == GGUFValueType.ARRAY and len(field.types) != 2:
            sys.exit(f"{field.name}: nested arrays not supported")
        value = field.contents()
        if field.name == Keys.General.FILE_TYPE:
            value = FILE_TYPE_ALL_F32
        writer.add_key_value(field.name, value, vtype, sub_type=sub_type)
        n_kv += 1
    if reader.get_field(Keys.General.FILE_TYPE) is None:
        writer.add_key_value(Keys.General.FILE_TYPE, FILE_TYPE_ALL_F32, GGUFValueType.UINT32)

    # --- tensors -------------------------------------------------------------
    to_float = GGMLToFloat(args.ggml_lib) if args.ggml_lib else None
    counts, checked_ggml = {}, 0
    for t in reader.tensors:
        qtype = GGMLQuantizationType(t.tensor_type)
        ne = [int(x) for x in t.shape]  # ggml order, ne[0] fastest
        np_shape = tuple(reversed(ne))
        if qtype == GGMLQuantizationType.F32:
            w = np.array(t.data, dtype=np.float32).reshape(np_shape)
        else:
            w = np.asarray(quants.dequantize(t.data, qtype), dtype=np.float32).reshape(np_shape)
            ref = ggml_formula(np.asarray(t.data), qtype)
            if ref is None:
                sys.exit(f"{t.name}: no ggml formula transcribed for {qtype.name}")
            if not same_bits(w, ref.reshape(np_shape)):
                sys.exit(f"{t.name}: gguf.quants.dequantize differs from ggml formula")
            if to_float is not None:
                g = to_float(np.asarray(t.data), qtype, int(np.prod(ne)))
                if g is None or not same_bits(w.reshape(-1), g):
                    sys.exit(f"{t.name}: differs from libggml to_float")
                checked_ggml += 1
        assert w.flags.c_contiguous and w.size == int(np.prod(ne))
        writer.add_tensor(t.name, w, raw_dtype=GGMLQuantizationType.F32)
        counts[qtype.name] = counts.get(qtype.name, 0) + 1

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"tensors converted: {counts}; bit-checked vs ggml formula: "
          f"{sum(v for k, v in counts.items() if k != 'F32')}, vs libggml to_float: "
          f"{checked_ggml}", file=sys.stderr)

    verify(args.input, args.output)
    print(f"wrote {args.output} ({os.path.getsize(args.output)} bytes) in "
          f"{time.time() - t0:.1f} s", file=sys.stderr)


def verify(src_path, dst_path):
    """Re-read both files: same keys/values/types (bar file_type), same tensors."""
    a, b = GGUFReader(src_path, "r"), GGUFReader(dst_path, "r")
    ka = [k for k in a.fields if not k.startswith("GGUF.")]
    kb = [k for k in b.fields if not k.startswith("GGUF.")]
    assert ka == kb, (set(ka) ^ set(kb))
    for k in ka:
        fa, fb = a.fields[k], b.fields[k]
        assert fa.types == fb.types, k
        if k == Keys.General.FILE_TYPE:
            assert fb.contents() == FILE_TYPE_ALL_F32
        else:
            assert fa.contents() == fb.contents(), k
    assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
    for ta, tb in zip(a.tensors, b.tensors):
        assert list(ta.shape) == list(tb.shape), ta.name
        assert tb.tensor_type == GGMLQuantizationType.F32, tb.name
        w = np.asarray(quants.dequantize(ta.data, ta.tensor_type), dtype=np.float32)
        assert same_bits(w.reshape(-1), np.asarray(tb.data).reshape(-1)), ta.name
    print(f"verified: {len(ka)} metadata keys, {len(a.tensors)} tensors", file=sys.stderr)


if __name__ == "__main__":
    main()
