// A synthetic GGUF with several problems at once, for the tests of model_check.h (unit, and the
// CLI's through tests/make_test_gguf.cc): the synthetic model with vocabulary, rewritten with
// GgufWriter so that its architecture, three projections' and one norm's tensor types, and its
// pre-tokenizer are all ones streamd does not support.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/backends/cpu/synthetic_model.h"
#include "engine/gguf/gguf_writer.h"

namespace streamd::testing {

inline constexpr const char* kBadArchitecture = "gpt-neox";
inline constexpr const char* kBadPreTokenizer = "no-such-pre";
inline constexpr uint32_t kIq2Xxs = 16;  // ggml type ids streamd does not read
inline constexpr uint32_t kIq1S = 19;

// `good` rewritten: metadata with `architecture` and `pre` replaced (empty: kept), and the
// tensors named in `retype` given those ggml type ids (their data dropped: never read).
inline StatusOr<std::vector<uint8_t>> RewriteGguf(
    const std::vector<uint8_t>& good, const std::string& architecture, const std::string& pre,
    const std::vector<std::pair<std::string, uint32_t>>& retype) {
  STREAMD_ASSIGN_OR_RETURN(auto file, gguf::GgufFile::FromBuffer(good.data(), good.size()));
  gguf::GgufWriter w;
  w.SetAlignment(static_cast<uint32_t>(file->alignment()));
  for (const auto& [key, value] : file->metadata()) {
    if (key == "general.architecture" && !architecture.empty()) {
      w.Add(key, gguf::MakeString(architecture));
    } else if (key == "tokenizer.ggml.pre" && !pre.empty()) {
      w.Add(key, gguf::MakeString(pre));
    } else if (key != "general.alignment") {
      w.Add(key, value);
    }
  }
  for (const gguf::TensorInfo& t : file->tensors()) {
    uint32_t type = static_cast<uint32_t>(t.type);
    for (const auto& [name, id] : retype) {
      if (name == t.name) type = id;
    }
    if (type == static_cast<uint32_t>(t.type)) {
      w.AddRawTensor(t.name, type, t.dims, std::vector<uint8_t>(t.data, t.data + t.size_bytes));
    } else {
      w.AddRawTensor(t.name, type, t.dims, {});
    }
  }
  return w.Serialize();
}

// The synthetic model with every problem at once: architecture kBadArchitecture, IQ2_XXS in
// three tensors and IQ1_S in one, pre-tokenizer kBadPreTokenizer.
inline StatusOr<std::vector<uint8_t>> GgufWithSeveralProblems() {
  SyntheticModelSpec spec;
  spec.with_vocab = true;
  spec.vocab_size = 300;
  spec.dim = 256;  // a whole IQ2_XXS block per row
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.ffn_dim = 256;
  STREAMD_ASSIGN_OR_RETURN(std::vector<uint8_t> good, BuildSyntheticModel(spec));
  return RewriteGguf(good, kBadArchitecture, kBadPreTokenizer,
                     {{"blk.0.attn_q.weight", kIq2Xxs},
                      {"blk.0.attn_k.weight", kIq2Xxs},
                      {"blk.1.attn_q.weight", kIq2Xxs},
                      {"blk.1.ffn_up.weight", kIq1S}});
}

}  // namespace streamd::testing
