// Regex pre-tokenizer of byte-level BPE: splits text into the "words" that BPE merges within.
//
// A pre-tokenizer is a list of regexes applied in turn, as llama.cpp's unicode_regex_split()
// does: the first splits the whole text into its matches and the gaps between them; each next
// regex splits every piece the same way, never across piece boundaries. The regexes per
// tokenizer.ggml.pre are llama.cpp's (src/llama-vocab.cpp). They use Unicode classes (\p{L},
// \p{N}), so they run on PCRE2 in UTF + UCP mode, JIT-compiled; \s is rewritten to llama.cpp's
// exact whitespace set, which differs from PCRE2's.
//
// Thread safety: a PreTokenizer is immutable after Create(); Split() may run concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/util/status.h"

namespace streamd::tokenizer {

class PreTokenizer {
 public:
  // `name` is tokenizer.ggml.pre; "" (absent) means "default". Supported, grouped by the
  // split they share in llama.cpp: "default"; "gpt2", "gpt-2", "mpt"; "smollm", "starcoder",
  // "refact", "command-r"; "falcon"; "llama3", "llama-bpe", "llama-v3"; "qwen2",
  // "deepseek-r1-qwen"; "qwen35". Other names are INVALID_ARGUMENT naming them and listing
  // every supported one.
  static StatusOr<std::unique_ptr<PreTokenizer>> Create(std::string_view name);

  // Every name Create() accepts, in the order above (for error messages and docs).
  static std::vector<std::string_view> SupportedNames();
  // Whether Create(name) succeeds ("" too).
  static bool IsSupported(std::string_view name);

  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the pieces of `text` (valid UTF-8, checked by the caller) to `pieces`, as views
  // into `text`, in order; they are non-empty and concatenate to `text`.
  Status Split(std::string_view text, std::vector<std::string_view>* pieces) const;

  // Llama-3 vocabularies emit a whole piece as one token when it is in the vocabulary, without
  // running the merges (llama.cpp: ignore_merges).
  bool ignore_merges() const { return ignore_merges_; }
  const std::string& name() const { return name_; }

 private:
  struct Regex;
  PreTokenizer() = default;

  std::string name_;
  bool ignore_merges_ = false;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace streamd::tokenizer
