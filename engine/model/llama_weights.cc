#include "engine/model/llama_weights.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace streamd {
namespace {

using kernels::cpu::WeightType;

StatusOr<WeightType> ToWeightType(const gguf::TensorInfo& t) {
  switch (t.type) {
    case gguf::TensorType::kF32: return WeightType::kF32;
    case gguf::TensorType::kF16: return WeightType::kF16;
    case gguf::TensorType::kBF16: return WeightType::kBF16;
    case gguf::TensorType::kQ4_0: return WeightType::kQ4_0;
    case gguf::TensorType::kQ4_1: return WeightType::kQ4_1;
    case gguf::TensorType::kQ8_0: return WeightType::kQ8_0;
  }
  return UnimplementedError("tensor '" + t.name + "' has type " +
                            gguf::TensorTypeName(static_cast<uint32_t>(t.type)) +
                            ", which matrix products do not support");
}

std::string ShapeString(int64_t cols, int64_t rows) {
  return "[" + std::to_string(cols) + ", " + std::to_string(rows) + "]";
}

class Binder {
 public:
  Binder(const gguf::GgufFile& file, uint64_t& total) : file_(file), total_(total) {}

  StatusOr<WeightMatrix> Matrix(const std::string& name, int64_t cols, int64_t rows) {
    const gguf::TensorInfo* t = file_.FindTensor(name);
    if (t == nullptr) return InvalidArgumentError("tensor '" + name + "' is missing");
    if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows) {
      return InvalidArgumentError("tensor '" + name + "' has the wrong shape (expected " +
                                  ShapeString(cols, rows) + ")");
    }
    STREAMD_ASSIGN_OR_RETURN(WeightType type, ToWeightType(*t));
    total_ += t->size_bytes;
    return WeightMatrix{type, t->data, static_cast<size_t>(t->row_bytes()), rows, cols};
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
  uint64_t& total_;
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

std::vector<WeightMatrix*> ProductMatrices(LlamaWeights& w) { return MatricesOf(w); }
std::vector<const WeightMatrix*> ProductMatrices(const LlamaWeights& w) { return MatricesOf(w); }

uint64_t AmxPackedCopiesBytes(const LlamaWeights& w) {
  return PackedBytes(ProductMatrices(w));
}

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
    kernels::cpu::PackForAmx(m->type, m->data, m->row_bytes, m->rows, m->cols, at);
    at += bytes;
  }
  AssignPackedCopies(matrices, w.amx_storage.get());
}

void AddVnni8PackedCopies(LlamaWeights& w) {
  for (WeightMatrix* m : ProductMatrices(w)) {
    const bool wanted = std::any_of(m->int8_by_bucket.begin(), m->int8_by_bucket.end(),
                                    [](bool b) { return b; });
    if (!wanted || m->vnni8_packed != nullptr) continue;
    const size_t bytes = kernels::cpu::Vnni8PackedBytes(m->type, m->rows, m->cols);
    if (bytes == 0) continue;
    // Tied embeddings: the output head and the embedding table are one matrix, packed once.
    std::unique_ptr<uint8_t, FreeDeleter> copy(
        static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    if (!copy) continue;
    kernels::cpu::PackForVnni8(m->type, m->data, m->row_bytes, m->rows, m->cols, copy.get());
    m->vnni8_packed = copy.get();
    w.vnni8_packed_bytes += bytes;
    w.vnni8_storage.push_back(std::move(copy));
  }
}

namespace {

bool RunsAtEightBits(const WeightMatrix& m) {
  return std::any_of(m.int8_by_bucket.begin(), m.int8_by_bucket.end(), [](bool b) { return b; });
}

}  // namespace

uint64_t Vnni8CopiesBytes(std::span<const WeightMatrix* const> matrices) {
  uint64_t total = 0;
  for (const WeightMatrix* m : matrices) {
    if (RunsAtEightBits(*m)) total += kernels::cpu::Vnni8PackedBytes(m->type, m->rows, m->cols);
  }
  return total;
}

uint64_t Vnni8CopiesBytes(const LlamaWeights& w) { return Vnni8CopiesBytes(ProductMatrices(w)); }

std::vector<uint8_t> Vnni8CopiesBlob(const LlamaWeights& w) {
  std::vector<uint8_t> blob;
  blob.reserve(Vnni8CopiesBytes(w));
  for (const WeightMatrix* m : ProductMatrices(w)) {
    const size_t bytes = kernels::cpu::Vnni8PackedBytes(m->type, m->rows, m->cols);
    if (!RunsAtEightBits(*m) || bytes == 0) continue;
    if (m->vnni8_packed == nullptr) return {};
    blob.insert(blob.end(), m->vnni8_packed, m->vnni8_packed + bytes);
  }
  return blob;
}

Status UsePrepackedVnni8Copies(LlamaWeights& w, const uint8_t* bytes, uint64_t size) {
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
  std::memcpy(copy.get(), bytes, total);
  uint8_t* at = copy.get();
  for (WeightMatrix* m : ProductMatrices(w)) {
    const size_t n = kernels::cpu::Vnni8PackedBytes(m->type, m->rows, m->cols);
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

StatusOr<LlamaWeights> BindLlamaWeights(const gguf::GgufFile& file, const LlamaConfig& c) {
  LlamaWeights w;
  Binder bind(file, w.total_bytes);
  STREAMD_ASSIGN_OR_RETURN(w.token_embedding, bind.Matrix("token_embd.weight", c.dim, c.vocab_size));
  STREAMD_ASSIGN_OR_RETURN(w.output_norm, bind.Vector("output_norm.weight", c.dim));
  if (c.tied_output) {
    w.output = w.token_embedding;
  } else {
    STREAMD_ASSIGN_OR_RETURN(w.output, bind.Matrix("output.weight", c.dim, c.vocab_size));
  }
  w.layers.resize(c.n_layers);
  for (int32_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LlamaLayerWeights& l = w.layers[i];
    STREAMD_ASSIGN_OR_RETURN(l.attn_norm, bind.Vector(p + "attn_norm.weight", c.dim));
    STREAMD_ASSIGN_OR_RETURN(l.wq, bind.Matrix(p + "attn_q.weight", c.dim, c.q_dim()));
    STREAMD_ASSIGN_OR_RETURN(l.wk, bind.Matrix(p + "attn_k.weight", c.dim, c.kv_dim()));
    STREAMD_ASSIGN_OR_RETURN(l.wv, bind.Matrix(p + "attn_v.weight", c.dim, c.kv_dim()));
    STREAMD_ASSIGN_OR_RETURN(l.wo, bind.Matrix(p + "attn_output.weight", c.q_dim(), c.dim));
    STREAMD_ASSIGN_OR_RETURN(l.ffn_norm, bind.Vector(p + "ffn_norm.weight", c.dim));
    STREAMD_ASSIGN_OR_RETURN(l.w_gate, bind.Matrix(p + "ffn_gate.weight", c.dim, c.ffn_dim));
    STREAMD_ASSIGN_OR_RETURN(l.w_up, bind.Matrix(p + "ffn_up.weight", c.dim, c.ffn_dim));
    STREAMD_ASSIGN_OR_RETURN(l.w_down, bind.Matrix(p + "ffn_down.weight", c.ffn_dim, c.dim));
  }
  return w;
}

}  // namespace streamd
