// SessionId: the name of a session, 128 random bits from the kernel's CSPRNG (getrandom), shown
// as 32 lowercase hex digits. Ids are never reused, across restarts or replicas: two daemons
// that share a snapshot directory, or one that restarts, cannot hand out the same id (the chance
// of a collision among 10^12 ids is below 10^-14), so a client's Resume never reaches somebody
// else's session. The all-zero id is "no session".
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

#include "engine/util/status.h"

namespace streamd {

struct SessionId {
  uint64_t hi = 0;
  uint64_t lo = 0;

  // 128 bits from getrandom(2); never the all-zero id. Aborts only if the kernel refuses
  // randomness (a broken host: the daemon cannot name sessions safely).
  static SessionId Random();
  // Exactly 32 hex digits (either case). Errors name the field `what` and the rule.
  static StatusOr<SessionId> Parse(std::string_view text, std::string_view what = "session_id");

  bool valid() const { return hi != 0 || lo != 0; }
  std::string ToString() const;  // 32 lowercase hex digits

  friend auto operator<=>(const SessionId&, const SessionId&) = default;
  friend std::ostream& operator<<(std::ostream& os, const SessionId& id) {
    return os << id.ToString();
  }
};

}  // namespace streamd

template <>
struct std::hash<streamd::SessionId> {
  size_t operator()(const streamd::SessionId& id) const noexcept {
    return static_cast<size_t>(id.hi ^ (id.lo * 0x9e3779b97f4a7c15ULL));
  }
};
