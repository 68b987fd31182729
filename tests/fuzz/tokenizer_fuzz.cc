// libFuzzer target for the tokenizer where it meets untrusted input: prompt text from clients
// (Encode, with and without parse_special) and token ids (Decode, TokenToPiece and the
// streaming IncrementalDetokenizer), on both real vocabularies: the default model's byte-level
// BPE ($STREAMD_MODEL, SmolLM2) and llama.cpp's SentencePiece test vocabulary
// ($STREAMD_SPM_VOCAB, scripts/fetch-test-vocab.sh). Both are loaded once, in
// LLVMFuzzerInitialize; without them the fuzzer exits with instructions.
//
// Besides crashes and sanitizer reports it traps on a broken promise of tokenizer.h and
// incremental_detokenizer.h (docs/TOKENIZER.md):
//   - Encode() fails exactly on invalid UTF-8, with INVALID_ARGUMENT naming the first bad byte;
//   - every id it returns is valid, BOS comes first when asked for, and without parse_special
//     no control token comes out (a client cannot forge <|im_start|>);
//   - Decode(Encode(t, false, p)) == t for valid UTF-8 t and either p, but for the documented
//     exceptions: bytes the vocabulary has no token for are dropped (as llama.cpp drops them),
//     and SPM decodes a literal U+2581 as a space;
//   - Decode() skips invalid ids (negative, >= vocab_size): the same text as without them;
//     TokenToPiece()/TokenText() of an invalid id are empty;
//   - BPE: Decode() is the concatenation of the pieces;
//   - the streaming detokenizer, fed one id at a time, emits only valid UTF-8, holds back at
//     most 3 bytes, and emits in all exactly Decode() with invalid sequences replaced as
//     AppendSanitizedUtf8() replaces them (so exactly Decode() when that is valid UTF-8).
//
// Input: byte 0 selects the vocabulary (bit 0: BPE/SPM), the mode (bits 1-2: encode plain,
// encode with parse_special, decode ids) and add_bos (bit 3); the rest is the text, or the
// ids, 3 bytes each (see ReadIds()). Invalid UTF-8 text is checked to be rejected and then
// encoded sanitized, so that random bytes still reach the encoder.
//
// Built twice: as tokenizer_fuzz (libFuzzer main) and, with STREAMD_TOKENIZER_FUZZ_SEEDS, as
// tokenizer_fuzz_seeds, which writes the seed corpus (texts and encoded id sequences).
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/byte_unicode.h"
#include "engine/tokenizer/incremental_detokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace {

using streamd::gguf::GgufFile;
using streamd::tokenizer::IncrementalDetokenizer;
using streamd::tokenizer::Tokenizer;
using streamd::tokenizer::TokenType;

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581

enum Mode : uint8_t { kEncodePlain = 0, kEncodeSpecial = 1, kDecode = 2, kDecodeToo = 3 };

struct Vocabulary {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
  bool spm = false;
  // SPM: some special token's text contains U+2581, so the round trip of a text holding one
  // cannot be predicted by replacing it (not so for the LLaMA vocabulary).
  bool special_has_spm_space = false;
  // Bytes the vocabulary has no token for (BPE: no byte-level stand-in; SPM: no <0xXX>).
  // Encode() drops them, as llama.cpp does, so the round trip loses exactly these (SmolLM2:
  // 04 06 13 14 16 1D, the 4-byte leads F1 F2, and bytes UTF-8 never uses).
  std::array<bool, 256> dropped{};
};

Vocabulary g_vocab[2];  // [0] BPE ($STREAMD_MODEL), [1] SPM ($STREAMD_SPM_VOCAB)

// A broken promise: print what and where, then trap so libFuzzer keeps the input.
[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "tokenizer_fuzz: property violated: %s\n", what);
  __builtin_trap();
}
#define CHECK_PROPERTY(cond)  \
  do {                        \
    if (!(cond)) Fail(#cond); \
  } while (0)

Vocabulary Load(const char* env, const char* how) {
  const char* path = std::getenv(env);
  if (path == nullptr || *path == '\0') {
    std::fprintf(stderr, "tokenizer_fuzz: %s is not set; %s (scripts/fuzz-smoke.sh sets it)\n", env,
                 how);
    std::exit(2);
  }
  auto file = GgufFile::Open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: %s=%s: %s\n", env, path,
                 file.status().ToString().c_str());
    std::exit(2);
  }
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: %s=%s: %s\n", env, path, tok.status().ToString().c_str());
    std::exit(2);
  }
  Vocabulary v;
  v.spm = (*tok)->type() == streamd::tokenizer::VocabType::kSpm;
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    v.dropped[b] =
        !(*tok)->FindToken(v.spm ? std::string_view(hex) : streamd::tokenizer::ByteToTokenText(b));
  }
  for (int32_t id = 0; id < (*tok)->vocab_size(); ++id) {
    if ((*tok)->IsSpecial(id) && (*tok)->TokenText(id).find(kSpmSpace) != std::string_view::npos) {
      v.special_has_spm_space = true;
    }
  }
  v.file = std::move(*file);
  v.tokenizer = std::move(*tok);
  return v;
}

void LoadVocabularies() {
  g_vocab[0] = Load("STREAMD_MODEL", "export STREAMD_MODEL=$(scripts/fetch-model.sh)");
  g_vocab[1] = Load("STREAMD_SPM_VOCAB", "export STREAMD_SPM_VOCAB=$(scripts/fetch-test-vocab.sh)");
  if (g_vocab[0].spm || !g_vocab[1].spm) {
    std::fprintf(stderr,
                 "tokenizer_fuzz: STREAMD_MODEL must be a byte-level BPE vocabulary and "
                 "STREAMD_SPM_VOCAB a SentencePiece one\n");
    std::exit(2);
  }
}

bool IsValidUtf8(std::string_view s) {
  return streamd::tokenizer::FindInvalidUtf8(s) == std::string_view::npos;
}

std::string Sanitized(std::string_view s) {
  std::string out;
  streamd::tokenizer::AppendSanitizedUtf8(s, /*hold_incomplete_tail=*/false, &out);
  return out;
}

std::string ReplaceSpmSpaces(std::string_view s) {
  std::string out;
  for (size_t pos = 0; pos < s.size();) {
    if (s.substr(pos).starts_with(kSpmSpace)) {
      out.push_back(' ');
      pos += kSpmSpace.size();
    } else {
      out.push_back(s[pos++]);
    }
  }
  return out;
}

// Streams `ids` through an IncrementalDetokenizer one at a time; checks each chunk.
std::string Stream(const Tokenizer& tok, std::span<const int32_t> ids) {
  IncrementalDetokenizer detok(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string chunk = detok.Push(id);
    CHECK_PROPERTY(IsValidUtf8(chunk));
    CHECK_PROPERTY(detok.pending_bytes() <= 3);
    streamed += chunk;
  }
  const std::string rest = detok.Flush();
  CHECK_PROPERTY(IsValidUtf8(rest));
  CHECK_PROPERTY(detok.pending_bytes() == 0);
  return streamed + rest;
}

void CheckEncode(const Vocabulary& v, std::string_view input, bool parse_special, bool add_bos) {
  const Tokenizer& tok = *v.tokenizer;
  std::string text(input);
  if (!IsValidUtf8(input)) {
    auto rejected = tok.Encode(input, add_bos, parse_special);
    CHECK_PROPERTY(!rejected.ok());
    CHECK_PROPERTY(rejected.status().code() == streamd::StatusCode::kInvalidArgument);
    const std::string offset =
        "at offset " + std::to_string(streamd::tokenizer::FindInvalidUtf8(input));
    CHECK_PROPERTY(rejected.status().message().find(offset) != std::string::npos);
    text = Sanitized(input);
    CHECK_PROPERTY(IsValidUtf8(text));
  }
  auto encoded = tok.Encode(text, add_bos, parse_special);
  CHECK_PROPERTY(encoded.ok());
  std::span<const int32_t> ids = *encoded;
  if (add_bos && tok.bos_id() >= 0) {
    CHECK_PROPERTY(!ids.empty() && ids.front() == tok.bos_id());
    ids = ids.subspan(1);
  }
  for (int32_t id : ids) {
    CHECK_PROPERTY(tok.IsValidId(id));
    if (!parse_special) CHECK_PROPERTY(tok.token_type(id) != TokenType::kControl);
  }
  if (text.empty()) CHECK_PROPERTY(ids.empty());

  // The text as it survives encoding: bytes without a token are dropped (the documented
  // exception; no special token's text holds such a byte in either vocabulary).
  std::string kept;
  for (char c : text) {
    if (!v.dropped[static_cast<uint8_t>(c)]) kept.push_back(c);
  }
  const std::string decoded = tok.Decode(ids);
  if (!v.spm) {
    CHECK_PROPERTY(decoded == kept);
  } else if (kept.find(kSpmSpace) == std::string::npos) {
    CHECK_PROPERTY(decoded == kept);
  } else if (!v.special_has_spm_space) {
    CHECK_PROPERTY(decoded == ReplaceSpmSpaces(kept));
  }
  // Dropping a 4-byte lead leaves its continuation bytes: the decoded text is invalid then.
  CHECK_PROPERTY(Stream(tok, ids) == Sanitized(decoded));
}

// Ids, 3 bytes each (little endian): the top two bits of the last byte say which kind, so
// that most ids are valid and some are not: 0-2 a valid id (the value modulo vocab_size), 3
// an invalid one (negative, vocab_size and just above it, INT32_MIN/MAX, or far above).
std::vector<int32_t> ReadIds(std::span<const uint8_t> bytes, int32_t vocab_size) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 3 <= bytes.size(); i += 3) {
    const uint32_t value = bytes[i] | (bytes[i + 1] << 8) | ((bytes[i + 2] & 0x3F) << 16);
    if ((bytes[i + 2] >> 6) != 3) {
      ids.push_back(static_cast<int32_t>(value % static_cast<uint32_t>(vocab_size)));
      continue;
    }
    switch (value % 6) {
      case 0:
        ids.push_back(-1 - static_cast<int32_t>(value >> 3));
        break;
      case 1:
        ids.push_back(vocab_size + static_cast<int32_t>(value >> 3));
        break;
      case 2:
        ids.push_back(INT32_MIN);
        break;
      case 3:
        ids.push_back(INT32_MAX);
        break;
      case 4:
        ids.push_back(vocab_size);
        break;
      default:
        ids.push_back(static_cast<int32_t>(value << 9) | INT32_MIN);
        break;
    }
  }
  return ids;
}

void CheckDecode(const Vocabulary& v, std::span<const uint8_t> payload) {
  const Tokenizer& tok = *v.tokenizer;
  const std::vector<int32_t> ids = ReadIds(payload, tok.vocab_size());
  std::vector<int32_t> valid;
  std::string pieces;
  for (int32_t id : ids) {
    if (tok.IsValidId(id)) {
      valid.push_back(id);
      pieces += tok.TokenToPiece(id);
    } else {
      CHECK_PROPERTY(tok.TokenToPiece(id).empty());
      CHECK_PROPERTY(tok.TokenText(id).empty());
      CHECK_PROPERTY(!tok.IsSpecial(id) && !tok.IsEndOfGeneration(id));
      CHECK_PROPERTY(tok.token_type(id) == TokenType::kUndefined);
    }
  }
  const std::string decoded = tok.Decode(ids);
  CHECK_PROPERTY(decoded == tok.Decode(valid));
  if (!v.spm) CHECK_PROPERTY(decoded == pieces);
  CHECK_PROPERTY(Stream(tok, ids) == Sanitized(decoded));
}

// One input: checks every property that applies to it.
void RunOne(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const uint8_t control = data[0];
  const Vocabulary& v = g_vocab[control & 1];
  const Mode mode = static_cast<Mode>((control >> 1) & 3);
  const bool add_bos = (control >> 3) & 1;
  const std::span<const uint8_t> payload(data + 1, size - 1);
  switch (mode) {
    case kEncodePlain:
    case kEncodeSpecial:
      CheckEncode(v,
                  std::string_view(reinterpret_cast<const char*>(payload.data()), payload.size()),
                  mode == kEncodeSpecial, add_bos);
      break;
    case kDecode:
    case kDecodeToo:
      CheckDecode(v, payload);
      break;
  }
}

}  // namespace

#ifndef STREAMD_TOKENIZER_FUZZ_SEEDS

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  LoadVocabularies();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RunOne(data, size);
  return 0;
}

#else  // STREAMD_TOKENIZER_FUZZ_SEEDS

#include <fstream>

namespace {

// Writes one seed, after checking it: a seed that breaks a property is a bug found here.
void Save(const std::string& dir, const std::string& name, uint8_t control,
          std::string_view payload) {
  const std::string bytes = std::string(1, static_cast<char>(control)).append(payload);
  RunOne(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  std::ofstream(dir + "/" + name, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The inverse of ReadIds() for valid ids.
std::string WriteIds(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) {
    const auto u = static_cast<uint32_t>(id);
    out.push_back(static_cast<char>(u & 0xFF));
    out.push_back(static_cast<char>((u >> 8) & 0xFF));
    out.push_back(static_cast<char>((u >> 16) & 0x3F));
  }
  return out;
}

// Texts that reach the tricky paths: whitespace runs, CR/LF, digits, contractions, scripts,
// combining marks, emoji sequences, every special text of both vocabularies, U+2581, and
// prompt-shaped text with ChatML markers.
const char* const kTexts[] = {
    "Hello world",
    "  leading spaces,   inner runs\tand a trailing one ",
    "line\nbreaks\r\nand\n\n\nblank lines\n",
    "It's we'll they'd I'M you're 'tis",
    "2024-01-31 12:34:56.789 +1e-10 0x1F 1,234,567",
    "caf\xC3\xA9 na\xC3\xAFve \xE2\x82\xAC"
    "42 \xC3\x9F",
    "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C \xED\x95\x9C\xEA\xB5\xAD\xEC\x96"
    "\xB4 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
    "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 "
    "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87",
    "e\xCC\x81 a\xCC\x8A\xCC\x81 \xE2\x80\x8D \xEF\xBB\xBF zero\xE2\x80\x8Bwidth",
    "\xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9"
    "\xE2\x80\x8D\xF0\x9F\x91\xA7 \xF0\x9F\x87\xAB\xF0\x9F\x87\xB7",
    "\xC2\xA0nbsp\xE3\x80\x80ideographic\xE2\x80\xA8separator\xC2\x85nel",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><reponame>x<|im_end|>",
    "<s>[INST] hi [/INST] ok </s><unk>",
    "<0x41><0xE2> <|im_start|<|im_start|>>",
    "\xE2\x96\x81leading \xE2\x96\x81\xE2\x96\x81 U+2581",
    "def f(x):\n    return {'a': [1, 2]}  # comment\n",
    "\x01\x02\x1F\x7F control bytes",
    "\xF4\x8F\xBF\xBF \xEF\xBF\xBF \xEE\x80\x80 max, noncharacter, private use",
};

// Byte strings that are not UTF-8: a lone continuation, overlong, surrogate, truncated.
const char* const kInvalid[] = {"a\x80z", "\xC0\xAF", "\xED\xA0\x80", "ok \xF0\x9F\x98",
                                "\xFF\xFE"};

}  // namespace

// tokenizer_fuzz_seeds DIR (vocabularies from $STREAMD_MODEL and $STREAMD_SPM_VOCAB)
int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  LoadVocabularies();
  const std::string dir = argv[1];
  int n = 0;
  for (uint8_t vocab : {0, 1}) {
    const Tokenizer& tok = *g_vocab[vocab].tokenizer;
    for (const char* text : kTexts) {
      Save(dir, "text_" + std::to_string(n++), vocab | (kEncodePlain << 1), text);
      Save(dir, "text_" + std::to_string(n++), vocab | (kEncodeSpecial << 1) | 8, text);
      auto ids = tok.Encode(text, true, true);
      if (ids.ok()) Save(dir, "ids_" + std::to_string(n++), vocab | (kDecode << 1), WriteIds(*ids));
    }
    for (const char* text : kInvalid) {
      Save(dir, "invalid_" + std::to_string(n++), vocab | (kEncodeSpecial << 1), text);
    }
    // Every special token, and some ids past the end of the vocabulary.
    std::vector<int32_t> special;
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
      if (tok.IsSpecial(id)) special.push_back(id);
    }
    std::string ids = WriteIds(special);
    ids += std::string("\x00\x00\xC0\x07\x00\xC0\x01\x00\xC0", 9);  // invalid ids (kind 3)
    Save(dir, "special_ids_" + std::to_string(n++), vocab | (kDecode << 1), ids);
  }
  return 0;
}

#endif  // STREAMD_TOKENIZER_FUZZ_SEEDS
