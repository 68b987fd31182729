// Streaming detokenizer: turns generated ids into text chunks that are always valid UTF-8.
//
// A token may end inside a UTF-8 character (byte-level BPE splits rare characters and emoji
// into several tokens; SPM emits <0xXX> byte tokens), so text cannot be emitted token by
// token. Push() emits every complete character it has and holds back an incomplete trailing
// sequence; bytes that no continuation could make valid are replaced with U+FFFD at once, so
// no emitted prefix is ever invalid. Flush() ends the stream.
//
// Invariant: for ids whose Decode() is valid UTF-8, the concatenation of all Push() results
// and Flush() equals Tokenizer::Decode(ids) when started with at_text_start = true.
//
// Not thread-safe: one detokenizer per stream. The tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>

#include "engine/tokenizer/tokenizer.h"

namespace streamd::tokenizer {

class IncrementalDetokenizer {
 public:
  // `at_text_start`: the ids begin a text, as Decode() assumes, so SPM drops the space that
  // encoding put in front of it. For a continuation after a prompt, pass whether the prompt
  // ended with a special token (tokenizer.IsSpecial(prompt.back())), else false.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool at_text_start = true)
      : tokenizer_(tokenizer), at_boundary_(at_text_start) {}

  // Adds one token; returns the text that is now complete (possibly empty).
  std::string Push(int32_t id);

  // Returns what is held back, with an incomplete trailing sequence replaced by U+FFFD, and
  // leaves the detokenizer empty (ready for more ids of the same text).
  std::string Flush();

  // Bytes held back waiting for the rest of a character (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  bool at_boundary_;
  std::string pending_;  // an incomplete UTF-8 sequence from earlier pieces
};

}  // namespace streamd::tokenizer
