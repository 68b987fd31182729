#include "engine/tokenizer/byte_unicode.h"

#include <array>

#include "engine/tokenizer/utf8.h"

namespace streamd::tokenizer {
namespace {

bool StandsForItself(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> byte_to_cp;
  std::array<int16_t, 512> cp_to_byte;  // every mapped code point is below U+0200
  std::array<std::string, 256> byte_to_text;

  Tables() {
    cp_to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      byte_to_cp[b] = StandsForItself(b) ? static_cast<char32_t>(b) : next++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
      AppendUtf8(byte_to_cp[b], &byte_to_text[b]);
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

char32_t ByteToCodePoint(uint8_t byte) { return GetTables().byte_to_cp[byte]; }

int CodePointToByte(char32_t code_point) {
  if (code_point >= 512) return -1;
  return GetTables().cp_to_byte[code_point];
}

const std::string& ByteToTokenText(uint8_t byte) { return GetTables().byte_to_text[byte]; }

}  // namespace streamd::tokenizer
