#include "server/authenticator.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace streamd::server {
namespace {

constexpr char kHeader[] = "authorization";

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_ino == b.st_ino && a.st_dev == b.st_dev && a.st_size == b.st_size &&
         a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}

std::string KeysSummary(const ApiKeys& keys) {
  int admins = 0;
  for (const ApiKeyEntry& k : keys.keys) admins += k.admin;
  return std::to_string(keys.keys.size()) + " keys (" + std::to_string(admins) + " admin), " +
         std::to_string(keys.quotas.size()) + " tenants with quotas";
}

}  // namespace

const char* AuthFailureName(AuthFailure reason) {
  switch (reason) {
    case AuthFailure::kMissing:
      return "missing";
    case AuthFailure::kMalformed:
      return "malformed";
    case AuthFailure::kUnknownKey:
      return "unknown_key";
    case AuthFailure::kNotAdmin:
      return "not_admin";
  }
  return "unknown";
}

StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(const std::string& keys_file,
                                                               OnFailure on_failure) {
  std::unique_ptr<Authenticator> a(new Authenticator(keys_file, std::move(on_failure)));
  if (keys_file.empty()) return a;
  if (::stat(keys_file.c_str(), &a->seen_) != 0) {
    return NotFoundError("auth.keys_file " + keys_file + ": cannot be read (" +
                         std::strerror(errno) + ")");
  }
  STREAMD_ASSIGN_OR_RETURN(ApiKeys keys, LoadApiKeysFile(keys_file));
  spdlog::info("auth.keys_file {}: {}", keys_file, KeysSummary(keys));
  a->keys_ = std::make_shared<const ApiKeys>(std::move(keys));
  a->reloader_ = std::thread([p = a.get()] { p->ReloadLoop(); });
  return a;
}

Authenticator::Authenticator(std::string path, OnFailure on_failure)
    : path_(std::move(path)), on_failure_(std::move(on_failure)) {}

Authenticator::~Authenticator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (reloader_.joinable()) reloader_.join();
}

void Authenticator::ReloadLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    stop_cv_.wait_for(lock, kReloadPeriod, [&] { return stopping_; });
    if (stopping_) return;
    lock.unlock();
    ReloadIfChanged();
    lock.lock();
  }
}

bool Authenticator::ReloadIfChanged() {
  if (path_.empty()) return false;
  struct stat now {};
  if (::stat(path_.c_str(), &now) != 0) {
    spdlog::error("auth.keys_file {}: cannot be read ({}); keeping the keys read before", path_,
                  std::strerror(errno));
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (SameFile(now, seen_)) return false;
    seen_ = now;  // a broken file is reported once, not every period
  }
  StatusOr<ApiKeys> keys = LoadApiKeysFile(path_);
  if (!keys.ok()) {
    spdlog::error("{}; keeping the keys read before", keys.status().message());
    return false;
  }
  spdlog::info("auth.keys_file {} changed: {}", path_, KeysSummary(*keys));
  auto fresh = std::make_shared<const ApiKeys>(*std::move(keys));
  std::lock_guard<std::mutex> lock(mu_);
  keys_ = std::move(fresh);
  return true;
}

// At most one log line per second per limiter: true when this one may log; `more` is then how
// many were left out since the last line.
static bool MayLog(std::atomic<int64_t>& last_log_s, std::atomic<int64_t>& suppressed,
                   int64_t* more) {
  const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
  int64_t last = last_log_s.load(std::memory_order_relaxed);
  if (last == now_s || !last_log_s.compare_exchange_strong(last, now_s)) {
    suppressed.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  *more = suppressed.exchange(0, std::memory_order_relaxed);
  return true;
}

static std::string LeftOut(int64_t more) {
  return more > 0 ? " (and " + std::to_string(more) + " more since the last line)" : "";
}

void Authenticator::Refused(AuthFailure reason) const {
  if (on_failure_) on_failure_(reason);
  const auto i = static_cast<size_t>(reason);
  int64_t more = 0;
  if (!MayLog(last_log_s_[i], suppressed_[i], &more)) return;
  spdlog::warn("call refused: {}{}", AuthFailureName(reason), LeftOut(more));
}

void Authenticator::LogQuotaRefusal(const Status& why) const {
  int64_t more = 0;
  if (!MayLog(quota_last_log_s_, quota_suppressed_, &more)) return;
  spdlog::warn("quota: {}{}", why.message(), LeftOut(more));
}

std::vector<std::string> Authenticator::Tenants() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  if (keys_ == nullptr) return out;
  for (const ApiKeyEntry& k : keys_->keys) {
    if (std::find(out.begin(), out.end(), k.tenant) == out.end()) out.push_back(k.tenant);
  }
  return out;
}

StatusOr<Caller> Authenticator::Authenticate(const grpc::ServerContextBase& context) const {
  if (!enabled()) return Caller{};
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kHeader);
  if (it == metadata.end()) return AuthenticateHeader(nullptr);
  const std::string value(it->second.data(), it->second.size());
  return AuthenticateHeader(&value);
}

StatusOr<Caller> Authenticator::AuthenticateHeader(const std::string* authorization) const {
  if (!enabled()) return Caller{};
  if (authorization == nullptr) {
    Refused(AuthFailure::kMissing);
    return Status(StatusCode::kUnauthenticated,
                  "authorization: no API key; send the metadata `authorization: Bearer <key>` "
                  "(streamctl --api-key or $STREAMD_API_KEY)");
  }
  constexpr std::string_view kScheme = "bearer ";
  const std::string& value = *authorization;
  bool bearer = value.size() > kScheme.size();
  for (size_t i = 0; bearer && i < kScheme.size(); ++i) {
    bearer = std::tolower(static_cast<unsigned char>(value[i])) == kScheme[i];
  }
  if (!bearer) {
    Refused(AuthFailure::kMalformed);
    return Status(StatusCode::kUnauthenticated, "authorization: not of the form `Bearer <key>`");
  }
  KeyHash presented{};
  SHA256(reinterpret_cast<const unsigned char*>(value.data() + kScheme.size()),
         value.size() - kScheme.size(), presented.data());
  std::shared_ptr<const ApiKeys> keys;
  {
    std::lock_guard<std::mutex> lock(mu_);
    keys = keys_;
  }
  // Every hash is compared, each in constant time: neither the time nor the order says which
  // (or whether any) matched first.
  const ApiKeyEntry* match = nullptr;
  for (const ApiKeyEntry& k : keys->keys) {
    const bool same = CRYPTO_memcmp(presented.data(), k.sha256.data(), presented.size()) == 0;
    if (same) match = &k;
  }
  if (match == nullptr) {
    Refused(AuthFailure::kUnknownKey);
    return Status(StatusCode::kUnauthenticated, "authorization: the API key is not valid");
  }
  return Caller{match->tenant, match->admin, true};
}

Status Authenticator::RequireAdmin(const Caller& caller, const std::string& call) const {
  if (caller.admin) return OkStatus();
  Refused(AuthFailure::kNotAdmin);
  return Status(StatusCode::kPermissionDenied,
                call + " needs an admin key (tenant " + caller.tenant + " has role user)");
}

TenantQuotas Authenticator::QuotasOf(const std::string& tenant) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (keys_ == nullptr) return {};
  auto it = keys_->quotas.find(tenant);
  return it == keys_->quotas.end() ? TenantQuotas{} : it->second;
}

}  // namespace streamd::server
