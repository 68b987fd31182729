// UTF-8 helpers shared by the tokenizer, the incremental detokenizer and the chat template.
//
// Validity follows the Unicode standard (Table 3-7): no overlong forms, no surrogates, nothing
// above U+10FFFF. Replacement follows "substitution of maximal subparts" (the W3C/WHATWG and
// Python behaviour): each maximal prefix of a would-be sequence that cannot be completed
// becomes one U+FFFD, so a lone bad byte costs one replacement character, not several.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace streamd::tokenizer {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

enum class Utf8Status {
  kValid,       // a complete, valid sequence
  kIncomplete,  // the input ends inside a sequence that could still become valid
  kInvalid,     // no continuation can make these bytes valid
};

// Examines the sequence at the start of `bytes` (which must not be empty).
//   kValid:      *length is the sequence length (1..4), *code_point its value.
//   kIncomplete: *length == bytes.size(); more bytes may complete it.
//   kInvalid:    *length is the maximal invalid subpart (>= 1) to replace with one U+FFFD.
Utf8Status DecodeUtf8(std::string_view bytes, size_t* length, char32_t* code_point);

// Byte offset of the first byte of `text` that does not begin a complete, valid sequence, or
// std::string_view::npos when all of `text` is valid UTF-8.
size_t FindInvalidUtf8(std::string_view text);

// Appends `bytes` to `out`, replacing every maximal invalid subpart with U+FFFD. When
// `hold_incomplete_tail` is set, a trailing sequence that is merely incomplete is left
// unconsumed (so a later call can complete it). Returns the number of bytes consumed.
size_t AppendSanitizedUtf8(std::string_view bytes, bool hold_incomplete_tail, std::string* out);

// Appends the UTF-8 encoding of `code_point` (which must be a Unicode scalar value).
void AppendUtf8(char32_t code_point, std::string* out);

}  // namespace streamd::tokenizer
