// Tokenizer: text <-> token ids for the vocabularies GGUF models carry, matching llama.cpp.
//
// Supported: tokenizer.ggml.model "gpt2" (byte-level BPE; pre-tokenizers listed in
// pretokenizer.h) and "llama" (SentencePiece BPE). docs/TOKENIZER.md has the full story.
//
// Encoding, as llama.cpp's llama_tokenize(): (1) special tokens are cut out of the text as
// whole strings, longest first: user-defined tokens always, control and unknown tokens only
// with parse_special; (2) each remaining fragment is encoded on its own (BPE: pre-tokenize,
// then merge each piece; SPM: prepend a space when the vocab says add_space_prefix and the
// fragment starts the text or follows a special token, escape spaces as "▁", merge).
//
// Decoding is lossless: pieces are concatenated as they are (llama.cpp's clean-up of spaces
// before punctuation is not applied), special tokens render as their text, and for SPM with
// add_space_prefix the space that encoding added is removed again, at the start and after
// each special token (llama.cpp removes only the first). The output of Decode() may
// be invalid UTF-8 when the ids are (a byte token on its own); IncrementalDetokenizer is the
// streaming form that only ever emits valid UTF-8.
//
// Thread safety: immutable after FromGguf(); every method may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/spm.h"
#include "engine/tokenizer/vocab.h"
#include "engine/util/status.h"

namespace streamd::tokenizer {

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from `file`; keeps no reference to it. Errors name the key: an
  // unsupported tokenizer.ggml.model is UNIMPLEMENTED, an unknown tokenizer.ggml.pre or a
  // malformed array INVALID_ARGUMENT.
  static StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const gguf::GgufFile& file);

  // Token ids of `text`. `add_bos` prepends the BOS id (pass add_bos() for the model's
  // choice; ignored when the vocabulary has no BOS). `parse_special` lets control-token texts
  // such as "<|im_start|>" become their ids; without it they are encoded as plain text.
  // Errors: INVALID_ARGUMENT for invalid UTF-8 (naming the byte offset) or text over 1 GiB.
  StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_bos,
                                        bool parse_special) const;

  // The bytes token `id` stands for: control/user-defined tokens render as their text, SPM
  // "▁" becomes a space and <0xXX> that byte, byte-level BPE text maps back to raw bytes.
  // Unused/undefined tokens and invalid ids give "". May be part of a UTF-8 character.
  std::string TokenToPiece(int32_t id) const;

  // The text of `ids` (invalid ids are skipped), read as a whole text: for SPM, the space
  // Encode() adds at the start and after each special token is dropped again, so
  // Decode(Encode(t, false, p)) == t for every valid UTF-8 t and either p, except that SPM
  // cannot tell a literal U+2581 "▁" in t from an escaped space: it decodes as a space, and
  // that a byte the vocabulary has no token for is dropped by Encode(), as llama.cpp drops
  // it (SmolLM2 lacks 04 06 13 14 16 1D and the 4-byte leads F1 F2).
  std::string Decode(std::span<const int32_t> ids) const;

  // Decode() one token at a time. `*at_boundary` carries the SPM leading-space rule across
  // calls: it starts true at the start of a text and is updated by each call (a special token
  // sets it; any other non-empty piece clears it, having dropped one leading space if set).
  void AppendDecoded(int32_t id, bool* at_boundary, std::string* out) const;

  int32_t vocab_size() const { return vocab_.size(); }
  int32_t bos_id() const { return vocab_.bos_id; }  // -1 when absent
  int32_t eos_id() const { return vocab_.eos_id; }  // -1 when absent
  int32_t eot_id() const { return vocab_.eot_id; }  // -1 when absent
  int32_t unk_id() const { return vocab_.unk_id; }  // -1 when absent
  int32_t pad_id() const { return vocab_.pad_id; }  // -1 when absent
  // Whether the model wants BOS prepended to a prompt (tokenizer.ggml.add_bos_token).
  bool add_bos() const { return vocab_.add_bos; }
  VocabType type() const { return vocab_.type; }
  // tokenizer.ggml.pre as applied ("default" when absent); "" for SPM, which has none.
  std::string_view pre_tokenizer_name() const;

  // Tokens that end a generation (eos, eot, <|im_end|>, <|endoftext|>, ...); see vocab.cc.
  bool IsEndOfGeneration(int32_t id) const;
  const std::vector<int32_t>& end_of_generation_ids() const { return vocab_.eog_ids; }
  bool IsValidId(int32_t id) const { return vocab_.IsValid(id); }
  // Control, user-defined and unknown tokens.
  bool IsSpecial(int32_t id) const { return vocab_.IsValid(id) && vocab_.IsSpecial(id); }
  // kUndefined for an invalid id.
  TokenType token_type(int32_t id) const {
    return vocab_.IsValid(id) ? vocab_.types[id] : TokenType::kUndefined;
  }

  // The token's text as the vocabulary stores it ("Ġthe", "▁the", "<0x0A>"); "" if invalid.
  std::string_view TokenText(int32_t id) const;
  // The id whose stored text is exactly `text`.
  std::optional<int32_t> FindToken(std::string_view text) const { return vocab_.Find(text); }

 private:
  Tokenizer() = default;

  struct Fragment {
    bool is_token;
    int32_t id;             // when is_token
    std::string_view text;  // otherwise: a view into the text being encoded
  };
  // Cuts special tokens out of `text` (step 1 above).
  std::vector<Fragment> Partition(std::string_view text, bool parse_special) const;
  Status EncodeBpe(std::string_view text, std::vector<int32_t>* out) const;
  void EncodeSpm(std::string_view text, bool after_special, std::vector<int32_t>* out) const;

  Vocab vocab_;
  StringTable pieces_;                   // TokenToPiece() of every id, built once
  std::vector<int32_t> special_tokens_;  // candidates for Partition(), longest text first
  std::unique_ptr<PreTokenizer> pre_;    // BPE only
  std::optional<BpeModel> bpe_;
  std::optional<SpmModel> spm_;
};

}  // namespace streamd::tokenizer
