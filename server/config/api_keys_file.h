// The API keys file (auth.keys_file, docs/SECURITY.md): who may call streamd, as which tenant,
// with which role, and each tenant's quotas. Keys themselves are never written down: an entry
// holds the SHA-256 of its key (`printf %s "$KEY" | sha256sum`). Keys are random secrets of at
// least 128 bits (`openssl rand -hex 32`), so a plain hash cannot be reversed by guessing.
//
//   tenants:                    # optional: quotas; 0 or absent = unlimited
//     acme:
//       max_sessions: 100       # sessions it may hold (resident or on disk)
//       max_generations: 8      # generations running at once
//       max_kv_blocks: 2000     # KV blocks its resident sessions may reserve
//       tokens_per_second: 500  # prefill + decode, averaged (a token bucket of 10 s)
//   keys:
//     - tenant: acme            # [A-Za-z0-9._-], 1..64 bytes
//       role: user              # user (its own sessions) or admin (every session, imports)
//       sha256: 9f86d0...       # 64 hex digits
//
// Every error names the entry and the field: "keys[2].sha256 is not 64 hex digits".
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/util/status.h"

namespace streamd {

using KeyHash = std::array<uint8_t, 32>;

struct TenantQuotas {
  int32_t max_sessions = 0;       // 0 = unlimited
  int32_t max_generations = 0;    // 0 = unlimited
  int32_t max_kv_blocks = 0;      // 0 = unlimited
  int32_t tokens_per_second = 0;  // 0 = unlimited
  bool operator==(const TenantQuotas&) const = default;
};

struct ApiKeyEntry {
  std::string tenant;
  bool admin = false;
  KeyHash sha256{};
};

struct ApiKeys {
  std::vector<ApiKeyEntry> keys;
  std::map<std::string, TenantQuotas, std::less<>> quotas;  // tenants with any quota
};

// Parses the file's text; `source` names it in errors.
StatusOr<ApiKeys> ParseApiKeys(const std::string& text, const std::string& source);
// Reads and parses the file: NOT_FOUND / PERMISSION_DENIED when it cannot be read.
StatusOr<ApiKeys> LoadApiKeysFile(const std::string& path);

// "acme": 1..64 bytes of [A-Za-z0-9._-]; what a metric label and a log line can carry as is.
bool IsValidTenantName(std::string_view name);

}  // namespace streamd
