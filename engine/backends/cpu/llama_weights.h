// Views of a Llama model's tensors inside the mapped GGUF file, shape- and type-checked once
// at load so the forward pass never re-validates. Weights are read in place: the GgufFile must
// outlive the LlamaWeights. The copies: matrices of the types the products do not run as stored
// (K-quants, Q5_x, IQ4_x), converted at load into Q4_1 or Q8_0 (kernels/cpu/repack_quant.h),
// and on CPUs with AMX, the quantized matrices' AMX-packed copies (AddAmxPackedCopies).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <variant>
#include <vector>

#include "engine/backends/cpu/cpu_tuning.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/llama_config.h"
#include "engine/util/huge_pages.h"
#include "engine/util/status.h"
#include "kernels/cpu/dequantize_reference.h"
#include "kernels/cpu/matmul.h"

namespace streamd {

// Rows of one type: row r at data + r * row_bytes.
struct Int8Rows {
  kernels::cpu::WeightType type = kernels::cpu::WeightType::kF32;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
};

// A [rows, cols] matrix in GGUF block layout; row r starts at data + r * row_bytes.
struct WeightMatrix {
  kernels::cpu::WeightType type = kernels::cpu::WeightType::kF32;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features (k)
  // The matrix in the order the AMX level reads it (kernels::cpu::PackForAmx), or null.
  const uint8_t* amx_packed = nullptr;
  // The level its products run at per token bucket (a build plan's choice), or -1: the active
  // level (CpuTuning, LlamaModel::ApplyTuning).
  std::array<int8_t, kTokenBuckets> isa_by_bucket = {-1, -1, -1, -1, -1};
  // Per token bucket: whether its products take 8-bit activations (kernels::cpu::MatMulRows8),
  // and the matrix's copy for that kernel (kernels::cpu::PackForVnni8), or null.
  std::array<bool, kTokenBuckets> int8_by_bucket = {};
  const uint8_t* vnni8_packed = nullptr;
  // The file's own rows for the 8-bit products and their copy, where the products above read a
  // conversion of them: a Q4_K tensor's (type kQ4_K), whose 8-bit copy holds 4.625 bits per
  // weight where that of its Q4_1 conversion holds 5, with its block scales exact
  // (docs/PERFORMANCE.md: the Qwen2.5-Coder-1.5B's plan 52 MB smaller, its 8-bit perplexity
  // 0.12% lower). data null: the 8-bit products read `data` as `type` (Int8RowsOf).
  Int8Rows int8_source;
  // The file stores it as a K-quant or IQ4 type, which llama.cpp multiplies by 8-bit activations
  // (its Q8_K and Q8_0 blocks): without a plan such a matrix takes them too where the 8-bit
  // kernel is fast (K_QUANT_DEFAULTS, engine/backends/cpu/k_quant_defaults.h).
  bool k_quant_file = false;
};

// The rows the 8-bit products of `m` read (kernels::cpu::MatMulRows8, PackForVnni8) and their
// type: its int8_source where it has one, else its own.
inline Int8Rows Int8RowsOf(const WeightMatrix& m) {
  if (m.int8_source.data != nullptr) return m.int8_source;
  return {m.type, m.data, m.row_bytes};
}

// The token embedding table: read one row per token, never by a product. Untied from the output
// head, it stays in the file's own type, and each row is dequantized as it is looked up (a
// converted copy would hold the whole table in memory for a few rows a step: 138 MiB of Q8_0 for
// Qwen2.5-Coder-0.5B's Q5_0 table). Its rows are then read from the file (GgufFile::CopyOut),
// not through the mapping: reading a row there maps the 16 pages around it, and 2048 random
// tokens mapped 70 of that table's 89 MiB into the process's RSS. Tied, it is the head's rows,
// in the format the head's products read.
struct EmbeddingTable {
  // The format of the rows: a product format, or a file type read by the reference dequantizer.
  std::variant<kernels::cpu::WeightType, kernels::ConvertedQuant> type =
      kernels::cpu::WeightType::kF32;
  const uint8_t* data = nullptr;  // row r at data + r * row_bytes
  size_t row_bytes = 0;
  int64_t rows = 0;  // vocabulary
  int64_t cols = 0;  // dim
  // Where rows are copied from (CopyOut) before they are dequantized, or null: read `data`.
  const gguf::GgufFile* file = nullptr;

  // Writes row r's cols floats to out. r must be in [0, rows). Thread-safe.
  void DequantizeRow(int64_t r, float* out) const;
};

struct LlamaLayerWeights {
  const float* attn_norm = nullptr;  // [dim]
  WeightMatrix wq;                   // [q_dim, dim]
  WeightMatrix wk;                   // [kv_dim, dim]
  WeightMatrix wv;                   // [kv_dim, dim]
  WeightMatrix wo;                   // [dim, q_dim]
  // Family extras (model_family.h), null when the family has none: q/k/v biases (qwen2), the
  // per-head RMSNorm weights of q and k (qwen3, gemma3) and the norms of the attention's and the
  // FFN's outputs (gemma3).
  const float* q_bias = nullptr;          // [q_dim]
  const float* k_bias = nullptr;          // [kv_dim]
  const float* v_bias = nullptr;          // [kv_dim]
  const float* q_norm = nullptr;          // [head_dim]
  const float* k_norm = nullptr;          // [head_dim]
  const float* post_attn_norm = nullptr;  // [dim]
  const float* post_ffn_norm = nullptr;   // [dim]
  const float* ffn_norm = nullptr;        // [dim]
  WeightMatrix w_gate;                    // [ffn_dim, dim]
  WeightMatrix w_up;                      // [ffn_dim, dim]
  WeightMatrix w_down;                    // [dim, ffn_dim]
};

struct LlamaWeights {
  EmbeddingTable token_embedding;  // [vocab, dim]
  std::vector<LlamaLayerWeights> layers;
  const float* output_norm = nullptr;  // [dim]
  WeightMatrix output;                 // [vocab, dim]; token_embedding's rows when tied
  // Bytes of every tensor above that a decode step reads whole: all but an untied embedding
  // table, whose size in the file is embedding_bytes (0 when tied: then it is the output head,
  // read whole).
  uint64_t total_bytes = 0;
  uint64_t embedding_bytes = 0;

  // The matrices converted at load (their WeightMatrix::data points here): memory on top of the
  // file mapping, whose pages of those tensors are read once and then unmapped (left to the
  // page cache, out of the process's RSS).
  std::vector<std::unique_ptr<uint8_t, FreeDeleter>> converted_storage;
  uint64_t converted_bytes = 0;

  std::unique_ptr<uint8_t, FreeDeleter> amx_storage;  // every amx_packed copy
  uint64_t amx_packed_bytes = 0;
  // The vnni8_packed copies made so far (AddVnni8PackedCopies), kept once made.
  std::vector<std::unique_ptr<uint8_t, FreeDeleter>> vnni8_storage;
  uint64_t vnni8_packed_bytes = 0;
};

// Whether a build plan serves a layer matrix of this product type and shape from the plan's own
// 8-bit copies alone (ServedByVnni8CopyAlone once the plan is applied); asked at load.
using ServedByPlanCopies =
    std::function<bool(kernels::cpu::WeightType type, int64_t rows, int64_t cols)>;

// Binds every tensor the forward pass reads. A tensor of a type the products do not read is
// converted into memory of its own (converted_storage), except a layer matrix that `served`
// says a plan's 8-bit copies serve alone: its converted rows would be freed unread once the plan
// is applied (ReleaseConvertedRowsServedByVnni8Copies), so it is not converted at all and its
// `data` is null from the start. That keeps the converted rows and the plan's copies from
// being held together while the model loads. Likewise a layer matrix whose 8-bit copy is packed
// from the file's own rows (a Q4_K tensor's: WeightMatrix::int8_source) when `packed_from_file`,
// asked with that type, says the copy will serve it alone (ApplyKQuantDefaults, without a plan).
StatusOr<LlamaWeights> BindLlamaWeights(const gguf::GgufFile& file, const LlamaConfig& config,
                                        const ServedByPlanCopies& served = nullptr,
                                        const ServedByPlanCopies& packed_from_file = nullptr);

// Whether every product of `m` reads only its 8-bit packed copy: every token bucket at 8 bits,
// the copy made, and this CPU's fast 8-bit kernel, which reads whole 16-row tiles of the copy
// (kernels::cpu::MatMulRows8; the engine cuts rows in multiples of 48).
bool ServedByVnni8CopyAlone(const WeightMatrix& m);
// The part of that which depends on the shape alone: this CPU's fast 8-bit kernel for the type,
// and a shape its copy takes (what a plan's loader asks before any copy exists).
bool Vnni8CopyCanServeAlone(kernels::cpu::WeightType type, int64_t rows, int64_t cols);

// Frees the load-time conversion (converted_storage) of every layer matrix that
// ServedByVnni8CopyAlone: with a plan that runs the layers at 8 bits, the converted rows of a
// K-quant model would otherwise sit in memory unread beside their packed copies (Qwen2.5-Coder
// -0.5B Q4_K_M: 339 MiB). Such a matrix's `data` becomes null; LlamaModel::ApplyTuning then
// refuses any tuning that would read it. The output head and the embedding table are never
// released (the embedding lookup reads rows). Returns the bytes freed.
uint64_t ReleaseConvertedRowsServedByVnni8Copies(LlamaWeights& weights);

// Gives every matrix that kernels::cpu::AmxPackable accepts (the quantized projections and output
// head) its AMX-packed copy, in one allocation on huge pages. Worth it only where the AMX level
// runs: it reads the copies for batches of 6+ tokens (a decode step of many sessions, prefill)
// instead of the GGUF rows, which one-token steps still read. Memory: those tensors once more
// (98 MB = 94 MiB for SmolLM2-135M Q4_1: 66 MB of projections, 32 MB of Q8_0 head). Without
// memory for them the model runs as before, on the GGUF rows. Measured in docs/PERFORMANCE.md.
void AddAmxPackedCopies(LlamaWeights& weights);

// Gives every matrix that some token bucket runs with 8-bit activations (int8_by_bucket) and
// that kernels::cpu::Vnni8Packable accepts its PackForVnni8 copy, unless it has one: the 8-bit
// kernel then reads 16 rows per vector (same bits). Memory: those matrices once more. Without
// memory for a copy that matrix runs on its GGUF rows, as before. `packed` (optional) is told of
// each matrix once its copy is made: its source rows may then leave memory (ApplyKQuantDefaults).
using MatrixPacked = std::function<void(const WeightMatrix& m)>;
void AddVnni8PackedCopies(LlamaWeights& weights, const MatrixPacked& packed = nullptr);

// What a build plan stores of those copies: the ones of the matrices some bucket runs at 8 bits
// (and Vnni8Packable), concatenated in ProductMatrices order. Vnni8CopiesBlob is empty when one
// of them is missing (no memory for it at packing).
uint64_t Vnni8CopiesBytes(const LlamaWeights& weights);
// The same for matrices (ProductMatrices order) by their own int8_by_bucket: the size a tuning
// would need, from scratch copies of the matrices with its flags (LlamaModel::ApplyTuning).
uint64_t Vnni8CopiesBytes(std::span<const WeightMatrix* const> matrices);
std::vector<uint8_t> Vnni8CopiesBlob(const LlamaWeights& weights);
// Installs such a blob (a plan's) instead of packing: copied once onto huge pages. Call with the
// 8-bit choices in place (int8_by_bucket). Errors: a size other than Vnni8CopiesBytes.
// Called with each range of the source once it is copied, so that the pages of a file mapping
// can be dropped as the copy goes (PlanFile::ReleasePages) instead of all being resident beside
// the whole copy at its end.
using SourceCopied = std::function<void(const uint8_t* begin, uint64_t bytes)>;
Status UsePrepackedVnni8Copies(LlamaWeights& weights, const uint8_t* bytes, uint64_t size,
                               const SourceCopied& copied = nullptr);

// The matrices products run over, in a fixed order: the output head, then each layer's
// projections (AddAmxPackedCopies lays the copies out in it; tuners and plans walk it).
std::vector<WeightMatrix*> ProductMatrices(LlamaWeights& weights);
std::vector<const WeightMatrix*> ProductMatrices(const LlamaWeights& weights);

// Bytes of weights a decode step (the 1-token bucket) reads: total_bytes, with each matrix that
// bucket runs at 8 bits counted as its PackForVnni8 copy, which is what the product reads (Q6_K's
// is 1.37x its rows; the 4-bit formats' the same size). Rooflines divide by it.
uint64_t DecodeReadBytes(const LlamaWeights& weights);

// Drops the pages wholly inside [data, data + bytes) of a read-only private file mapping from the
// process (MADV_DONTNEED): a later read faults the same bytes back in from the file. Only the
// pages wholly inside the range, so a neighbour read in place keeps its pages. Never for
// anonymous memory (GgufFile::FromBuffer), where it would zero them. Advice only.
void ReleaseMappedPages(const uint8_t* data, size_t bytes);

// Bytes AddAmxPackedCopies allocates for these weights (0: nothing to pack).
uint64_t AmxPackedCopiesBytes(const LlamaWeights& weights);

// Copies made earlier instead of packing at load: a build plan's (engine/build_plan), which stores
// the bytes AddAmxPackedCopies made, in its order. They are copied once onto huge pages (the
// tile loops' TLB reach; a file mapping has 4 KiB pages), which takes a fraction of packing.
// Errors: a size other than AmxPackedCopiesBytes (another model or layout).
Status UsePrepackedAmxCopies(LlamaWeights& weights, const uint8_t* bytes, uint64_t size);

}  // namespace streamd
