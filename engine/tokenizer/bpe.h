// Byte-level BPE (tokenizer.ggml.model "gpt2"): merges one pre-tokenized word into token ids.
//
// Algorithm (as GPT-2 and llama.cpp): start from one symbol per byte (the vocabulary token
// whose text is that byte's stand-in code point, see byte_unicode.h); repeatedly merge the
// adjacent pair with the lowest merge rank, the leftmost on ties, until no adjacent pair has a
// rank. Merges are keyed by the pair of token ids, so the hot loop never builds strings.
//
// Thread safety: immutable after Create(); EncodeWord() may run concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/vocab.h"
#include "engine/util/status.h"

namespace streamd::tokenizer {

class BpeModel {
 public:
  // `merges` is tokenizer.ggml.merges: "left right" per entry, rank = index. Entries whose
  // sides or result are not tokens cannot fire and are skipped (llama.cpp would merge them
  // and then fall back to bytes; no real vocabulary has such entries).
  static StatusOr<BpeModel> Create(const Vocab& vocab, const std::vector<std::string>& merges);

  // Appends the ids of `word` (raw UTF-8 bytes of one pre-token). With `ignore_merges`, a word
  // that is itself a token is emitted whole (Llama-3 behaviour).
  void EncodeWord(const Vocab& vocab, std::string_view word, bool ignore_merges,
                  std::vector<int32_t>* out) const;

  size_t num_merges() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  std::array<int32_t, 256> byte_ids_{};
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace streamd::tokenizer
