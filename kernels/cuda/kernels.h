// Every CUDA kernel launcher of streamd, in one plain C++ header (no CUDA types beyond the
// runtime API's stream and error), so engine/ compiles with the host compiler. One family per
// .cu file, kernel and launcher together (kernels `FooKernel`, launchers `Foo`).
//
// Launcher contract (../shared/STYLE.md 3):
//   - pointers are device pointers unless a comment says otherwise; f16 values travel as
//     uint16_t bit patterns; shapes are in the comment on each pointer;
//   - shapes are validated up front (`...CanImplement` returns nullptr or the reason);
//   - the caller owns every buffer, workspace included; the stream comes last;
//   - the launch is checked: the return value is cudaGetLastError() after the launch (an
//     asynchronous fault surfaces at the caller's next synchronizing call).
// Launchers never synchronize, so a sequence of them can be captured into a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/paged_kv.h"

namespace streamd::kernels::cuda {

// ---- embedding.cu -------------------------------------------------------------------------
// out[t, :] = float(table[tokens[t], :]). Token ids must be in [0, vocab) (checked on the host).
cudaError_t EmbeddingLookup(const uint16_t* table,  // [vocab, dim] f16
                            const int32_t* tokens,  // [n]
                            int32_t n, int32_t dim,
                            float* out,  // [n, dim]
                            cudaStream_t stream);

// ---- rmsnorm.cu ---------------------------------------------------------------------------
// Residual add fused with RMSNorm, per token t < n:
//   if delta: x[t] += delta[t]            (the residual stream stays f32)
//   y = x[t] / sqrt(mean(x[t]^2) + eps) * weight
//   row = out_rows ? out_rows[t] : t;  if row >= 0: out[row] = f16(y)
// out_rows lets the last norm write only the tokens whose logits are wanted, packed.
cudaError_t AddRmsNorm(float* x,             // [n, dim], updated in place when delta
                       const float* delta,   // [n, dim] or nullptr
                       const float* weight,  // [dim]
                       float eps, int32_t n, int32_t dim,
                       const int32_t* out_rows,  // [n] or nullptr
                       uint16_t* out,            // [rows, dim] f16
                       cudaStream_t stream);

// ---- rope_write_kv.cu ---------------------------------------------------------------------
// Rotary embedding (Llama pair layout (2i, 2i+1)), angles computed in double and reduced
// modulo 2*pi exactly as the CPU backend does (engine/model/rope.cc), so positions may grow
// without bound, and the append of the new keys and values to the paged cache. Per token t
// (row t of qkv, row stride ld floats: q | k | v):
//   q_sink[t] = rotate(q[t], cache_positions[t])   (the query's place in the rebuilt cache,
//                                                   used against sink keys)
//   q[t]      = rotate(q[t], positions[t])         (in place; used against window keys)
//   K = rotate(k[t], positions[t]) and V = v[t] go as f16 into the session's paged block
//   and slot of text position positions[t] (SinkWindowTable::Locate; keys are stored
//   rotated); the k and v columns of qkv are left as they were.
struct KvAppend {
  KvPoolLayout layout;
  uint16_t* layer_kv = nullptr;             // the layer's base in the pool
  const SinkWindowTable* tables = nullptr;  // [n_seqs], block ids in device memory
  const int32_t* seq_of = nullptr;          // [n]
};
cudaError_t RopeAndWriteKv(float* qkv,  // [n, ld]: q at column 0, k at n_heads * head_dim
                           int64_t ld, int32_t n, int32_t n_heads, int32_t head_dim,
                           const int64_t* positions,        // [n] text positions
                           const int64_t* cache_positions,  // [n] SinkWindowTable::CachePosition
                           const double* inv_freq,  // [head_dim / 2], scaling already applied
                           float* q_sink,           // [n, n_heads * head_dim]
                           const KvAppend& kv, cudaStream_t stream);

// ---- decode_attention.cu / prefill_attention.cu --------------------------------------------
// Which session and text position each query token has; all device pointers.
struct AttentionBatch {
  const SinkWindowTable* tables = nullptr;  // [n_seqs]
  const int32_t* seq_of = nullptr;          // [n_tokens]
  const int64_t* positions = nullptr;       // [n_tokens]
  int32_t n_tokens = 0;
};
// Queries: q [n_tokens, n_heads * head_dim] rotated by text position (row stride q_ld),
// q_sink [n_tokens, n_heads * head_dim] rotated by cache position (contiguous). Query head h
// reads kv head h / (n_heads / n_kv_heads) (GQA). Token t at position p attends to its
// visible sinks [0, VisibleSinks(p)) with q_sink and its window [WindowStart(p), p] with q.
// Output f16 [n_tokens, n_heads * head_dim], softmax(scale * q.K) V.
// Precondition: every table's span is 0. These kernels have no native sliding window (the
// SinkWindowTable::span of Gemma 3's local layers, which the CPU kernels honour); the tables are
// in device memory, so the launchers cannot refuse one: a kernel that reads a table with
// span != 0 traps (a sticky launch failure: the step fails and the device is unusable, like any
// broken invariant) rather than attend over a key set the model was not trained on. The CUDA
// backend refuses such models at load (CudaModel::Init runs the plain Llama layer only) and its
// tables (PlannedSequence::Table) never set span.
struct AttentionShape {
  int32_t n_heads = 0;
  int32_t head_dim = 0;  // 64 or 128
  float scale = 1.0f;
};
// nullptr when the kernels support this shape, else the reason (head_dim not 64/128, ...).
const char* AttentionCanImplement(const KvPoolLayout& layout, const AttentionShape& shape);

// Decode: one query per token. Each (token, kv head) is split across `n_splits` thread blocks
// of `keys_per_split` keys (key index i: sinks first, then the window), each keeping an online
// softmax state; a second kernel merges them by log-sum-exp. n_splits * keys_per_split must
// cover every token's visible keys (<= S + W). The workspace holds the partial states.
size_t DecodeAttentionWorkspaceBytes(int32_t n_tokens, int32_t n_heads, int32_t head_dim,
                                     int32_t n_splits);
// Splits for a batch: about three thread blocks per SM (fewer splits stream better: each adds
// partial states and a merge), each split at least 64 keys and a whole number of 16-key tiles.
// Returns n_splits; *keys_per_split gets the matching split length.
int32_t ChooseDecodeSplits(int32_t n_tokens, int32_t n_kv_heads, int32_t max_keys, int32_t sm_count,
                           int32_t* keys_per_split);
cudaError_t DecodeAttention(KvPoolLayout layout, const uint16_t* layer_kv, AttentionBatch batch,
                            const float* q, int64_t q_ld, const float* q_sink, AttentionShape shape,
                            int32_t n_splits, int32_t keys_per_split, void* workspace,
                            uint16_t* out, cudaStream_t stream);

// Chunked prefill: a tile is up to PrefillTileQueries(group) consecutive tokens of one
// session (first_token .. first_token + n_tokens - 1 in the batch); one thread block per
// (tile, kv head) streams the union of the tile's keys through shared memory once and masks
// per query (its own sinks and window; later tokens of the chunk are not seen).
struct PrefillTile {
  int32_t first_token = 0;
  int32_t n_tokens = 0;
};
int32_t PrefillTileQueries(int32_t group);  // group = n_heads / n_kv_heads
cudaError_t PrefillAttention(KvPoolLayout layout, const uint16_t* layer_kv, AttentionBatch batch,
                             const PrefillTile* tiles,  // [n_tiles]
                             int32_t n_tiles, const float* q, int64_t q_ld, const float* q_sink,
                             AttentionShape shape, uint16_t* out, cudaStream_t stream);

// ---- swiglu.cu ----------------------------------------------------------------------------
// out[t, i] = f16(silu(gate_up[t, i]) * gate_up[t, ffn + i]), silu(x) = x / (1 + e^-x).
cudaError_t SwiGlu(const float* gate_up,  // [n, 2 * ffn]: gate then up
                   int32_t n, int32_t ffn,
                   uint16_t* out,  // [n, ffn] f16
                   cudaStream_t stream);

// ---- sampling.cu --------------------------------------------------------------------------
// out[r] = the first index of the largest logit of row r (NaNs never win).
cudaError_t ArgmaxRows(const float* logits,  // [rows, vocab]
                       int32_t rows, int32_t vocab, int32_t* out, cudaStream_t stream);

inline constexpr int32_t kMaxTopK = 1024;
struct SampleParams {
  float temperature = 1.0f;  // > 0
  int32_t top_k = 40;        // [1, kMaxTopK]
  float top_p = 1.0f;        // (0, 1]
  float uniform = 0.5f;      // a draw from [0, 1), made by the caller's seeded generator
};
// Per row: the top_k largest logits (ties: lower index first), sorted; probabilities
// softmax(logit / temperature) over them; the shortest prefix whose mass reaches top_p of the
// total is kept; the token is the first whose cumulative mass exceeds uniform * kept mass.
const char* SampleCanImplement(const SampleParams& params);
cudaError_t SampleTopKTopP(const float* logits,  // [rows, vocab]
                           int32_t rows, int32_t vocab,
                           const SampleParams* params,  // [rows]
                           int32_t* out, cudaStream_t stream);

// ---- fill.cu ------------------------------------------------------------------------------
// Synthetic weights made on the device (an 8B model's 16 GB never cross PCIe): element i is
// uniform in [-bound, bound) from a hash of (seed, i), so a tensor is reproducible.
cudaError_t FillUniformF16(uint16_t* out, int64_t n, float bound, uint64_t seed,
                           cudaStream_t stream);
cudaError_t FillF32(float* out, int64_t n, float value, cudaStream_t stream);
// out[i] = f16(in[i]).
cudaError_t ConvertF32ToF16(const float* in, int64_t n, uint16_t* out, cudaStream_t stream);

}  // namespace streamd::kernels::cuda
