#include "engine/util/session_id.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/util/hex.h"
#include "kernels/common/check.h"

namespace streamd {
namespace {

// `text` quoted for an error message, which must stay one line of valid UTF-8 whatever the input
// (it becomes a proto `string` and a log line): at most 40 bytes, printable ASCII as is, every
// other byte as \xNN.
std::string Quoted(std::string_view text) {
  static constexpr size_t kMaxBytes = 40;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (size_t i = 0; i < text.size() && i < kMaxBytes; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  if (text.size() > kMaxBytes) out += "...";
  return out + "\"";
}

}  // namespace

SessionId SessionId::Random() {
  while (true) {
    uint64_t words[2];
    size_t got = 0;
    while (got < sizeof(words)) {
      const ssize_t n = getrandom(reinterpret_cast<char*>(words) + got, sizeof(words) - got, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        // Ids must never repeat; without the kernel's randomness there is no safe way on.
        STREAMD_CHECK_MSG(false, std::strerror(errno));
      }
      got += static_cast<size_t>(n);
    }
    const SessionId id{words[0], words[1]};
    if (id.valid()) return id;
  }
}

StatusOr<SessionId> SessionId::Parse(std::string_view text, std::string_view what) {
  if (text.size() != 32) {
    return InvalidArgumentError(
        std::string(what) + " " + Quoted(text) + " is not a session id (32 hex digits; it has " +
        std::to_string(text.size()) + (text.size() == 1 ? " byte)" : " bytes)"));
  }
  uint64_t words[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const int v = HexDigitValue(text[i]);
    if (v < 0) {
      return InvalidArgumentError(std::string(what) + ": character " + std::to_string(i) + " of " +
                                  Quoted(text) + " is not a hex digit");
    }
    words[i / 16] = (words[i / 16] << 4) | static_cast<uint64_t>(v);
  }
  const SessionId id{words[0], words[1]};
  if (!id.valid()) {
    return InvalidArgumentError(std::string(what) + " is the all-zero id, which names no session");
  }
  return id;
}

std::string SessionId::ToString() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = kHex[(hi >> (4 * i)) & 0xf];
    out[31 - i] = kHex[(lo >> (4 * i)) & 0xf];
  }
  return out;
}

}  // namespace streamd
