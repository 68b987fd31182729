// Authenticator: who is calling (docs/SECURITY.md, "API keys and tenants"). With
// auth.keys_file, every call to streamd.v1.Streamd carries `authorization: Bearer <key>`; the
// key's SHA-256 is compared, in constant time, with every hash in the file, and names the
// caller's tenant and role. The file is read again when it changes (checked every
// kReloadPeriod); a file that no longer parses keeps the keys it had, with an error in the log.
// Without a keys file every caller is the one anonymous admin (as before keys existed; the
// listen policy keeps such a daemon on loopback or behind mTLS unless auth.allow_insecure).
//
// Health and reflection are other services: open, or behind a KeyGate that asks this class
// (key_gate.h; auth.health_requires_key, auth.reflection_requires_key).
#pragma once

#include <grpcpp/server_context.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/api/session_api.h"
#include "engine/util/status.h"
#include "server/config/api_keys_file.h"

namespace streamd::server {

struct Caller {
  std::string tenant;          // "" for the anonymous caller (no keys file)
  bool admin = true;           // sees and may act on every session
  bool authenticated = false;  // a key named it
  // Whether a session of `session_tenant` exists for this caller: its own, or any for admins.
  bool CanSee(const std::string& session_tenant) const { return admin || session_tenant == tenant; }
};

// Why a call was refused (streamd_auth_failures_total{reason}).
enum class AuthFailure { kMissing, kMalformed, kUnknownKey, kNotAdmin };
inline constexpr int kNumAuthFailures = 4;
const char* AuthFailureName(AuthFailure reason);  // "missing", "malformed", "unknown_key", ...

class Authenticator {
 public:
  using OnFailure = std::function<void(AuthFailure)>;
  static constexpr std::chrono::seconds kReloadPeriod{2};

  // Reads `keys_file` (empty: no authentication). `on_failure` (optional) counts refusals.
  static StatusOr<std::unique_ptr<Authenticator>> Create(const std::string& keys_file,
                                                         OnFailure on_failure = {});
  ~Authenticator();
  Authenticator(const Authenticator&) = delete;
  Authenticator& operator=(const Authenticator&) = delete;

  bool enabled() const { return !path_.empty(); }
  // The caller of a call, or UNAUTHENTICATED saying what is wrong (never which keys exist).
  StatusOr<Caller> Authenticate(const grpc::ServerContextBase& context) const;
  // The same for a bare header value ("Bearer KEY"; null: no header).
  StatusOr<Caller> AuthenticateHeader(const std::string* authorization) const;
  // PERMISSION_DENIED naming `call` unless the caller is an admin.
  Status RequireAdmin(const Caller& caller, const std::string& call) const;
  // The tenant's quotas (all unlimited when the file gives none).
  TenantQuotas QuotasOf(const std::string& tenant) const;
  // The part of them the engine counts (engine/api/session_api.h).
  api::TenantLimits LimitsOf(const std::string& tenant) const {
    const TenantQuotas q = QuotasOf(tenant);
    return {q.max_sessions, q.max_generations, q.max_kv_blocks, q.tokens_per_second};
  }
  // `caller` as the engine's session API takes it: its tenant's limits apply when a key named
  // it. `client`: who is on the other end, for the per-client caps.
  api::Caller ApiCaller(const Caller& caller, std::string client) const {
    api::Caller c;
    c.tenant = caller.tenant;
    c.admin = caller.admin;
    c.metered = enabled() && caller.authenticated;
    if (c.metered) c.limits = LimitsOf(caller.tenant);
    c.client = std::move(client);
    return c;
  }
  // Every tenant the keys file names (the only label values of per-tenant metrics).
  std::vector<std::string> Tenants() const;
  // A quota refusal, logged at most once a second (with how many were left out).
  void LogQuotaRefusal(const Status& why) const;
  // Reads the file again if it changed since the last read; true when new keys were taken.
  bool ReloadIfChanged();

 private:
  Authenticator(std::string path, OnFailure on_failure);
  void Refused(AuthFailure reason) const;
  void ReloadLoop();

  const std::string path_;
  const OnFailure on_failure_;
  mutable std::mutex mu_;
  std::shared_ptr<const ApiKeys> keys_;  // guarded by mu_; replaced whole on reload
  struct stat seen_ {};                  // of the file last read (mtime, size, inode)
  // Rate limit of the log line per refusal reason: the last second that logged.
  mutable std::array<std::atomic<int64_t>, kNumAuthFailures> last_log_s_{};
  mutable std::array<std::atomic<int64_t>, kNumAuthFailures> suppressed_{};
  mutable std::atomic<int64_t> quota_last_log_s_{0};
  mutable std::atomic<int64_t> quota_suppressed_{0};
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread reloader_;  // last: starts after the members it uses
};

// `caller` for the engine's session API; `auth` null (no keys): the anonymous admin, unmetered.
inline api::Caller ToApiCaller(const Authenticator* auth, const Caller& caller,
                               std::string client = {}) {
  if (auth != nullptr) return auth->ApiCaller(caller, std::move(client));
  api::Caller c;
  c.tenant = caller.tenant;
  c.admin = caller.admin;
  c.client = std::move(client);
  return c;
}

}  // namespace streamd::server
