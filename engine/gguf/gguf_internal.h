// Private to streamd_gguf (include only from engine/gguf/*.cc): the message helpers and the
// GGUF format-table lookups that the reader, the typed getters and the type tables share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>

namespace streamd::gguf::internal {

// Message building without <format> (GCC 12 lacks it).
inline void Append(std::string& out, std::string_view s) { out += s; }
template <typename T>
requires std::is_arithmetic_v<T>
void Append(std::string& out, T v) { out += std::to_string(v); }
template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  (Append(out, args), ...);
  return out;
}

// Quotes file-controlled text for a one-line message: escapes control and non-ASCII bytes and
// shortens long strings, so a hostile key cannot forge log lines or flood them.
inline std::string Quote(std::string_view s) {
  constexpr size_t kMaxShown = 96;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char buf[5];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  out += s.size() > kMaxShown ? Cat("...' (", s.size(), " bytes)") : std::string("'");
  return out;
}

// Format tables (gguf_types.cc).
// Whether `t` is a GGUF metadata value type id.
bool IsKnownValueType(uint32_t t);
// Size of one encoded value of known type `t` (for strings and arrays, of the fixed-size
// prefix): the floor used to reject element counts that cannot fit in the remaining bytes.
uint64_t ValueTypeMinBytes(uint32_t t);
// Whether `type_id` is any ggml tensor type id, supported or not (including removed ones).
bool IsGgmlTypeId(uint32_t type_id);

}  // namespace streamd::gguf::internal
