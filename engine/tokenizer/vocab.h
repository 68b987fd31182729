// The vocabulary as the tokenizer needs it: token texts, types, scores and special ids, read
// from a GGUF file's tokenizer.ggml.* keys, with llama.cpp's rules for the facts GGUF files
// do not state (which tokens end generation, which are control tokens).
//
// Invariants after LoadVocab() succeeds: texts, types and scores have vocab_size() entries;
// every special id is either -1 (absent) or a valid index; `ids` maps each distinct text to
// its last index (as llama.cpp does when a file repeats a text).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/string_table.h"
#include "engine/util/status.h"

namespace streamd::tokenizer {

enum class VocabType {
  kBpe,  // tokenizer.ggml.model == "gpt2": byte-level BPE with ranked merges
  kSpm,  // tokenizer.ggml.model == "llama": SentencePiece BPE with scores and <0xXX> bytes
};

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct Vocab {
  VocabType type = VocabType::kBpe;
  std::string model_name;  // tokenizer.ggml.model
  std::string pre_name;    // tokenizer.ggml.pre ("" when absent)
  StringTable texts;
  std::vector<TokenType> types;
  std::vector<float> scores;  // SPM merge priority; 0 when the file has none
  // Keys are views into `texts` (so a Vocab moves but is never copied).
  std::unordered_map<std::string_view, int32_t> ids;

  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;
  bool add_space_prefix = false;  // SPM only: encode as if the text began with a space
  std::vector<int32_t> eog_ids;   // sorted, unique

  int32_t size() const { return static_cast<int32_t>(texts.size()); }
  bool IsValid(int32_t id) const { return id >= 0 && id < size(); }
  std::optional<int32_t> Find(std::string_view text) const {
    auto it = ids.find(text);
    if (it == ids.end()) return std::nullopt;
    return it->second;
  }
  // Control, user-defined and unknown tokens: matched as whole strings before pre-tokenizing
  // and rendered verbatim when decoding.
  bool IsSpecial(int32_t id) const {
    const TokenType t = types[id];
    return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
  }
};

// Reads the vocabulary. Errors: UNIMPLEMENTED for a tokenizer.ggml.model other than "gpt2" or
// "llama" (naming it); INVALID_ARGUMENT naming the key for malformed arrays or special ids
// outside the vocabulary. Does not read merges (the BPE model does).
StatusOr<Vocab> LoadVocab(const gguf::GgufFile& file);

}  // namespace streamd::tokenizer
