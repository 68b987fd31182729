#include "engine/tokenizer/utf8.h"

#include <cstdint>

#include "kernels/common/check.h"

namespace streamd::tokenizer {
namespace {

// Allowed range of the second byte for each lead byte; later continuation bytes are 80..BF.
// The narrowed ranges are what exclude overlongs (E0, F0), surrogates (ED) and > U+10FFFF (F4).
struct LeadInfo {
  int length;  // 0: not a lead byte
  uint8_t second_lo;
  uint8_t second_hi;
};

LeadInfo ClassifyLead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};  // continuation byte or overlong 2-byte lead
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};  // F5..FF never appear in UTF-8
}

}  // namespace

Utf8Status DecodeUtf8(std::string_view bytes, size_t* length, char32_t* code_point) {
  STREAMD_CHECK(!bytes.empty());
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const LeadInfo lead = ClassifyLead(p[0]);
  if (lead.length == 0) {
    *length = 1;
    return Utf8Status::kInvalid;
  }
  if (lead.length == 1) {
    *length = 1;
    *code_point = p[0];
    return Utf8Status::kValid;
  }
  static constexpr uint8_t kLeadMask[5] = {0, 0, 0x1F, 0x0F, 0x07};
  char32_t cp = p[0] & kLeadMask[lead.length];
  for (int i = 1; i < lead.length; ++i) {
    if (static_cast<size_t>(i) == bytes.size()) {
      *length = bytes.size();
      return Utf8Status::kIncomplete;
    }
    const uint8_t lo = i == 1 ? lead.second_lo : 0x80;
    const uint8_t hi = i == 1 ? lead.second_hi : 0xBF;
    if (p[i] < lo || p[i] > hi) {
      *length = static_cast<size_t>(i);  // the lead plus the continuations that were fine
      return Utf8Status::kInvalid;
    }
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  *length = static_cast<size_t>(lead.length);
  *code_point = cp;
  return Utf8Status::kValid;
}

size_t FindInvalidUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII fast path: most text the daemon sees is ASCII.
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t length = 0;
    char32_t cp = 0;
    if (DecodeUtf8(text.substr(pos), &length, &cp) != Utf8Status::kValid) return pos;
    pos += length;
  }
  return std::string_view::npos;
}

size_t AppendSanitizedUtf8(std::string_view bytes, bool hold_incomplete_tail, std::string* out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t length = 0;
    char32_t cp = 0;
    switch (DecodeUtf8(bytes.substr(pos), &length, &cp)) {
      case Utf8Status::kValid:
        out->append(bytes.substr(pos, length));
        break;
      case Utf8Status::kIncomplete:
        if (hold_incomplete_tail) return pos;
        out->append(kReplacementChar);
        break;
      case Utf8Status::kInvalid:
        out->append(kReplacementChar);
        break;
    }
    pos += length;
  }
  return pos;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace streamd::tokenizer
