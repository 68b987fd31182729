#include "engine/sessions/token_budget.h"

#include <algorithm>
#include <cmath>

namespace streamd {

TokenBudget::Bucket& TokenBudget::RefilledLocked(const std::string& tenant, int32_t rate,
                                                 Clock::time_point now) {
  Bucket& b = buckets_[tenant];
  const double capacity = kBurstSeconds * rate;
  if (!b.started) {
    b = {capacity, now, true};
    return b;
  }
  const double elapsed = std::chrono::duration<double>(now - b.last).count();
  if (elapsed > 0) b.level = std::min(capacity, b.level + elapsed * rate);
  b.last = std::max(b.last, now);
  return b;
}

Status TokenBudget::Check(const std::string& tenant, int32_t rate, const std::string& what,
                          Clock::time_point now) {
  if (rate <= 0) return OkStatus();
  double level;
  {
    std::lock_guard<std::mutex> lock(mu_);
    level = RefilledLocked(tenant, rate, now).level;
  }
  if (level >= 0) return OkStatus();
  const double wait_s = std::ceil(-level / rate * 10) / 10;
  return ResourceExhaustedError(
      what + ": tenant " + tenant + " is over its quota " +
      "tokens_per_second = " + std::to_string(rate) + " (auth.keys_file); retry in " +
      std::to_string(wait_s).substr(0, std::to_string(wait_s).find('.') + 2) + " s");
}

void TokenBudget::Charge(const std::string& tenant, int32_t rate, int64_t tokens,
                         Clock::time_point now) {
  if (rate <= 0 || tokens <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  RefilledLocked(tenant, rate, now).level -= static_cast<double>(tokens);
}

}  // namespace streamd
