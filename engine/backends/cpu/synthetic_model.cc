#include "engine/backends/cpu/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>

#include "engine/gguf/gguf_writer.h"
#include "engine/model/model_family.h"
#include "engine/tokenizer/byte_unicode.h"
#include "kernels/cpu/dequantize_reference.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/random_quant_blocks.h"

namespace streamd {
namespace {

using gguf::TensorType;

// The kernels' name of a type converted at load (its value is the ggml id), if `type` is one.
std::optional<kernels::ConvertedQuant> ConvertedOf(TensorType type) {
  for (kernels::ConvertedQuant q : kernels::kConvertedQuants) {
    if (static_cast<uint32_t>(q) == static_cast<uint32_t>(type)) return q;
  }
  return std::nullopt;
}

template <typename T>
void Append(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

// Encodes one row of floats in `type` (GGUF block layout; round-to-nearest quantization).
void EncodeRow(TensorType type, const float* x, int64_t k, std::vector<uint8_t>& out) {
  using namespace kernels;
  switch (type) {
    case TensorType::kF32:
      for (int64_t i = 0; i < k; ++i) Append(out, x[i]);
      return;
    case TensorType::kF16:
      for (int64_t i = 0; i < k; ++i) Append(out, FloatToHalf(x[i]));
      return;
    case TensorType::kBF16:
      return;  // rejected by BuildSyntheticModel
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kQ2_K:
    case TensorType::kQ3_K:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
    case TensorType::kIQ4_NL:
    case TensorType::kIQ4_XS:
      return;  // random blocks instead (Builder::Matrix)
    case TensorType::kQ8_0:
      for (int64_t b = 0; b < k; b += kQuantBlock) {
        float amax = 0;
        for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(x[b + j]));
        BlockQ8_0 blk;
        const float d = amax / 127.0f;
        blk.d = FloatToHalf(d);
        for (int j = 0; j < kQuantBlock; ++j) {
          blk.qs[j] = static_cast<int8_t>(d == 0 ? 0 : std::lround(x[b + j] / d));
        }
        Append(out, blk);
      }
      return;
    case TensorType::kQ4_0:
    case TensorType::kQ4_1:
      for (int64_t b = 0; b < k; b += kQuantBlock) {
        float lo = x[b], hi = x[b];
        for (int j = 0; j < kQuantBlock; ++j) {
          lo = std::min(lo, x[b + j]);
          hi = std::max(hi, x[b + j]);
        }
        const bool q41 = type == TensorType::kQ4_1;
        const float amax = std::max(std::fabs(lo), std::fabs(hi));
        const float d = q41 ? (hi - lo) / 15.0f : amax / 8.0f;
        const float base = q41 ? lo : -8.0f * d;
        uint8_t q[kQuantBlock];
        for (int j = 0; j < kQuantBlock; ++j) {
          const long v = d == 0 ? 0 : std::lround((x[b + j] - base) / d);
          q[j] = static_cast<uint8_t>(std::clamp(v, 0L, 15L));
        }
        uint8_t qs[kQuantBlock / 2];
        for (int j = 0; j < kQuantBlock / 2; ++j) qs[j] = q[j] | (q[j + kQuantBlock / 2] << 4);
        if (q41) {
          BlockQ4_1 blk{FloatToHalf(d), FloatToHalf(lo), {}};
          std::memcpy(blk.qs, qs, sizeof qs);
          Append(out, blk);
        } else {
          BlockQ4_0 blk{FloatToHalf(d), {}};
          std::memcpy(blk.qs, qs, sizeof qs);
          Append(out, blk);
        }
      }
      return;
  }
}

struct FamilyFlags {
  bool known = false;
  bool qkv_bias = false;
  bool qk_norm = false;
  bool sandwich_norms = false;
  bool local_layers = false;
};

// The tensors a family adds (model_family.h is the loader's side of the same description).
FamilyFlags FamilyOf(const std::string& architecture) {
  const ModelFamily* f = FindModelFamily(architecture);
  if (f == nullptr) return {};
  return {true, f->qkv_bias, f->qk_norm, f->sandwich_norms, f->local_period > 0};
}

class Builder {
 public:
  explicit Builder(uint64_t seed) : rng_(seed) {}

  // [rows, cols] matrix (GGUF dims {cols, rows}) of uniform(-a, a) values.
  Status Matrix(gguf::GgufWriter& w, const std::string& name, TensorType type, int64_t cols,
                int64_t rows, float a) {
    if (const std::optional<kernels::ConvertedQuant> q = ConvertedOf(type)) {
      // No quantizer of these formats here: random blocks whose values reach about +-a, every
      // scale, min and bit pattern of the format exercised.
      const int64_t blocks = rows * cols / kernels::LayoutOf(*q).block_values;
      return w.AddTensor(name, type, {cols, rows}, kernels::RandomBlocks(*q, blocks, rng_, a));
    }
    std::uniform_real_distribution<float> u(-a, a);
    std::vector<float> row(cols);
    std::vector<uint8_t> bytes;
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = u(rng_);
      EncodeRow(type, row.data(), cols, bytes);
    }
    return w.AddTensor(name, type, {cols, rows}, std::move(bytes));
  }
  Status Ones(gguf::GgufWriter& w, const std::string& name, int64_t n) {
    return Floats(w, name, std::vector<float>(n, 1.0f));
  }
  // An F32 vector of n values uniform in [lo, hi].
  Status Uniform(gguf::GgufWriter& w, const std::string& name, int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> values(n);
    for (float& v : values) v = u(rng_);
    return Floats(w, name, values);
  }
  Status Floats(gguf::GgufWriter& w, const std::string& name, const std::vector<float>& values) {
    std::vector<uint8_t> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return w.AddTensor(name, TensorType::kF32, {static_cast<int64_t>(values.size())},
                       std::move(bytes));
  }

 private:
  std::mt19937_64 rng_;
};

}  // namespace

SyntheticModelSpec SmolLm2Shape() {
  SyntheticModelSpec s;
  s.n_layers = 30;
  s.dim = 576;
  s.n_heads = 9;
  s.n_kv_heads = 3;
  s.ffn_dim = 1536;
  s.vocab_size = 49152;
  s.context_length = 8192;
  s.rope_base = 100000.0f;
  s.weight_type = TensorType::kQ4_1;
  s.embedding_type = TensorType::kQ8_0;
  return s;
}

SyntheticModelSpec Llama3_8BShape() {
  SyntheticModelSpec s;
  s.n_layers = 32;
  s.dim = 4096;
  s.n_heads = 32;
  s.n_kv_heads = 8;
  s.ffn_dim = 14336;
  s.vocab_size = 128256;
  s.context_length = 8192;
  s.rope_base = 500000.0f;
  s.weight_type = TensorType::kQ4_1;
  s.embedding_type = TensorType::kQ8_0;
  return s;
}

SyntheticModelSpec SmallGemma3Shape() {
  SyntheticModelSpec spec;
  spec.architecture = "gemma3";
  spec.rope_base = 1000000.0f;
  spec.head_dim = 32;
  spec.n_layers = 7;
  spec.sliding_window = 13;
  return spec;
}

StatusOr<std::vector<uint8_t>> BuildSyntheticModel(const SyntheticModelSpec& s) {
  for (TensorType t : {s.weight_type, s.embedding_type}) {
    if (t == TensorType::kBF16)
      return UnimplementedError("synthetic BF16 weights are not supported");
  }
  gguf::GgufWriter w;
  using gguf::MakeString;
  using gguf::MakeValue;
  const FamilyFlags family = FamilyOf(s.architecture);
  if (!family.known) {
    return InvalidArgumentError("synthetic models of architecture \"" + s.architecture +
                                "\" are not supported");
  }
  const std::string& a = s.architecture;  // every hyper-parameter key is prefixed by it
  const int32_t hd = s.head_dim > 0 ? s.head_dim : s.dim / s.n_heads;
  w.Add("general.architecture", MakeString(a));
  w.Add("general.name", MakeString("synthetic"));
  w.Add(a + ".block_count", MakeValue<uint32_t>(s.n_layers));
  w.Add(a + ".context_length", MakeValue<uint32_t>(s.context_length));
  w.Add(a + ".embedding_length", MakeValue<uint32_t>(s.dim));
  w.Add(a + ".feed_forward_length", MakeValue<uint32_t>(s.ffn_dim));
  w.Add(a + ".attention.head_count", MakeValue<uint32_t>(s.n_heads));
  w.Add(a + ".attention.head_count_kv", MakeValue<uint32_t>(s.n_kv_heads));
  if (s.head_dim > 0) {
    w.Add(a + ".attention.key_length", MakeValue<uint32_t>(hd));
    w.Add(a + ".attention.value_length", MakeValue<uint32_t>(hd));
  }
  w.Add(a + ".rope.freq_base", MakeValue<float>(s.rope_base));
  w.Add(a + ".attention.layer_norm_rms_epsilon", MakeValue<float>(1e-5f));
  if (family.local_layers) {
    w.Add(a + ".attention.sliding_window", MakeValue<uint32_t>(s.sliding_window));
  }

  if (s.with_vocab) {
    if (s.vocab_size < 259)
      return InvalidArgumentError("a synthetic vocabulary needs >= 259 tokens");
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (int b = 0; b < 256; ++b) {
      tokens.push_back(tokenizer::ByteToTokenText(static_cast<uint8_t>(b)));
      types.push_back(1);  // normal
    }
    for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
      tokens.push_back(special);
      types.push_back(3);  // control
    }
    while (static_cast<int32_t>(tokens.size()) < s.vocab_size) {
      tokens.push_back("<|filler_" + std::to_string(tokens.size()) + "|>");
      types.push_back(3);
    }
    w.Add("tokenizer.ggml.model", MakeString("gpt2"));
    w.Add("tokenizer.ggml.pre", MakeString("default"));
    w.Add("tokenizer.ggml.tokens", gguf::MakeArrayOf<std::string>(tokens));
    w.Add("tokenizer.ggml.token_type", gguf::MakeArrayOf<int32_t>(types));
    w.Add("tokenizer.ggml.merges", gguf::MakeArrayOf<std::string>({}));
    w.Add("tokenizer.ggml.bos_token_id", MakeValue<uint32_t>(257));
    w.Add("tokenizer.ggml.eos_token_id", MakeValue<uint32_t>(kSyntheticImEnd));
    w.Add("tokenizer.ggml.add_bos_token", MakeValue<bool>(false));
  }

  Builder b(s.seed);
  const auto bound = [](int64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
  STREAMD_RETURN_IF_ERROR(
      b.Matrix(w, "token_embd.weight", s.embedding_type, s.dim, s.vocab_size, 1.0f));
  STREAMD_RETURN_IF_ERROR(b.Ones(w, "output_norm.weight", s.dim));
  if (s.output_type) {
    STREAMD_RETURN_IF_ERROR(
        b.Matrix(w, "output.weight", *s.output_type, s.dim, s.vocab_size, bound(s.dim)));
  }
  if (!s.rope_freq_factors.empty()) {
    STREAMD_RETURN_IF_ERROR(b.Floats(w, "rope_freqs.weight", s.rope_freq_factors));
  }
  for (int32_t l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    STREAMD_RETURN_IF_ERROR(b.Ones(w, p + "attn_norm.weight", s.dim));
    STREAMD_RETURN_IF_ERROR(
        b.Matrix(w, p + "attn_q.weight", s.weight_type, s.dim, s.n_heads * hd, bound(s.dim)));
    STREAMD_RETURN_IF_ERROR(
        b.Matrix(w, p + "attn_k.weight", s.weight_type, s.dim, s.n_kv_heads * hd, bound(s.dim)));
    STREAMD_RETURN_IF_ERROR(
        b.Matrix(w, p + "attn_v.weight", s.weight_type, s.dim, s.n_kv_heads * hd, bound(s.dim)));
    STREAMD_RETURN_IF_ERROR(
        b.Matrix(w, p + "attn_output.weight", s.weight_type, s.n_heads * hd, s.dim, bound(s.dim)));
    if (family.qkv_bias) {
      // Biases of the size of a projection's outputs: they move q, k and v visibly.
      STREAMD_RETURN_IF_ERROR(b.Uniform(w, p + "attn_q.bias", s.n_heads * hd, -0.5f, 0.5f));
      STREAMD_RETURN_IF_ERROR(b.Uniform(w, p + "attn_k.bias", s.n_kv_heads * hd, -0.5f, 0.5f));
      STREAMD_RETURN_IF_ERROR(b.Uniform(w, p + "attn_v.bias", s.n_kv_heads * hd, -0.5f, 0.5f));
    }
    if (family.qk_norm) {
      // Not all ones: a norm applied to the wrong dimensions (or not per head) shows.
      STREAMD_RETURN_IF_ERROR(b.Uniform(w, p + "attn_q_norm.weight", hd, 0.5f, 1.5f));
      STREAMD_RETURN_IF_ERROR(b.Uniform(w, p + "attn_k_norm.weight", hd, 0.5f, 1.5f));
    }
    STREAMD_RETURN_IF_ERROR(b.Ones(w, p + "ffn_norm.weight", s.dim));
    if (family.sandwich_norms) {
      STREAMD_RETURN_IF_ERROR(b.Uniform(w, p + "post_attention_norm.weight", s.dim, 0.5f, 1.5f));
      STREAMD_RETURN_IF_ERROR(b.Uniform(w, p + "post_ffw_norm.weight", s.dim, 0.5f, 1.5f));
    }
    STREAMD_RETURN_IF_ERROR(
        b.Matrix(w, p + "ffn_gate.weight", s.weight_type, s.dim, s.ffn_dim, bound(s.dim)));
    STREAMD_RETURN_IF_ERROR(
        b.Matrix(w, p + "ffn_up.weight", s.weight_type, s.dim, s.ffn_dim, bound(s.dim)));
    STREAMD_RETURN_IF_ERROR(
        b.Matrix(w, p + "ffn_down.weight", s.weight_type, s.ffn_dim, s.dim, bound(s.ffn_dim)));
  }
  return w.Serialize();
}

StatusOr<std::vector<uint8_t>> DequantizeConvertedTensors(const std::vector<uint8_t>& bytes) {
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file,
                           gguf::GgufFile::FromBuffer(bytes.data(), bytes.size()));
  gguf::GgufWriter w;
  w.SetAlignment(static_cast<uint32_t>(file->alignment()));
  for (const auto& [key, value] : file->metadata()) {
    if (key != "general.alignment") w.Add(key, value);
  }
  for (const gguf::TensorInfo& t : file->tensors()) {
    const std::optional<kernels::ConvertedQuant> q = ConvertedOf(t.type);
    if (!q) {
      STREAMD_RETURN_IF_ERROR(
          w.AddTensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.size_bytes)));
      continue;
    }
    std::vector<float> values(static_cast<size_t>(t.num_elements));
    kernels::DequantizeReference(*q, t.data, t.num_elements / kernels::LayoutOf(*q).block_values,
                                 values.data());
    std::vector<uint8_t> f32(values.size() * sizeof(float));
    std::memcpy(f32.data(), values.data(), f32.size());
    STREAMD_RETURN_IF_ERROR(w.AddTensor(t.name, TensorType::kF32, t.dims, std::move(f32)));
  }
  return w.Serialize();
}

StatusOr<std::unique_ptr<LlamaModel>> MakeSyntheticModel(const SyntheticModelSpec& spec) {
  STREAMD_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, BuildSyntheticModel(spec));
  return LlamaModel::FromBytes(std::move(bytes));
}

}  // namespace streamd
