// Quantized weights (Q4_0, Q4_1, Q4_K, Q8_0, Q5_1, Q6_K) times 8-bit activations (BlockQ8A),
// AVX-512 VNNI level, from the PackForVnni8 copy (whole tiles of 16 rows; MatMulRows8 sends any
// other row, and a matrix without a copy, to the portable reference).
//
// The 12-bit kernel (matmul_quant_avx512.cc) is bound by vpdpwssd, which sums 2 i16 products per
// lane; vpdpbusd sums 4 byte products per lane, so 8-bit activations take half the instructions
// for the same work. It multiplies unsigned by signed bytes: here the weights are the unsigned
// side (4-bit values 0..15 as they are, Q8_0's bytes stored + 128) and the activations the
// signed one, each token's 4 bytes an embedded broadcast; Q8_0's 128 * sum(x) per block is taken
// off again before the sum is scaled:
//   sum_j w_j x_j = sum_j (w_j + 128) x_j - 128 sum_j x_j.
// The f32 math is the portable reference's in the same order (matmul_quant8.cc), so the results
// are the same bit for bit.
//
// Compiled with -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512vnni; reached only
// after the run-time check in isa.cc.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant_blocks.h"

namespace streamd::kernels::cpu::internal {
namespace {

constexpr int kQuads = kQuantBlock / 4;  // 4-byte groups per block

// The kernel is instantiated per packed format (Vnni8PackedFormat: Q5_0's copy is Q8_0's).
// kQ5_1: values 0..31 as bytes (Q8_0's loads, no shift) with Q4_1's offset term. kQ4_K: Q4_1's
// nibbles and offset term, its block scales and offsets made from the super-block record's
// (PackQ4_KForVnni8). kQ6_K: PackedChunkQ6_K.
//
// Bytes per block of a tile's records (the tile's stride over its blocks, and the prefetch's
// unit). The K-quants' super-block records hold their 8 blocks' values after the super-block's
// scales (matmul_internal.h): a tile's bytes stay in block order, kRecordBytes<F> per block.
template <WeightType F>
constexpr size_t kRecordBytes = Vnni8RecordBytes(F);

template <WeightType F>
inline float OffsetFactor() {
  return F == WeightType::kQ4_0 ? -8.0f : 1.0f;
}

// Rows in lanes: one zmm holds the same 4 values of 16 rows; a token's 4 activation bytes are
// broadcast from its block ({1to16}). The 8 weight vectors of a block are unpacked once and serve
// every token of a group of kGroup, whose 8-instruction chains interleave.

constexpr int kGroup = 8;

// How many records ahead the weights are prefetched, every line of the record. A group of 8
// tokens spends ~25 ns on a record, so 16 records is ~400 ns ahead: past DRAM latency even when
// both cores stream. Measured on Zen 4 with the weights in DRAM (matrices of the model's shapes,
// one thread): 4 records ahead (and only the first 320 bytes of a Q8_0 record, as before) took
// 13.1 us for 576x576 Q4_1 at 1 token and 3.93 ms for the 49152x576 Q8_0 head at 16; 16 ahead,
// 9.8 us and 3.28 ms; 24 or 32 ahead were no better.
constexpr size_t kPrefetchRecords = 16;

// Groups of 2 or more tokens also fetch records this far ahead into L2: they spend longer on a
// record than one token does, and the L1 prefetch alone left DRAM latency showing. Measured on
// Zen 4 (BM_MatMulRows8Stream, two threads from DRAM, 4 tokens: Q4_K 13.6 -> 11.6 ms, Q6_K
// 21.5 -> 15.0; the 1.5B's decode step of 4 sessions 39.2 -> 34.8 ms); one token was no faster
// (+4-5% in the benchmark), so it does without.
constexpr size_t kL2PrefetchRecords = 48;

// Every line of the record of kRecord bytes at rec, into L1 (or, with kL2, into L2).
template <size_t kRecord, bool kL2 = false>
inline void PrefetchRecord(const uint8_t* rec) {
  for (size_t line = 0; line < kRecord; line += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(rec + line), kL2 ? _MM_HINT_T1 : _MM_HINT_T0);
  }
}

// Block b's prefetches for a group of G tokens (tiles are contiguous, so the distance runs on
// into the next tile's records).
template <size_t kRecord, int G>
inline void PrefetchAhead(const uint8_t* tile, int64_t b) {
  PrefetchRecord<kRecord>(tile + static_cast<size_t>(b + kPrefetchRecords) * kRecord);
  if constexpr (G >= 2) {
    PrefetchRecord<kRecord, true>(tile + static_cast<size_t>(b + kL2PrefetchRecords) * kRecord);
  }
}

// The activations' integer sums per (token, block), for Q8_0's shift.
void ActivationSums(const BlockQ8A* x, int64_t n, int64_t nb, int32_t* sums) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      int32_t s = 0;
      for (int j = 0; j < kQuantBlock; ++j) s += x[t * nb + b].qs[j];
      sums[t * nb + b] = 128 * s;
    }
  }
}

// Q6_K's shifts: 32 * sum(x) of each half block (16 values: one scale group) per (token, block),
// taken off the sums of its values stored unsigned (q for q - 32).
void ActivationHalfSums(const BlockQ8A* x, int64_t n, int64_t nb, int32_t* sums) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      int32_t lo = 0, hi = 0;
      for (int j = 0; j < kQuantBlock / 2; ++j) {
        lo += x[t * nb + b].qs[j];
        hi += x[t * nb + b].qs[j + kQuantBlock / 2];
      }
      sums[2 * (t * nb + b)] = 32 * lo;
      sums[2 * (t * nb + b) + 1] = 32 * hi;
    }
  }
}

// sum + (w's unsigned bytes) . (the 4 signed bytes at p, broadcast to every lane), with the
// broadcast embedded in the instruction ({1to16}): the compiler otherwise emits a separate
// vpbroadcastd for each of a block's 64 products, and that extra instruction per multiply keeps
// the front end, not the multipliers, the limit (measured on Zen 4).
inline __m512i DpbusdBroadcast(__m512i sum, __m512i w, const int8_t* p) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0"
          : "+v"(sum)
          : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
  return sum;
}

// Tokens [0, G) of a group (tokens nb blocks apart in x), one tile of 16 rows, blocks [kb0, kb1).
// acc[t] holds the 16 rows' sums of token t over these blocks.
template <WeightType F, int G>
inline void PackedChunk(const uint8_t* tile, int64_t nb, const BlockQ8A* x, const int32_t* shifts,
                        int64_t kb0, int64_t kb1, __m512* acc) {
  constexpr size_t kRecord = kRecordBytes<F>;
  const float os_factor = OffsetFactor<F>();
  for (int t = 0; t < G; ++t) acc[t] = _mm512_setzero_ps();
  __m512 super_d = _mm512_setzero_ps(), super_ndmin = _mm512_setzero_ps();  // Q4_K's
  for (int64_t b = kb0; b < kb1; ++b) {
    // The tile's bytes are in block order for every format, Q4_K's too, so the prefetch runs
    // kPrefetchRecords blocks' worth ahead of this block's bytes.
    PrefetchAhead<kRecord, G>(tile, b);
    __m512 dw, ow = _mm512_setzero_ps();
    const uint8_t* quants;  // the block's 4 or 8 vectors of 64 bytes
    if constexpr (F == WeightType::kQ4_K) {
      // d sc and -dmin m of the 16 rows (exact in f32, as the portable reference's), the f16 d and
      // dmin converted once per super-block (chunks start at one).
      static_assert(kBlockChunk % (kQ4_KValues / kQuantBlock) == 0);
      const uint8_t* rec = tile + static_cast<size_t>(b / 8) * kQ4_KRecordBytes;
      const int64_t j = b % 8;
      if (j == 0) {
        super_d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec)));
        // -dmin: its sign flipped in integer lanes (this file is built without AVX-512 DQ's
        // float xor); (-dmin) m is -(dmin m) bit for bit, -0 where m is 0.
        super_ndmin = _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(_mm512_cvtph_ps(
                _mm256_load_si256(reinterpret_cast<const __m256i*>(rec + kQ4_KDminAt)))),
            _mm512_set1_epi32(INT32_MIN)));
      }
      const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
          _mm_load_si128(reinterpret_cast<const __m128i*>(rec + kQ4_KScalesAt + 16 * j))));
      const __m512 m = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
          _mm_load_si128(reinterpret_cast<const __m128i*>(rec + kQ4_KMinsAt + 16 * j))));
      dw = _mm512_mul_ps(super_d, sc);
      ow = _mm512_mul_ps(super_ndmin, m);
      quants = rec + kQ4_KQuantsAt + kQ4_KBlockQuantBytes * j;
    } else {
      const uint8_t* rec = tile + static_cast<size_t>(b) * kRecord;
      dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec)));
      if constexpr (F == WeightType::kQ4_1 || F == WeightType::kQ5_1) {
        ow = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec + 32)));
      } else if constexpr (F == WeightType::kQ4_0) {
        ow = dw;
      }
      quants = rec + 64;
    }
    __m512i wv[kQuads];
    if constexpr (F == WeightType::kQ8_0 || F == WeightType::kQ5_1) {
      for (int i = 0; i < kQuads; ++i) {
        wv[i] = _mm512_load_si512(quants + 64 * i);
      }
    } else {
      const __m512i mask = _mm512_set1_epi8(0x0f);
      for (int j = 0; j < 4; ++j) {
        const __m512i v = _mm512_load_si512(quants + 64 * j);
        wv[j] = _mm512_and_si512(v, mask);
        wv[j + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
      }
    }
    __m512i sum[G];
    for (int t = 0; t < G; ++t) sum[t] = _mm512_setzero_si512();
    for (int i = 0; i < kQuads; ++i) {
      for (int t = 0; t < G; ++t) {
        sum[t] = DpbusdBroadcast(sum[t], wv[i], x[t * nb + b].qs + 4 * i);
      }
    }
    for (int t = 0; t < G; ++t) {
      const BlockQ8A& xb = x[t * nb + b];
      __m512i s = sum[t];
      if constexpr (F == WeightType::kQ8_0)
        s = _mm512_sub_epi32(s, _mm512_set1_epi32(shifts[t * nb + b]));
      acc[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(xb.d)), acc[t]);
      if constexpr (F != WeightType::kQ8_0) {
        acc[t] = _mm512_fmadd_ps(ow, _mm512_set1_ps(os_factor * xb.s), acc[t]);
      }
    }
  }
}

// A Q6_K record's high-bit plane h shifted so that vector v's high 2 bits (v = 0-3 of the plane)
// sit at bits 4-5 of each byte, in out[v] (the packer's kQ6_KHighBitsShift; the rest of each
// byte still to be masked off).
inline void Q6_KHighBits(__m512i h, __m512i* out) {
  static_assert(kQ6_KHighBitsShift[0] == 4 && kQ6_KHighBitsShift[1] == 2 &&
                kQ6_KHighBitsShift[2] == 0 && kQ6_KHighBitsShift[3] == -2);
  out[0] = _mm512_slli_epi16(h, 4);
  out[1] = _mm512_slli_epi16(h, 2);
  out[2] = h;
  out[3] = _mm512_srli_epi16(h, 2);
}

// Q6_K's chunk, from its super-block records (kQ6_KRecordBytes: 16 f16 d, the blocks' 16 + 16 i8
// group scales, then per block 4 vectors of nibbles and 2 of high bits). The values 0..63 are
// unpacked into the 8 vectors Q6_K's 9-bit records held as bytes, so the products and the f32
// math are theirs: vectors 0-3 hold values 0-15 of the block (the first scale group), 4-7 values
// 16-31, each group's i32 sums scaled apart, in the portable reference's order
// (matmul_quant8.cc). The records are 6.625 bits per weight where the bytes were 9: a decode
// step streams the Q6_K layers and the output head from memory, and the unpacking's 26 logic
// instructions per block are shared by a group's tokens.
template <int G>
inline void PackedChunkQ6_K(const uint8_t* tile, int64_t nb, const BlockQ8A* x,
                            const int32_t* shifts, int64_t kb0, int64_t kb1, __m512* acc) {
  constexpr size_t kRecord = kRecordBytes<WeightType::kQ6_K>;
  static_assert(kBlockChunk % (kQ6_KValues / kQuantBlock) == 0);
  for (int t = 0; t < G; ++t) acc[t] = _mm512_setzero_ps();
  __m512 d = _mm512_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0f), high2 = _mm512_set1_epi8(0x30);
  for (int64_t b = kb0; b < kb1; ++b) {
    PrefetchAhead<kRecord, G>(tile, b);
    const uint8_t* rec = tile + static_cast<size_t>(b / 8) * kQ6_KRecordBytes;
    const int64_t j = b % 8;
    if (j == 0) d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(rec)));
    const __m512 ws0 = _mm512_mul_ps(
        d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
               _mm_load_si128(reinterpret_cast<const __m128i*>(rec + kQ6_KScalesAt + 32 * j)))));
    const __m512 ws1 = _mm512_mul_ps(
        d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(
               reinterpret_cast<const __m128i*>(rec + kQ6_KScalesAt + 32 * j + 16)))));
    const uint8_t* quants = rec + kQ6_KQuantsAt + kQ6_KBlockQuantBytes * j;
    __m512i wv[kQuads];
    {
      // Each plane's 4 values' high bits at bits 4-5, then (low & 0x0f) | (high & 0x30):
      // vpternlogd's A | (B & C) after the low bits' mask.
      constexpr int kOrAnd = 0xf8;
      __m512i high[2][4];
      Q6_KHighBits(_mm512_load_si512(quants + kQ6_KHighAt), high[0]);
      Q6_KHighBits(_mm512_load_si512(quants + kQ6_KHighAt + 64), high[1]);
      for (int i = 0; i < 4; ++i) {
        const __m512i l = _mm512_load_si512(quants + 64 * i);
        wv[i] = _mm512_ternarylogic_epi32(_mm512_and_si512(l, low4), high[0][i], high2, kOrAnd);
        wv[i + 4] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4),
                                              high[1][i], high2, kOrAnd);
      }
    }
    __m512 v[G];
    {
      __m512i sum[G];
      for (int t = 0; t < G; ++t) sum[t] = _mm512_setzero_si512();
      for (int i = 0; i < kQuads / 2; ++i) {
        for (int t = 0; t < G; ++t) {
          sum[t] = DpbusdBroadcast(sum[t], wv[i], x[t * nb + b].qs + 4 * i);
        }
      }
      for (int t = 0; t < G; ++t) {
        const __m512i s = _mm512_sub_epi32(sum[t], _mm512_set1_epi32(shifts[2 * (t * nb + b)]));
        v[t] = _mm512_mul_ps(_mm512_cvtepi32_ps(s), ws0);
      }
    }
    __m512i sum[G];
    for (int t = 0; t < G; ++t) sum[t] = _mm512_setzero_si512();
    for (int i = kQuads / 2; i < kQuads; ++i) {
      for (int t = 0; t < G; ++t) {
        sum[t] = DpbusdBroadcast(sum[t], wv[i], x[t * nb + b].qs + 4 * i);
      }
    }
    for (int t = 0; t < G; ++t) {
      const __m512i s = _mm512_sub_epi32(sum[t], _mm512_set1_epi32(shifts[2 * (t * nb + b) + 1]));
      v[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), ws1, v[t]);
      acc[t] = _mm512_fmadd_ps(v[t], _mm512_set1_ps(x[t * nb + b].d), acc[t]);
    }
  }
}

template <WeightType F, int G>
void PackedGroup(const uint8_t* tile, int64_t nb, const BlockQ8A* x, const int32_t* shifts,
                 float* out, int64_t ldo) {
  for (int64_t kb0 = 0; kb0 < nb; kb0 += kBlockChunk) {
    const int64_t kb1 = nb - kb0 < kBlockChunk ? nb : kb0 + kBlockChunk;
    __m512 acc[G];
    if constexpr (F == WeightType::kQ6_K) {
      PackedChunkQ6_K<G>(tile, nb, x, shifts, kb0, kb1, acc);
    } else {
      PackedChunk<F, G>(tile, nb, x, shifts, kb0, kb1, acc);
    }
    for (int t = 0; t < G; ++t) {
      float* o = out + t * ldo;
      if (kb0 == 0) {
        _mm512_storeu_ps(o, acc[t]);
      } else {
        _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), acc[t]));
      }
    }
  }
}

template <WeightType F>
void MatMul8Packed(const uint8_t* packed, int64_t k, const BlockQ8A* xq, int64_t n_tokens,
                   float* out, int64_t ldo, int64_t row_begin, int64_t row_end, int32_t* shifts) {
  constexpr size_t kRecord = kRecordBytes<F>;
  const int64_t nb = k / kQuantBlock;
  // Q8_0's and Q6_K's shifts for up to kVnni8TokensPerPass tokens at a time, in the caller's
  // scratch.
  constexpr int64_t kShiftsPerBlock = F == WeightType::kQ8_0 ? 1 : F == WeightType::kQ6_K ? 2 : 0;
  for (int64_t p0 = 0; p0 < n_tokens; p0 += kVnni8TokensPerPass) {
    const int64_t np = n_tokens - p0 < kVnni8TokensPerPass ? n_tokens - p0 : kVnni8TokensPerPass;
    if (F == WeightType::kQ8_0) ActivationSums(xq + p0 * nb, np, nb, shifts);
    if (F == WeightType::kQ6_K) ActivationHalfSums(xq + p0 * nb, np, nb, shifts);
    for (int64_t r0 = row_begin; r0 < row_end; r0 += 16) {
      const uint8_t* tile = packed + static_cast<size_t>(r0 / 16 * nb) * kRecord;
      for (int64_t t0 = 0; t0 < np; t0 += kGroup) {
        const BlockQ8A* x = xq + (p0 + t0) * nb;
        const int32_t* s = kShiftsPerBlock > 0 ? shifts + kShiftsPerBlock * t0 * nb : nullptr;
        float* o = out + (p0 + t0) * ldo + r0;
        switch (np - t0 < kGroup ? np - t0 : kGroup) {
          case 1:
            PackedGroup<F, 1>(tile, nb, x, s, o, ldo);
            break;
          case 2:
            PackedGroup<F, 2>(tile, nb, x, s, o, ldo);
            break;
          case 3:
            PackedGroup<F, 3>(tile, nb, x, s, o, ldo);
            break;
          case 4:
            PackedGroup<F, 4>(tile, nb, x, s, o, ldo);
            break;
          case 5:
            PackedGroup<F, 5>(tile, nb, x, s, o, ldo);
            break;
          case 6:
            PackedGroup<F, 6>(tile, nb, x, s, o, ldo);
            break;
          case 7:
            PackedGroup<F, 7>(tile, nb, x, s, o, ldo);
            break;
          default:
            PackedGroup<F, 8>(tile, nb, x, s, o, ldo);
            break;
        }
      }
    }
  }
}

}  // namespace

void MatMulQuant8PackedAvx512Vnni(WeightType type, const uint8_t* packed, int64_t k,
                                  const BlockQ8A* xq, int64_t n_tokens, float* out, int64_t ldo,
                                  int64_t row_begin, int64_t row_end, int32_t* shifts) {
  switch (type) {
    case WeightType::kQ4_0:
      return MatMul8Packed<WeightType::kQ4_0>(packed, k, xq, n_tokens, out, ldo, row_begin, row_end,
                                              shifts);
    case WeightType::kQ4_1:
      return MatMul8Packed<WeightType::kQ4_1>(packed, k, xq, n_tokens, out, ldo, row_begin, row_end,
                                              shifts);
    case WeightType::kQ8_0:
      return MatMul8Packed<WeightType::kQ8_0>(packed, k, xq, n_tokens, out, ldo, row_begin, row_end,
                                              shifts);
    case WeightType::kQ5_1:
      return MatMul8Packed<WeightType::kQ5_1>(packed, k, xq, n_tokens, out, ldo, row_begin, row_end,
                                              shifts);
    case WeightType::kQ6_K:
      return MatMul8Packed<WeightType::kQ6_K>(packed, k, xq, n_tokens, out, ldo, row_begin, row_end,
                                              shifts);
    case WeightType::kQ4_K:
      return MatMul8Packed<WeightType::kQ4_K>(packed, k, xq, n_tokens, out, ldo, row_begin, row_end,
                                              shifts);
    default:
      return;
  }
}

void QuantizeRowQ8AAvx512(const float* x, int64_t k, BlockQ8A* out) {
  for (int64_t b = 0; b < k / kQuantBlock; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + b * kQuantBlock);
    const __m512 x1 = _mm512_loadu_ps(x + b * kQuantBlock + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float inv = amax > 0 ? static_cast<float>(kQ8Max) / amax : 0.0f;
    const __m512 vinv = _mm512_set1_ps(inv);
    // Round to nearest even (the default rounding mode), as nearbyint in the portable quantizer.
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vinv));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vinv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs + 16), _mm512_cvtepi32_epi8(q1));
    const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    out[b].d = amax / static_cast<float>(kQ8Max);
    out[b].s = out[b].d * static_cast<float>(sum);
  }
}

}  // namespace streamd::kernels::cpu::internal
