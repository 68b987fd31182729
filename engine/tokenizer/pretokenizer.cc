#include "engine/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

namespace streamd::tokenizer {
namespace {

// GPT-2's split: contractions, optional space + letters / numbers / other symbols, and runs
// of whitespace that leave the last space to the next word ("a   b" -> "a", "  ", " b").
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

// Llama-3's split, as llama.cpp adapts it (case-insensitive contractions spelled out):
// numbers in groups of at most 3 digits, and newlines kept apart from other whitespace.
constexpr std::string_view kLlama3Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2's split (the tokenizer.json of Qwen2, Qwen2.5 and Qwen3), as llama.cpp adapts it:
// Llama-3's, except that every digit is a piece of its own.
constexpr std::string_view kQwen2Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)"
    R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen3.5's split: Qwen2's, with combining marks (\p{M}) kept inside words instead of
// counting as symbols, so a Devanagari or Thai word with vowel signs stays one piece.
constexpr std::string_view kQwen35Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?)"
    R"([\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// llama.cpp's whitespace (unicode_set_whitespace in src/unicode-data.cpp), spelled out because
// PCRE2's \s in UCP mode also counts U+180E MONGOLIAN VOWEL SEPARATOR, which Unicode moved to
// the format category (Cf) in 6.3 and llama.cpp treats as a symbol.
constexpr std::string_view kWhitespace =
    R"(\t\n\x{0B}\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F})"
    R"(\x{205F}\x{3000})";

// Rewrites \s and \S in `pattern` to llama.cpp's whitespace set (inside a character class,
// \s becomes the bare list).
std::string ExpandWhitespace(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += in_class ? std::string(kWhitespace) : "[" + std::string(kWhitespace) + "]";
      } else if (next == 'S' && !in_class) {
        out += "[^" + std::string(kWhitespace) + "]";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (c == '[') {
      in_class = true;
    } else if (c == ']') {
      in_class = false;
    }
    out += c;
  }
  return out;
}

// One pre-tokenizer: the tokenizer.ggml.pre names llama.cpp (src/llama-vocab.cpp) splits
// with the same regex list, and that list.
struct PreTokenizerSpec {
  std::vector<std::string_view> names;
  std::vector<std::string_view> regexes;
  bool ignore_merges = false;
};

const std::vector<PreTokenizerSpec>& Specs() {
  static const auto* specs = new std::vector<PreTokenizerSpec>{
      // Also "" (no tokenizer.ggml.pre): LookUpSpec() maps it here.
      {{"default"}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Regex, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {{"gpt2", "gpt-2", "mpt"}, {kGpt2Regex}},
      // Every digit is a word of its own (SmolLM's tokenizer.json: Digits(individual_digits)).
      {{"smollm", "starcoder", "refact", "command-r"}, {R"(\p{N})", kGpt2Regex}},
      // The default's, with the backtick among the punctuation and no \p{N}+ pass.
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2Regex, "[0-9][0-9][0-9]"}},
      // Llama-3 vocabularies emit a whole piece as one token when the vocabulary has it.
      {{"llama3", "llama-bpe", "llama-v3"}, {kLlama3Regex}, /*ignore_merges=*/true},
      {{"qwen2", "deepseek-r1-qwen"}, {kQwen2Regex}},
      {{"qwen35"}, {kQwen35Regex}},
  };
  return *specs;
}

const PreTokenizerSpec* LookUpSpec(std::string_view name) {
  if (name.empty()) name = "default";
  for (const PreTokenizerSpec& spec : Specs()) {
    for (std::string_view known : spec.names) {
      if (known == name) return &spec;
    }
  }
  return nullptr;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  std::string pattern;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string_view> PreTokenizer::SupportedNames() {
  std::vector<std::string_view> names;
  for (const PreTokenizerSpec& spec : Specs()) {
    names.insert(names.end(), spec.names.begin(), spec.names.end());
  }
  return names;
}

bool PreTokenizer::IsSupported(std::string_view name) { return LookUpSpec(name) != nullptr; }

StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(std::string_view name) {
  const PreTokenizerSpec* spec = LookUpSpec(name);
  if (spec == nullptr) {
    std::string supported;
    for (std::string_view known : SupportedNames()) {
      supported.append(supported.empty() ? "" : ", ").append(known);
    }
    return InvalidArgumentError("tokenizer.ggml.pre '" + std::string(name) +
                                "' is not supported (supported: " + supported + ")");
  }
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  pre->name_ = name.empty() ? "default" : std::string(name);
  pre->ignore_merges_ = spec->ignore_merges;
  for (std::string_view pattern : spec->regexes) {
    auto regex = std::make_unique<Regex>();
    regex->pattern = ExpandWhitespace(pattern);
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    regex->code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex->pattern.data()), regex->pattern.size(),
                      PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
    if (regex->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return InternalError("pre-tokenizer regex '" + regex->pattern + "' does not compile at " +
                           std::to_string(error_offset) + ": " +
                           reinterpret_cast<const char*>(message));
    }
    // JIT is an optimisation only: where it is unavailable pcre2_match() interprets.
    (void)pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);
    pre->regexes_.push_back(std::move(regex));
  }
  return pre;
}

Status PreTokenizer::Split(std::string_view text, std::vector<std::string_view>* pieces) const {
  if (text.empty()) return OkStatus();
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
      pcre2_match_data_create(1, nullptr), pcre2_match_data_free);
  if (match == nullptr) return ResourceExhaustedError("pre-tokenizer: out of memory");

  std::vector<std::string_view> current = {text};
  std::vector<std::string_view> next;
  for (size_t r = 0; r < regexes_.size(); ++r) {
    const Regex& regex = *regexes_[r];
    next.clear();
    for (std::string_view piece : current) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t gap_start = 0;  // end of the previous match: text up to a match is a gap piece
      size_t offset = 0;
      while (offset < piece.size()) {
        // The text was validated once by the caller, so skip PCRE2's per-call UTF check.
        int rc = pcre2_match(regex.code, subject, piece.size(), offset, PCRE2_NO_UTF_CHECK,
                             match.get(), nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
          // Pathological backtracking in the JIT's small stack: the interpreter uses the heap.
          rc = pcre2_match(regex.code, subject, piece.size(), offset,
                           PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, match.get(), nullptr);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR message[256];
          pcre2_get_error_message(rc, message, sizeof(message));
          return InternalError("pre-tokenizer regex '" + regex.pattern +
                               "' failed: " + reinterpret_cast<const char*>(message));
        }
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
        const size_t start = ovector[0];
        const size_t end = ovector[1];
        if (start > gap_start) next.push_back(piece.substr(gap_start, start - gap_start));
        if (end > start) {
          next.push_back(piece.substr(start, end - start));
          offset = end;
        } else {
          // None of our regexes matches empty; if one did, step over one code point.
          offset = end + 1;
          while (offset < piece.size() && (static_cast<uint8_t>(piece[offset]) & 0xC0) == 0x80) {
            ++offset;
          }
          continue;  // the empty match is no piece and no gap boundary
        }
        gap_start = end;
      }
      if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
    }
    std::swap(current, next);
  }
  pieces->insert(pieces->end(), current.begin(), current.end());
  return OkStatus();
}

}  // namespace streamd::tokenizer
