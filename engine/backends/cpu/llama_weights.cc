#include "engine/backends/cpu/llama_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/cpu/repack_quant.h"

namespace streamd {
namespace {

using kernels::ConvertedQuant;
using kernels::cpu::WeightType;

// How a tensor type reaches the products: as stored (`direct`), or converted at load (`convert`).
struct ProductFormat {
  std::optional<WeightType> direct;
  std::optional<ConvertedQuant> convert;
};

ProductFormat FormatOf(gguf::TensorType type) {
  switch (type) {
    case gguf::TensorType::kF32:
      return {WeightType::kF32, {}};
    case gguf::TensorType::kF16:
      return {WeightType::kF16, {}};
    case gguf::TensorType::kBF16:
      return {WeightType::kBF16, {}};
    case gguf::TensorType::kQ4_0:
      return {WeightType::kQ4_0, {}};
    case gguf::TensorType::kQ4_1:
      return {WeightType::kQ4_1, {}};
    case gguf::TensorType::kQ8_0:
      return {WeightType::kQ8_0, {}};
    case gguf::TensorType::kQ5_0:  // read as stored: the products have a native Q5_0 kernel
      return {WeightType::kQ5_0, {}};
    case gguf::TensorType::kQ5_1:  // read as stored: the products have a native Q5_1 kernel
      return {WeightType::kQ5_1, {}};
    case gguf::TensorType::kQ2_K:
      return {{}, ConvertedQuant::kQ2_K};
    case gguf::TensorType::kQ3_K:
      return {{}, ConvertedQuant::kQ3_K};
    case gguf::TensorType::kQ4_K:
      return {{}, ConvertedQuant::kQ4_K};
    case gguf::TensorType::kQ5_K:
      return {{}, ConvertedQuant::kQ5_K};
    case gguf::TensorType::kQ6_K:  // read as stored: the products have a native Q6_K kernel
      return {WeightType::kQ6_K, {}};
    case gguf::TensorType::kIQ4_NL:
      return {{}, ConvertedQuant::kIQ4_NL};
    case gguf::TensorType::kIQ4_XS:
      return {{}, ConvertedQuant::kIQ4_XS};
  }
  return {};
}

// Repacks a [rows, cols] tensor of a converted type (repack_quant.h) into `out`, rows split
// across the machine's cores: a load of a 0.5B-parameter K-quant model converts ~500M values.
Status ConvertTensor(const gguf::TensorInfo& t, ConvertedQuant type, int64_t rows, int64_t cols,
                     uint8_t* out) {
  const kernels::QuantLayout layout = kernels::LayoutOf(type);
  // The reader's block traits (gguf_types.cc) and the kernels' layouts describe the same format.
  if (layout.block_bytes * (cols / layout.block_values) != static_cast<int64_t>(t.row_bytes())) {
    return InternalError("tensor '" + t.name + "': the GGUF reader's row size of " + layout.name +
                         " differs from the converter's");
  }
  const int64_t n_threads =
      std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(1, rows / 64));
  std::vector<char> ok(static_cast<size_t>(n_threads), 0);
  std::vector<std::thread> threads;
  for (int64_t i = 0; i < n_threads; ++i) {
    threads.emplace_back([&, i] {
      ok[i] = kernels::RepackRows(type, t.data, t.row_bytes(), cols, rows * i / n_threads,
                                  rows * (i + 1) / n_threads, out);
    });
  }
  for (std::thread& th : threads) th.join();
  if (std::find(ok.begin(), ok.end(), 0) != ok.end()) {
    std::string target = WeightTypeName(kernels::RepackTarget(type));  // "q4_1" -> "Q4_1"
    std::transform(target.begin(), target.end(), target.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    return InvalidArgumentError("tensor '" + t.name + "' of type " + layout.name +
                                " has a block scale whose converted value does not fit an f16 "
                                "(it is converted to " +
                                target + " at load)");
  }
  return OkStatus();
}

// Unmaps the file pages of a tensor that was converted at load: the products read only the copy,
// so keeping the source mapped would count the tensor twice in the process's RSS (a Q4_K_M
// 0.5B model: ~390 MB of mapped source beside its copies).
void ReleaseSourcePages(const gguf::TensorInfo& t) {
  ReleaseMappedPages(t.data, static_cast<size_t>(t.size_bytes));
}

std::string ShapeString(int64_t cols, int64_t rows) {
  return "[" + std::to_string(cols) + ", " + std::to_string(rows) + "]";
}

class Binder {
 public:
  Binder(const gguf::GgufFile& file, LlamaWeights& w, const ServedByPlanCopies& packed_from_file)
      : file_(file), packed_from_file_(packed_from_file), total_(w.total_bytes), weights_(w) {}

  // Tensor `name`, present with shape [cols, rows].
  StatusOr<const gguf::TensorInfo*> Find2d(const std::string& name, int64_t cols, int64_t rows) {
    const gguf::TensorInfo* t = file_.FindTensor(name);
    if (t == nullptr) return InvalidArgumentError("tensor '" + name + "' is missing");
    if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows) {
      return InvalidArgumentError("tensor '" + name + "' has the wrong shape (expected " +
                                  ShapeString(cols, rows) + ")");
    }
    return t;
  }

  // `served`: a layer matrix that a plan's 8-bit copies serve alone is not converted, nor one
  // that an 8-bit copy packed from the file's own rows will serve alone (see BindLlamaWeights).
  StatusOr<WeightMatrix> Matrix(const std::string& name, int64_t cols, int64_t rows,
                                const ServedByPlanCopies* served = nullptr) {
    STREAMD_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, Find2d(name, cols, rows));
    const ProductFormat format = FormatOf(t->type);
    if (format.direct) {
      total_ += t->size_bytes;
      WeightMatrix m{*format.direct, t->data, static_cast<size_t>(t->row_bytes()), rows, cols};
      m.k_quant_file = t->type == gguf::TensorType::kQ6_K;
      return m;
    }
    if (!format.convert) {  // the reader accepts no other type
      return UnimplementedError("tensor '" + name + "' has type " +
                                gguf::TensorTypeName(static_cast<uint32_t>(t->type)) +
                                ", which matrix products do not support");
    }
    // Converted once into memory of our own; the products then read only the copy.
    const WeightType target = kernels::RepackTarget(*format.convert);
    const size_t row_bytes = kernels::cpu::WeightRowBytes(target, cols);
    const size_t bytes = row_bytes * static_cast<size_t>(rows);
    WeightMatrix m{target, nullptr, row_bytes, rows, cols};
    m.k_quant_file = true;  // every converted type is a K-quant or IQ4 (FormatOf)
    if (*format.convert == ConvertedQuant::kQ4_K) {
      // Its 8-bit copy is packed from the file's rows (Q4_K's records), not from these.
      m.int8_source = {WeightType::kQ4_K, t->data, static_cast<size_t>(t->row_bytes())};
    }
    const bool by_plan = served != nullptr && *served && (*served)(target, rows, cols);
    const bool by_file_rows = served != nullptr && m.int8_source.data != nullptr &&
                              packed_from_file_ &&
                              packed_from_file_(m.int8_source.type, rows, cols);
    if (by_plan || by_file_rows) {
      total_ += bytes;  // what a step reads at 12 bits; DecodeReadBytes counts the 8-bit copy
      return m;
    }
    std::unique_ptr<uint8_t, FreeDeleter> copy(
        static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    if (!copy) {
      return ResourceExhaustedError("no memory for the " + std::to_string(bytes) +
                                    " bytes of tensor '" + name + "' converted at load");
    }
    STREAMD_RETURN_IF_ERROR(ConvertTensor(*t, *format.convert, rows, cols, copy.get()));
    if (file_.is_file_mapping()) ReleaseSourcePages(*t);  // never a caller's heap buffer
    total_ += bytes;
    weights_.converted_bytes += bytes;
    m.data = copy.get();
    weights_.converted_storage.push_back(std::move(copy));
    return m;
  }

  // The untied embedding table: in place in the file, in its own type (EmbeddingTable).
  StatusOr<EmbeddingTable> Table(const std::string& name, int64_t cols, int64_t rows) {
    STREAMD_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, Find2d(name, cols, rows));
    const ProductFormat format = FormatOf(t->type);
    EmbeddingTable table;
    if (format.direct) {
      table.type = *format.direct;
    } else if (format.convert) {
      const kernels::QuantLayout layout = kernels::LayoutOf(*format.convert);
      if (layout.block_bytes * (cols / layout.block_values) !=
          static_cast<int64_t>(t->row_bytes())) {
        return InternalError("tensor '" + name + "': the GGUF reader's row size of " + layout.name +
                             " differs from the dequantizer's");
      }
      table.type = *format.convert;
    } else {
      return UnimplementedError("tensor '" + name + "' has type " +
                                gguf::TensorTypeName(static_cast<uint32_t>(t->type)) +
                                ", which the embedding lookup does not support");
    }
    table.data = t->data;
    table.row_bytes = static_cast<size_t>(t->row_bytes());
    table.rows = rows;
    table.cols = cols;
    if (file_.is_file_mapping()) table.file = &file_;
    return table;
  }

  StatusOr<const float*> Vector(const std::string& name, int64_t n) {
    const gguf::TensorInfo* t = file_.FindTensor(name);
    if (t == nullptr) return InvalidArgumentError("tensor '" + name + "' is missing");
    if (t->type != gguf::TensorType::kF32 || t->num_elements != n) {
      return InvalidArgumentError("tensor '" + name + "' must be F32 with " + std::to_string(n) +
                                  " elements");
    }
    total_ += t->size_bytes;
    return reinterpret_cast<const float*>(t->data);
  }

 private:
  const gguf::GgufFile& file_;
  const ServedByPlanCopies& packed_from_file_;
  uint64_t& total_;
  LlamaWeights& weights_;
};

}  // namespace

namespace {

template <class Weights>
auto MatricesOf(Weights& w) {
  using Matrix = std::conditional_t<std::is_const_v<Weights>, const WeightMatrix, WeightMatrix>;
  std::vector<Matrix*> matrices{&w.output};
  for (auto& l : w.layers) {
    for (Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      matrices.push_back(m);
    }
  }
  return matrices;
}

template <class Matrix>
uint64_t PackedBytes(const std::vector<Matrix*>& matrices) {
  uint64_t total = 0;
  for (const WeightMatrix* m : matrices) {
    total += kernels::cpu::AmxPackedBytes(m->type, m->rows, m->cols);
  }
  return total;
}

// Points every packable matrix at its copy inside w.amx_storage.
void AssignPackedCopies(const std::vector<WeightMatrix*>& matrices, uint8_t* at) {
  for (WeightMatrix* m : matrices) {
    const size_t bytes = kernels::cpu::AmxPackedBytes(m->type, m->rows, m->cols);
    if (bytes == 0) continue;
    m->amx_packed = at;
    at += bytes;
  }
}

}  // namespace

void EmbeddingTable::DequantizeRow(int64_t r, float* out) const {
  const uint8_t* row = data + static_cast<size_t>(r) * row_bytes;
  if (file != nullptr) {
    thread_local std::vector<uint8_t> copy;
    if (copy.size() < row_bytes) copy.resize(row_bytes);
    // A failed read falls back to the mapping, which holds the same bytes.
    if (file->CopyOut(row, row_bytes, copy.data())) row = copy.data();
  }
  if (const auto* direct = std::get_if<kernels::cpu::WeightType>(&type)) {
    kernels::cpu::DequantizeRow(*direct, row, cols, out);
    return;
  }
  const kernels::ConvertedQuant q = std::get<kernels::ConvertedQuant>(type);
  kernels::DequantizeReference(q, row, cols / kernels::LayoutOf(q).block_values, out);
}

std::vector<WeightMatrix*> ProductMatrices(LlamaWeights& w) { return MatricesOf(w); }
std::vector<const WeightMatrix*> ProductMatrices(const LlamaWeights& w) { return MatricesOf(w); }

void ReleaseMappedPages(const uint8_t* data, size_t bytes) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + bytes) / page * page;
  // Advice only: on failure the pages simply stay mapped.
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

uint64_t DecodeReadBytes(const LlamaWeights& w) {
  uint64_t bytes = w.total_bytes;
  for (const WeightMatrix* m : ProductMatrices(w)) {
    if (!m->int8_by_bucket[0] || m->vnni8_packed == nullptr) continue;
    bytes -= m->row_bytes * static_cast<uint64_t>(m->rows);
    bytes += kernels::cpu::Vnni8PackedBytes(Int8RowsOf(*m).type, m->rows, m->cols);
  }
  return bytes;
}

uint64_t AmxPackedCopiesBytes(const LlamaWeights& w) { return PackedBytes(ProductMatrices(w)); }

void AddAmxPackedCopies(LlamaWeights& w) {
  const std::vector<WeightMatrix*> matrices = ProductMatrices(w);
  const uint64_t total = PackedBytes(matrices);
  if (total == 0) return;
  // Every copy is a whole number of 64-byte-multiple records, so each starts 64-byte aligned.
  w.amx_storage.reset(static_cast<uint8_t*>(AllocateHugePageBacked(total)));
  if (!w.amx_storage) return;  // no copies: the GGUF rows serve every batch
  w.amx_packed_bytes = total;
  uint8_t* at = w.amx_storage.get();
  for (WeightMatrix* m : matrices) {
    const size_t bytes = kernels::cpu::AmxPackedBytes(m->type, m->rows, m->cols);
    if (bytes == 0) continue;
    // A matrix a plan's 8-bit copies serve alone has no rows to pack, and its products never
    // take the AMX level (they run MatMulRows8): its place in the block stays unread.
    if (m->data == nullptr) {
      at += bytes;
      continue;
    }
    kernels::cpu::PackForAmx(m->type, m->data, m->row_bytes, m->rows, m->cols, at);
    at += bytes;
  }
  AssignPackedCopies(matrices, w.amx_storage.get());
}

namespace {

// kernels::cpu::PackForVnni8 on every core, each thread a range of whole tiles (the copy holds
// them one after another): a load without a plan packs a K-quant model's every matrix (the 1.5B:
// 1 GB, ~1.3 s on one Zen 4 core).
void PackOnEveryCore(const Int8Rows& source, int64_t rows, int64_t cols, uint8_t* out) {
  const int64_t tiles = rows / 16;
  const size_t tile_bytes = kernels::cpu::Vnni8PackedBytes(source.type, 16, cols);
  const int64_t n_threads =
      std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(1, tiles / 8));
  const auto pack = [&](int64_t i) {
    const int64_t t0 = tiles * i / n_threads, t1 = tiles * (i + 1) / n_threads;
    if (t1 == t0) return;
    kernels::cpu::PackForVnni8(
        source.type, source.data + static_cast<size_t>(16 * t0) * source.row_bytes,
        source.row_bytes, 16 * (t1 - t0), cols, out + static_cast<size_t>(t0) * tile_bytes);
  };
  std::vector<std::thread> threads;
  for (int64_t i = 1; i < n_threads; ++i) threads.emplace_back(pack, i);
  pack(0);
  for (std::thread& t : threads) t.join();
}

}  // namespace

void AddVnni8PackedCopies(LlamaWeights& w, const MatrixPacked& packed) {
  for (WeightMatrix* m : ProductMatrices(w)) {
    const bool wanted =
        std::any_of(m->int8_by_bucket.begin(), m->int8_by_bucket.end(), [](bool b) { return b; });
    const Int8Rows source = Int8RowsOf(*m);
    if (!wanted || m->vnni8_packed != nullptr || source.data == nullptr) continue;
    const size_t bytes = kernels::cpu::Vnni8PackedBytes(source.type, m->rows, m->cols);
    if (bytes == 0) continue;
    // Tied embeddings: the output head and the embedding table are one matrix, packed once.
    std::unique_ptr<uint8_t, FreeDeleter> copy(
        static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    if (!copy) continue;
    PackOnEveryCore(source, m->rows, m->cols, copy.get());
    m->vnni8_packed = copy.get();
    w.vnni8_packed_bytes += bytes;
    w.vnni8_storage.push_back(std::move(copy));
    if (packed) packed(*m);
  }
}

namespace {

bool RunsAtEightBits(const WeightMatrix& m) {
  return std::any_of(m.int8_by_bucket.begin(), m.int8_by_bucket.end(), [](bool b) { return b; });
}

}  // namespace

bool Vnni8CopyCanServeAlone(kernels::cpu::WeightType type, int64_t rows, int64_t cols) {
  return kernels::cpu::FastInt8Activations(type) && kernels::cpu::Vnni8Packable(type, rows, cols);
}

bool ServedByVnni8CopyAlone(const WeightMatrix& m) {
  return std::all_of(m.int8_by_bucket.begin(), m.int8_by_bucket.end(), [](bool b) { return b; }) &&
         m.vnni8_packed != nullptr && Vnni8CopyCanServeAlone(Int8RowsOf(m).type, m.rows, m.cols);
}

uint64_t ReleaseConvertedRowsServedByVnni8Copies(LlamaWeights& w) {
  uint64_t freed = 0;
  for (LlamaLayerWeights& l : w.layers) {
    for (WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      if (m->data == nullptr || !ServedByVnni8CopyAlone(*m)) continue;
      auto owned = std::find_if(w.converted_storage.begin(), w.converted_storage.end(),
                                [&](const auto& p) { return p.get() == m->data; });
      if (owned == w.converted_storage.end()) continue;  // the file's own rows: never resident
      const uint64_t bytes = m->row_bytes * static_cast<uint64_t>(m->rows);
      owned->reset();
      m->data = nullptr;
      w.converted_bytes -= bytes;
      freed += bytes;
    }
  }
  std::erase_if(w.converted_storage, [](const auto& p) { return p == nullptr; });
  return freed;
}

uint64_t Vnni8CopiesBytes(std::span<const WeightMatrix* const> matrices) {
  uint64_t total = 0;
  for (const WeightMatrix* m : matrices) {
    if (RunsAtEightBits(*m)) {
      total += kernels::cpu::Vnni8PackedBytes(Int8RowsOf(*m).type, m->rows, m->cols);
    }
  }
  return total;
}

uint64_t Vnni8CopiesBytes(const LlamaWeights& w) { return Vnni8CopiesBytes(ProductMatrices(w)); }

std::vector<uint8_t> Vnni8CopiesBlob(const LlamaWeights& w) {
  std::vector<uint8_t> blob;
  blob.reserve(Vnni8CopiesBytes(w));
  for (const WeightMatrix* m : ProductMatrices(w)) {
    const size_t bytes = kernels::cpu::Vnni8PackedBytes(Int8RowsOf(*m).type, m->rows, m->cols);
    if (!RunsAtEightBits(*m) || bytes == 0) continue;
    if (m->vnni8_packed == nullptr) return {};
    blob.insert(blob.end(), m->vnni8_packed, m->vnni8_packed + bytes);
  }
  return blob;
}

Status UsePrepackedVnni8Copies(LlamaWeights& w, const uint8_t* bytes, uint64_t size,
                               const SourceCopied& copied) {
  const uint64_t total = Vnni8CopiesBytes(w);
  if (size != total) {
    return InvalidArgumentError("the plan's 8-bit packed weights are " + std::to_string(size) +
                                " bytes; this tuning's are " + std::to_string(total));
  }
  if (total == 0) return OkStatus();
  std::unique_ptr<uint8_t, FreeDeleter> copy(static_cast<uint8_t*>(AllocateHugePageBacked(total)));
  if (!copy) {
    return ResourceExhaustedError("no memory for the " + std::to_string(total) +
                                  " bytes of 8-bit packed weights");
  }
  constexpr uint64_t kChunk = uint64_t{32} << 20;
  for (uint64_t done = 0; done < total; done += kChunk) {
    const uint64_t n = std::min(kChunk, total - done);
    std::memcpy(copy.get() + done, bytes + done, n);
    if (copied) copied(bytes + done, n);
  }
  uint8_t* at = copy.get();
  for (WeightMatrix* m : ProductMatrices(w)) {
    const size_t n = kernels::cpu::Vnni8PackedBytes(Int8RowsOf(*m).type, m->rows, m->cols);
    if (!RunsAtEightBits(*m) || n == 0) continue;
    m->vnni8_packed = at;
    at += n;
  }
  w.vnni8_packed_bytes += total;
  w.vnni8_storage.push_back(std::move(copy));
  return OkStatus();
}

Status UsePrepackedAmxCopies(LlamaWeights& w, const uint8_t* bytes, uint64_t size) {
  const std::vector<WeightMatrix*> matrices = ProductMatrices(w);
  const uint64_t total = PackedBytes(matrices);
  if (size != total) {
    return InvalidArgumentError("the plan's AMX-packed weights are " + std::to_string(size) +
                                " bytes; this model's are " + std::to_string(total));
  }
  if (total == 0) return OkStatus();
  w.amx_storage.reset(static_cast<uint8_t*>(AllocateHugePageBacked(total)));
  if (!w.amx_storage) {
    return ResourceExhaustedError("no memory for the " + std::to_string(total) +
                                  " bytes of AMX-packed weights");
  }
  std::memcpy(w.amx_storage.get(), bytes, total);
  w.amx_packed_bytes = total;
  AssignPackedCopies(matrices, w.amx_storage.get());
  return OkStatus();
}

StatusOr<LlamaWeights> BindLlamaWeights(const gguf::GgufFile& file, const LlamaConfig& c,
                                        const ServedByPlanCopies& served,
                                        const ServedByPlanCopies& packed_from_file) {
  LlamaWeights w;
  Binder bind(file, w, packed_from_file);
  STREAMD_ASSIGN_OR_RETURN(w.output_norm, bind.Vector("output_norm.weight", c.dim));
  if (c.tied_output) {
    // One matrix for both: the lookup reads the head's rows, in the head's product format.
    STREAMD_ASSIGN_OR_RETURN(w.output, bind.Matrix("token_embd.weight", c.dim, c.vocab_size));
    w.token_embedding = {w.output.type, w.output.data, w.output.row_bytes, w.output.rows,
                         w.output.cols};
    // Looked up with pread like an untied table where the rows are the file's: once an 8-bit
    // copy serves the head's products, its pages may leave memory (ApplyKQuantDefaults), and
    // lookups through the mapping would bring most of them back.
    if (file.is_file_mapping()) w.token_embedding.file = &file;
  } else {
    // An untied table is read one row per token, not whole per step: it is not in total_bytes
    // (the roofline's bytes per step; a 0.5B Qwen's table is 94 MB of its ~490).
    STREAMD_ASSIGN_OR_RETURN(w.token_embedding,
                             bind.Table("token_embd.weight", c.dim, c.vocab_size));
    w.embedding_bytes = w.token_embedding.row_bytes * static_cast<uint64_t>(c.vocab_size);
    STREAMD_ASSIGN_OR_RETURN(w.output, bind.Matrix("output.weight", c.dim, c.vocab_size));
  }
  w.layers.resize(c.n_layers);
  for (int32_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LlamaLayerWeights& l = w.layers[i];
    STREAMD_ASSIGN_OR_RETURN(l.attn_norm, bind.Vector(p + "attn_norm.weight", c.dim));
    STREAMD_ASSIGN_OR_RETURN(l.wq, bind.Matrix(p + "attn_q.weight", c.dim, c.q_dim(), &served));
    STREAMD_ASSIGN_OR_RETURN(l.wk, bind.Matrix(p + "attn_k.weight", c.dim, c.kv_dim(), &served));
    STREAMD_ASSIGN_OR_RETURN(l.wv, bind.Matrix(p + "attn_v.weight", c.dim, c.kv_dim(), &served));
    STREAMD_ASSIGN_OR_RETURN(l.wo,
                             bind.Matrix(p + "attn_output.weight", c.q_dim(), c.dim, &served));
    if (c.family.qkv_bias) {
      STREAMD_ASSIGN_OR_RETURN(l.q_bias, bind.Vector(p + "attn_q.bias", c.q_dim()));
      STREAMD_ASSIGN_OR_RETURN(l.k_bias, bind.Vector(p + "attn_k.bias", c.kv_dim()));
      STREAMD_ASSIGN_OR_RETURN(l.v_bias, bind.Vector(p + "attn_v.bias", c.kv_dim()));
    }
    if (c.family.qk_norm) {
      STREAMD_ASSIGN_OR_RETURN(l.q_norm, bind.Vector(p + "attn_q_norm.weight", c.head_dim));
      STREAMD_ASSIGN_OR_RETURN(l.k_norm, bind.Vector(p + "attn_k_norm.weight", c.head_dim));
    }
    STREAMD_ASSIGN_OR_RETURN(l.ffn_norm, bind.Vector(p + "ffn_norm.weight", c.dim));
    if (c.family.sandwich_norms) {
      STREAMD_ASSIGN_OR_RETURN(l.post_attn_norm,
                               bind.Vector(p + "post_attention_norm.weight", c.dim));
      STREAMD_ASSIGN_OR_RETURN(l.post_ffn_norm, bind.Vector(p + "post_ffw_norm.weight", c.dim));
    }
    STREAMD_ASSIGN_OR_RETURN(l.w_gate,
                             bind.Matrix(p + "ffn_gate.weight", c.dim, c.ffn_dim, &served));
    STREAMD_ASSIGN_OR_RETURN(l.w_up, bind.Matrix(p + "ffn_up.weight", c.dim, c.ffn_dim, &served));
    STREAMD_ASSIGN_OR_RETURN(l.w_down,
                             bind.Matrix(p + "ffn_down.weight", c.ffn_dim, c.dim, &served));
  }
  return w;
}

}  // namespace streamd
