// SentencePiece BPE (tokenizer.ggml.model "llama"): merges escaped text into token ids.
//
// Algorithm (as SentencePiece's BPE and llama.cpp's llm_tokenizer_spm): start from one symbol
// per UTF-8 character; repeatedly merge the adjacent pair whose concatenation is a token with
// the highest score, the leftmost on ties; stop when no adjacent pair forms a token. A final
// symbol that is not a token (a character outside the vocabulary) becomes its UTF-8 bytes as
// <0xXX> byte tokens. There is no pre-tokenizer: the caller escapes spaces to U+2581 "▁" and
// adds the leading space. The whole fragment is one merge problem, but when no token spans a
// word start (a "▁" after another character) it falls apart into independent words, which
// are merged separately and cached: the same result, found about ten times faster.
//
// Thread safety: immutable after Create(); Encode() may run concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/tokenizer/vocab.h"

namespace streamd::tokenizer {

class SpmModel {
 public:
  static SpmModel Create(const Vocab& vocab);

  // Appends the ids of `text` (valid UTF-8, already escaped) to `out`.
  void Encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>* out) const;

  // Whether Encode() may cut the text into words (see spm.cc).
  bool splits_words() const { return splits_words_; }

 private:
  // The merge algorithm proper, on one independent stretch of text.
  void EncodeSegment(const Vocab& vocab, std::string_view text, std::vector<int32_t>* out) const;

  bool splits_words_ = false;
  // Token of each byte: "<0xXX>", else the one-byte text, else <unk>, else -1 (dropped).
  std::array<int32_t, 256> byte_ids_{};
};

}  // namespace streamd::tokenizer
