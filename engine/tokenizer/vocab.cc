#include "engine/tokenizer/vocab.h"

#include <algorithm>
#include <initializer_list>
#include <limits>

namespace streamd::tokenizer {
namespace {

using std::string_view_literals::operator""sv;

// Token texts llama.cpp (src/llama-vocab.cpp, load()) recognises, because GGUF files do not
// say which tokens end a turn. Each category list is in our priority order: when a vocabulary
// holds several candidates, the first listed becomes the category's id.
constexpr std::initializer_list<std::string_view> kEotTexts = {
    "<|eot_id|>"sv,
    "<|im_end|>"sv,
    "<|end|>"sv,
    "<end_of_turn>"sv,
    "<|endoftext|>"sv,
    "<|end_of_text|>"sv,
    "<EOT>"sv,
    "_<EOT>"sv,
    "[EOT]"sv,
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"sv,  // DeepSeek
    "<end_of_utterance>"sv};
constexpr std::initializer_list<std::string_view> kEomTexts = {"<|eom_id|>"sv};
constexpr std::initializer_list<std::string_view> kFimPreTexts = {"<|fim_prefix|>"sv,
                                                                  "<fim-prefix>"sv,
                                                                  "<fim_prefix>"sv,
                                                                  "<\xEF\xBD\x9C"
                                                                  "fim\xE2\x96\x81"
                                                                  "begin\xEF\xBD\x9C>"sv,
                                                                  "<PRE>"sv,
                                                                  "\xE2\x96\x81<PRE>"sv,
                                                                  "<|code_prefix|>"sv,
                                                                  "<|prefix|>"sv};
constexpr std::initializer_list<std::string_view> kFimSufTexts = {
    "<|fim_suffix|>"sv,
    "<fim-suffix>"sv,
    "<fim_suffix>"sv,
    "<\xEF\xBD\x9C"
    "fim\xE2\x96\x81hole\xEF\xBD\x9C>"sv,
    "<SUF>"sv,
    "\xE2\x96\x81<SUF>"sv,
    "<|code_suffix|>"sv,
    "<|suffix|>"sv};
constexpr std::initializer_list<std::string_view> kFimMidTexts = {"<|fim_middle|>"sv,
                                                                  "<fim-middle>"sv,
                                                                  "<fim_middle>"sv,
                                                                  "<\xEF\xBD\x9C"
                                                                  "fim\xE2\x96\x81"
                                                                  "end\xEF\xBD\x9C>"sv,
                                                                  "<MID>"sv,
                                                                  "\xE2\x96\x81<MID>"sv,
                                                                  "<|code_middle|>"sv,
                                                                  "<|middle|>"sv};
constexpr std::initializer_list<std::string_view> kFimPadTexts = {
    "<|fim_pad|>"sv, "<fim-pad>"sv, "<fim_pad>"sv, "<PAD>"sv, "[PAD]"sv};
constexpr std::initializer_list<std::string_view> kFimRepTexts = {
    "<|fim_repo|>"sv, "<|repo_name|>"sv, "<fim-repo>"sv, "<REPO>"sv, "<reponame>"sv};
constexpr std::initializer_list<std::string_view> kFimSepTexts = {"<|file_sep|>"sv};
// Every token with one of these texts ends generation, whatever the category ids are.
constexpr std::initializer_list<std::string_view> kEogTexts = {
    "<|eot_id|>"sv,
    "<|im_end|>"sv,
    "<|end|>"sv,
    "<|return|>"sv,
    "<|call|>"sv,
    "<|flush|>"sv,
    "<|calls|>"sv,
    "<end_of_turn>"sv,
    "<|endoftext|>"sv,
    "</s>"sv,
    "<|eom_id|>"sv,
    "<EOT>"sv,
    "_<EOT>"sv,
    "[EOT]"sv,
    "[EOS]"sv,
    "<|end_of_text|>"sv,
    "<end_of_utterance>"sv,
    "<eos>"sv,
    "<turn|>"sv,
    "<|tool_response>"sv,
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"sv,
    "[e~["sv};

int32_t FindFirst(const Vocab& vocab, std::initializer_list<std::string_view> texts) {
  for (std::string_view text : texts) {
    if (auto id = vocab.Find(text)) return *id;
  }
  return -1;
}

// A token that marks structure must never be merged into surrounding text, so llama.cpp makes
// it a control token even when the file calls it normal.
void ForceControl(Vocab& vocab, int32_t id) {
  if (id >= 0) vocab.types[id] = TokenType::kControl;
}

// Reads an optional token id key. Absent: *id is unchanged. Present: it must index the vocab.
Status ReadTokenId(const gguf::GgufFile& file, std::string_view key, const Vocab& vocab,
                   int32_t* id) {
  if (file.Find(key) == nullptr) return OkStatus();
  STREAMD_ASSIGN_OR_RETURN(int64_t value, file.GetI64(key));
  if (value < 0 || value >= vocab.size()) {
    return InvalidArgumentError(std::string(key) + " = " + std::to_string(value) +
                                " is outside the vocabulary of " + std::to_string(vocab.size()) +
                                " tokens");
  }
  *id = static_cast<int32_t>(value);
  return OkStatus();
}

// Category id: from its metadata key when present, else detected by text (forced control).
Status ReadOrDetect(const gguf::GgufFile& file, std::string_view key,
                    std::initializer_list<std::string_view> texts, Vocab& vocab, int32_t* id) {
  STREAMD_RETURN_IF_ERROR(ReadTokenId(file, key, vocab, id));
  if (*id < 0) {
    *id = FindFirst(vocab, texts);
    ForceControl(vocab, *id);
  }
  return OkStatus();
}

Status ReadTokens(const gguf::GgufFile& file, Vocab& vocab) {
  STREAMD_ASSIGN_OR_RETURN(std::vector<std::string> texts,
                           file.GetStringArray("tokenizer.ggml.tokens"));
  const size_t n = texts.size();
  if (n == 0 || n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return InvalidArgumentError("tokenizer.ggml.tokens has " + std::to_string(n) +
                                " entries; expected 1..2^31-1");
  }
  vocab.types.assign(n, TokenType::kNormal);
  if (file.Find("tokenizer.ggml.token_type") != nullptr) {
    STREAMD_ASSIGN_OR_RETURN(std::vector<int32_t> types,
                             file.GetI32Array("tokenizer.ggml.token_type"));
    if (types.size() < n) {
      return InvalidArgumentError("tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                                  " entries for " + std::to_string(n) + " tokens");
    }
    for (size_t i = 0; i < n; ++i) {
      const bool known = types[i] >= 0 && types[i] <= static_cast<int32_t>(TokenType::kByte);
      vocab.types[i] = known ? static_cast<TokenType>(types[i]) : TokenType::kUndefined;
    }
  }
  vocab.scores.assign(n, 0.0f);
  if (file.Find("tokenizer.ggml.scores") != nullptr) {
    STREAMD_ASSIGN_OR_RETURN(std::vector<float> scores, file.GetF32Array("tokenizer.ggml.scores"));
    if (scores.size() < n) {
      return InvalidArgumentError("tokenizer.ggml.scores has " + std::to_string(scores.size()) +
                                  " entries for " + std::to_string(n) + " tokens");
    }
    std::copy_n(scores.begin(), n, vocab.scores.begin());
  }
  size_t bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    // An empty text could never be matched or told apart; llama.cpp renames it the same way.
    if (texts[i].empty()) texts[i] = "[EMPTY_" + std::to_string(i) + "]";
    bytes += texts[i].size();
  }
  if (bytes > std::numeric_limits<uint32_t>::max()) {
    return InvalidArgumentError("tokenizer.ggml.tokens holds " + std::to_string(bytes) +
                                " bytes of text; at most 4 GiB");
  }
  vocab.texts.Reserve(n, bytes);  // no reallocation below: the map's keys view the table
  for (const std::string& text : texts) vocab.texts.Add(text);
  vocab.ids.reserve(n);
  for (size_t i = 0; i < n; ++i) vocab.ids[vocab.texts[i]] = static_cast<int32_t>(i);
  return OkStatus();
}

Status ReadSpecialIds(const gguf::GgufFile& file, Vocab& vocab) {
  // Defaults when keys are absent: SentencePiece's conventional <unk>=0, <s>=1, </s>=2.
  // (llama.cpp defaults BPE bos/eos to 11, a GPT-2 relic; we leave them absent instead.)
  if (vocab.type == VocabType::kSpm) {
    vocab.unk_id = vocab.size() > 0 ? 0 : -1;
    vocab.bos_id = vocab.size() > 1 ? 1 : -1;
    vocab.eos_id = vocab.size() > 2 ? 2 : -1;
  }
  STREAMD_RETURN_IF_ERROR(ReadTokenId(file, "tokenizer.ggml.bos_token_id", vocab, &vocab.bos_id));
  STREAMD_RETURN_IF_ERROR(ReadTokenId(file, "tokenizer.ggml.eos_token_id", vocab, &vocab.eos_id));
  STREAMD_RETURN_IF_ERROR(
      ReadTokenId(file, "tokenizer.ggml.unknown_token_id", vocab, &vocab.unk_id));
  STREAMD_RETURN_IF_ERROR(
      ReadTokenId(file, "tokenizer.ggml.padding_token_id", vocab, &vocab.pad_id));

  int32_t eom_id = -1, fim_pre = -1, fim_suf = -1, fim_mid = -1;
  int32_t fim_pad = -1, fim_rep = -1, fim_sep = -1;
  STREAMD_RETURN_IF_ERROR(
      ReadOrDetect(file, "tokenizer.ggml.eot_token_id", kEotTexts, vocab, &vocab.eot_id));
  STREAMD_RETURN_IF_ERROR(
      ReadOrDetect(file, "tokenizer.ggml.eom_token_id", kEomTexts, vocab, &eom_id));
  STREAMD_RETURN_IF_ERROR(
      ReadOrDetect(file, "tokenizer.ggml.fim_pre_token_id", kFimPreTexts, vocab, &fim_pre));
  STREAMD_RETURN_IF_ERROR(
      ReadOrDetect(file, "tokenizer.ggml.fim_suf_token_id", kFimSufTexts, vocab, &fim_suf));
  STREAMD_RETURN_IF_ERROR(
      ReadOrDetect(file, "tokenizer.ggml.fim_mid_token_id", kFimMidTexts, vocab, &fim_mid));
  STREAMD_RETURN_IF_ERROR(
      ReadOrDetect(file, "tokenizer.ggml.fim_pad_token_id", kFimPadTexts, vocab, &fim_pad));
  STREAMD_RETURN_IF_ERROR(
      ReadOrDetect(file, "tokenizer.ggml.fim_rep_token_id", kFimRepTexts, vocab, &fim_rep));
  STREAMD_RETURN_IF_ERROR(
      ReadOrDetect(file, "tokenizer.ggml.fim_sep_token_id", kFimSepTexts, vocab, &fim_sep));

  // End of generation: FIM padding/repo/file separators (a code model emits them between
  // documents), every token with an end-of-turn text, and the eos/eot/eom ids.
  std::vector<int32_t>& eog = vocab.eog_ids;
  for (int32_t id : {fim_pad, fim_rep, fim_sep, vocab.eos_id, vocab.eot_id, eom_id}) {
    if (id >= 0) eog.push_back(id);
  }
  for (std::string_view text : kEogTexts) {
    if (auto id = vocab.Find(text)) {
      eog.push_back(*id);
      ForceControl(vocab, *id);
    }
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  return OkStatus();
}

}  // namespace

StatusOr<Vocab> LoadVocab(const gguf::GgufFile& file) {
  Vocab vocab;
  STREAMD_ASSIGN_OR_RETURN(vocab.model_name, file.GetString("tokenizer.ggml.model"));
  if (vocab.model_name == "gpt2") {
    vocab.type = VocabType::kBpe;
  } else if (vocab.model_name == "llama") {
    vocab.type = VocabType::kSpm;
  } else {
    return UnimplementedError("tokenizer.ggml.model '" + vocab.model_name +
                              "' is not supported (supported: 'gpt2' byte-level BPE, "
                              "'llama' SentencePiece)");
  }
  STREAMD_ASSIGN_OR_RETURN(vocab.pre_name, file.GetStringOr("tokenizer.ggml.pre", ""));
  STREAMD_RETURN_IF_ERROR(ReadTokens(file, vocab));
  STREAMD_RETURN_IF_ERROR(ReadSpecialIds(file, vocab));

  // llama.cpp's defaults: SPM adds BOS and a space prefix; BPE adds BOS only for the Llama-3
  // pre-tokenizer family. The file's own flags win.
  const bool llama3 =
      vocab.pre_name == "llama3" || vocab.pre_name == "llama-bpe" || vocab.pre_name == "llama-v3";
  const bool spm = vocab.type == VocabType::kSpm;
  STREAMD_ASSIGN_OR_RETURN(vocab.add_bos,
                           file.GetBoolOr("tokenizer.ggml.add_bos_token", spm || llama3));
  STREAMD_ASSIGN_OR_RETURN(vocab.add_space_prefix,
                           file.GetBoolOr("tokenizer.ggml.add_space_prefix", spm));
  if (!spm) vocab.add_space_prefix = false;  // byte-level BPE encodes spaces itself
  return vocab;
}

}  // namespace streamd::tokenizer
