// The value of one hexadecimal digit, either case; -1 for any other character. Session ids and
// the API keys file's hashes are read with it.
#pragma once

namespace streamd {

constexpr int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace streamd
