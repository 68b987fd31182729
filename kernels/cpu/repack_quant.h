// Load-time conversion of the formats in dequantize_reference.h into ones the matrix products
// (matmul.h, every ISA level, AMX and 8-bit copies) and the CUDA backend already run: the
// "repack" path for K-quants and friends, which needs no new product kernel anywhere.
//
//   Q4_K -> Q4_1  near-exact: each 32-value sub-block is d*scale*q - dmin*min with q in 0..15,
//                 which is Q4_1 with d' = f16(d*scale), m' = f16(-dmin*min) and the same nibbles.
//                 The only error is those two roundings to f16 (relative 2^-11); 5.0 bits per
//                 weight instead of 4.5.
//   Q5_K -> Q5_1  near-exact in the same way (q in 0..31, the fifth bits moved into each block's
//                 qh): 6.0 bits per weight instead of 5.5.
//   Q5_1 -> Q5_1  the same bytes (the products read Q5_1 as stored; the loader does not call
//                 this for it).
//   Q5_0, IQ4_NL -> Q8_0  exact: the same f16 scale, q - 16 (or the code book's int8) as the byte.
//   every other  -> Q8_0  re-quantized: the reference dequantization, then per 32 values
//                 d' = f16(amax / 127), q = round(x / d'). Error <= d'/2 per value (amax/254 plus
//                 f16 rounding of d'); 8.5 bits per weight.
// This header has no engine types: kernels/ stays below engine/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/dequantize_reference.h"
#include "kernels/cpu/matmul.h"

namespace streamd::kernels {

// The format `type` is converted into: cpu::WeightType::kQ4_1 or kQ8_0.
cpu::WeightType RepackTarget(ConvertedQuant type);

// Converts rows [row_begin, row_end) of a [rows, k] matrix in `type` (row r at
// src + r * src_row_bytes; k a multiple of the type's block) into RepackTarget(type) rows at
// dst + r * cpu::WeightRowBytes(RepackTarget(type), k). Thread-safe for disjoint row ranges.
// Returns false when a converted scale does not fit an f16 (|scale| > 65504, or not finite in the
// source): the matrix cannot be represented in the target format and the caller must refuse it.
bool RepackRows(ConvertedQuant type, const uint8_t* src, size_t src_row_bytes, int64_t k,
                int64_t row_begin, int64_t row_end, uint8_t* dst);

}  // namespace streamd::kernels
