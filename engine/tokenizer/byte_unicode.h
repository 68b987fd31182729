// GPT-2's reversible byte <-> code point table, used by byte-level BPE vocabularies.
//
// Byte-level BPE stores tokens as text in which every byte of the original string is one code
// point: the printable Latin-1 bytes (0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF) stand for themselves and
// the other 68 bytes, in increasing order, for U+0100, U+0101, ... So a space is "Ġ" (U+0120)
// and a newline "Ċ" (U+010A). Every byte string thus maps to printable text and back.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace streamd::tokenizer {

// The code point that stands for `byte`.
char32_t ByteToCodePoint(uint8_t byte);

// The byte that `code_point` stands for, or -1 when it is outside the table.
int CodePointToByte(char32_t code_point);

// UTF-8 text of the code point that stands for `byte` (what a vocabulary stores).
const std::string& ByteToTokenText(uint8_t byte);

}  // namespace streamd::tokenizer
