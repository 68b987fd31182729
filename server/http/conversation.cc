#include "server/http/conversation.h"

#include <cinttypes>
#include <cstdio>

namespace streamd::http {
namespace {

constexpr uint64_t kFnvPrime = 1099511628211ull;

uint64_t Fnv(uint64_t h, std::string_view bytes) {
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= kFnvPrime;
  }
  return h;
}

}  // namespace

void Conversation::Add(TurnRole role, std::string_view text) {
  // Role and length first: "ab"+"c" and "a"+"bc" must not hash alike.
  const std::string head =
      std::to_string(static_cast<int>(role)) + ":" + std::to_string(text.size()) + ":";
  hash = Fnv(Fnv(hash, head), text);
  ++turns;
}

std::string Conversation::Encode() const {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "v1 %" PRId64 " %016" PRIx64 " %" PRId64, turns, hash, responses);
  return buf;
}

StatusOr<Conversation> Conversation::Decode(std::string_view text) {
  Conversation c;
  if (text.empty()) return c;
  const std::string s(text);
  char tail = 0;
  if (std::sscanf(s.c_str(), "v1 %" SCNd64 " %" SCNx64 " %" SCNd64 "%c", &c.turns, &c.hash,
                  &c.responses, &tail) != 3 ||
      c.turns < 0 || c.responses < 0) {
    return DataLossError("the session's conversation record \"" + s + "\" is unreadable");
  }
  return c;
}

StatusOr<size_t> NewMessagesStart(const Conversation& stored,
                                  const std::vector<ChatMessage>& messages,
                                  const std::string& field) {
  if (static_cast<int64_t>(messages.size()) < stored.turns) {
    return FailedPreconditionError(field + " has " + std::to_string(messages.size()) +
                                   " entries but the session holds " +
                                   std::to_string(stored.turns) +
                                   " turns: send the whole conversation, then the new messages");
  }
  Conversation prefix;
  for (int64_t i = 0; i < stored.turns; ++i) prefix.Add(messages[i].role, messages[i].content);
  if (prefix.hash != stored.hash) {
    return FailedPreconditionError(
        field + "[0.." + std::to_string(stored.turns - 1) +
        "] differ from the session's conversation (roles and exact text of its " +
        std::to_string(stored.turns) +
        " turns, the assistant's answers as streamd sent them): resend them unchanged, or use a "
        "new session");
  }
  return static_cast<size_t>(stored.turns);
}

}  // namespace streamd::http
