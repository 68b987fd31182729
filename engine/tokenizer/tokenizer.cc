#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "engine/tokenizer/byte_unicode.h"
#include "engine/tokenizer/utf8.h"

namespace streamd::tokenizer {
namespace {

// Longest text Encode() accepts. Symbol offsets are 32-bit, and a prompt this large is a
// client error long before it is a tokenizer problem.
constexpr size_t kMaxTextBytes = size_t{1} << 30;

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

// "<0x0A>" -> 0x0A; -1 when `text` is not a byte token's text.
int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value |= c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

// Byte-level BPE token text -> raw bytes. A code point outside the byte table (never in a
// sane vocabulary) is kept as its own UTF-8, where llama.cpp would print an "[UNK_BYTE...]".
std::string DecodeByteLevel(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t length = 0;
    char32_t cp = 0;
    if (DecodeUtf8(text.substr(pos), &length, &cp) != Utf8Status::kValid) {
      out.append(text.substr(pos, length));
    } else if (int byte = CodePointToByte(cp); byte >= 0) {
      out.push_back(static_cast<char>(byte));
    } else {
      out.append(text.substr(pos, length));
    }
    pos += length;
  }
  return out;
}

std::string ReplaceAll(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t hit = text.find(from); hit != std::string_view::npos; hit = text.find(from, pos)) {
    out.append(text.substr(pos, hit - pos)).append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

// What a token stands for in decoded text (llama.cpp's token_to_piece with special = true).
std::string MakePiece(const Vocab& vocab, int32_t id) {
  const std::string_view text = vocab.texts[id];
  switch (vocab.types[id]) {
    case TokenType::kControl:
    case TokenType::kUserDefined:
    case TokenType::kUnknown:
      return std::string(text);
    case TokenType::kNormal:
      return vocab.type == VocabType::kSpm ? ReplaceAll(text, kSpmSpace, " ")
                                           : DecodeByteLevel(text);
    case TokenType::kByte: {
      const int byte = ParseByteToken(text);
      return byte < 0 ? std::string() : std::string(1, static_cast<char>(byte));
    }
    case TokenType::kUnused:
    case TokenType::kUndefined:
      break;
  }
  return std::string();
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const gguf::GgufFile& file) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  STREAMD_ASSIGN_OR_RETURN(tok->vocab_, LoadVocab(file));
  const Vocab& vocab = tok->vocab_;
  if (vocab.type == VocabType::kBpe) {
    STREAMD_ASSIGN_OR_RETURN(tok->pre_, PreTokenizer::Create(vocab.pre_name));
    STREAMD_ASSIGN_OR_RETURN(std::vector<std::string> merges,
                             file.GetStringArray("tokenizer.ggml.merges"));
    STREAMD_ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::Create(vocab, merges));
    tok->bpe_.emplace(std::move(bpe));
  } else {
    tok->spm_.emplace(SpmModel::Create(vocab));
  }

  // Pieces are never longer than their texts (a space for a 3-byte "▁", one byte for "<0xXX>").
  tok->pieces_.Reserve(vocab.texts.size(), vocab.texts.bytes());
  for (int32_t id = 0; id < vocab.size(); ++id) {
    tok->pieces_.Add(MakePiece(vocab, id));
    if (vocab.IsSpecial(id)) tok->special_tokens_.push_back(id);
  }
  // Longest first, so "<|im_start|>" is cut before a shorter special that it contains.
  std::stable_sort(
      tok->special_tokens_.begin(), tok->special_tokens_.end(),
      [&vocab](int32_t a, int32_t b) { return vocab.texts[a].size() > vocab.texts[b].size(); });
  return tok;
}

std::vector<Tokenizer::Fragment> Tokenizer::Partition(std::string_view text,
                                                      bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({false, -1, text});
  std::vector<Fragment> next;
  // One special token at a time over all fragments, like llama.cpp's tokenizer_st_partition:
  // the result differs from a left-to-right scan only when special texts overlap.
  for (int32_t id : special_tokens_) {
    if (!parse_special && vocab_.types[id] != TokenType::kUserDefined) continue;
    const std::string_view special = vocab_.texts[id];
    next.clear();
    for (const Fragment& fragment : fragments) {
      if (fragment.is_token) {
        next.push_back(fragment);
        continue;
      }
      const std::string_view raw = fragment.text;
      size_t pos = 0;
      for (size_t hit; (hit = raw.find(special, pos)) != std::string_view::npos;
           pos = hit + special.size()) {
        if (hit > pos) next.push_back({false, -1, raw.substr(pos, hit - pos)});
        next.push_back({true, id, {}});
      }
      if (pos < raw.size()) next.push_back({false, -1, raw.substr(pos)});
    }
    std::swap(fragments, next);
  }
  return fragments;
}

StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, bool add_bos,
                                                 bool parse_special) const {
  if (text.size() > kMaxTextBytes) {
    return InvalidArgumentError("text of " + std::to_string(text.size()) +
                                " bytes is longer than the tokenizer limit of " +
                                std::to_string(kMaxTextBytes) + " bytes");
  }
  if (const size_t bad = FindInvalidUtf8(text); bad != std::string_view::npos) {
    char byte[8];
    std::snprintf(byte, sizeof(byte), "0x%02X", static_cast<uint8_t>(text[bad]));
    return InvalidArgumentError("text is not valid UTF-8: byte " + std::string(byte) +
                                " at offset " + std::to_string(bad));
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 2);  // ~4 bytes per token on English text
  if (add_bos && vocab_.bos_id >= 0) ids.push_back(vocab_.bos_id);
  bool after_special = true;  // the start of the text counts as following a special token
  for (const Fragment& fragment : Partition(text, parse_special)) {
    if (fragment.is_token) {
      ids.push_back(fragment.id);
      after_special = true;
    } else if (bpe_) {
      STREAMD_RETURN_IF_ERROR(EncodeBpe(fragment.text, &ids));
    } else {
      EncodeSpm(fragment.text, after_special, &ids);
      after_special = false;
    }
  }
  return ids;
}

Status Tokenizer::EncodeBpe(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<std::string_view> words;
  STREAMD_RETURN_IF_ERROR(pre_->Split(text, &words));
  // Natural text repeats its words, so merge each distinct word once per call. The cache is
  // per call (keys are views into `text`), which keeps Encode() lock-free and bounded.
  std::unordered_map<std::string_view, std::vector<int32_t>> cache;
  std::vector<int32_t> word_ids;
  for (std::string_view word : words) {
    if (word.size() == 1) {  // one byte: no merge possible, not worth a lookup
      bpe_->EncodeWord(vocab_, word, pre_->ignore_merges(), out);
      continue;
    }
    auto [it, inserted] = cache.try_emplace(word);
    if (inserted) bpe_->EncodeWord(vocab_, word, pre_->ignore_merges(), &it->second);
    out->insert(out->end(), it->second.begin(), it->second.end());
  }
  return OkStatus();
}

void Tokenizer::EncodeSpm(std::string_view text, bool after_special,
                          std::vector<int32_t>* out) const {
  std::string escaped;
  escaped.reserve(text.size() + text.size() / 4 + kSpmSpace.size());
  if (vocab_.add_space_prefix && after_special) escaped.append(kSpmSpace);
  for (char c : text) {
    if (c == ' ') {
      escaped.append(kSpmSpace);
    } else {
      escaped.push_back(c);
    }
  }
  spm_->Encode(vocab_, escaped, out);
}

std::string Tokenizer::TokenToPiece(int32_t id) const {
  return vocab_.IsValid(id) ? std::string(pieces_[id]) : std::string();
}

void Tokenizer::AppendDecoded(int32_t id, bool* at_boundary, std::string* out) const {
  if (!vocab_.IsValid(id)) return;
  const std::string_view piece = pieces_[id];
  if (vocab_.IsSpecial(id)) {
    out->append(piece);
    *at_boundary = true;  // Encode() prefixes the fragment after a special token
    return;
  }
  if (piece.empty()) return;
  const bool strip = vocab_.add_space_prefix && *at_boundary && piece.front() == ' ';
  out->append(piece.substr(strip ? 1 : 0));
  *at_boundary = false;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids) const {
  std::string out;
  bool at_boundary = true;
  for (int32_t id : ids) AppendDecoded(id, &at_boundary, &out);
  return out;
}

std::string_view Tokenizer::pre_tokenizer_name() const {
  return pre_ ? std::string_view(pre_->name()) : std::string_view();
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return std::binary_search(vocab_.eog_ids.begin(), vocab_.eog_ids.end(), id);
}

std::string_view Tokenizer::TokenText(int32_t id) const {
  return vocab_.IsValid(id) ? vocab_.texts[id] : std::string_view();
}

}  // namespace streamd::tokenizer
