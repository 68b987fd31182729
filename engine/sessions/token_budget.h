// TokenBudget: each tenant's tokens_per_second quota (auth.keys_file) as a token bucket over
// prefill and decode tokens. A bucket holds up to kBurstSeconds of its rate and refills
// continuously. Work is charged when it is known (an Append's tokens before they are appended,
// a generation's output tokens when it ends), so a bucket can go below zero; while it is below
// zero the tenant's next Append or Generate is refused with RESOURCE_EXHAUSTED naming the quota
// and when to retry. A running generation is never cut: the rate holds on average, and one
// generation can overdraw it by at most its max_tokens.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "engine/util/status.h"

namespace streamd {

class TokenBudget {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr double kBurstSeconds = 10.0;

  // OK, or RESOURCE_EXHAUSTED for `what` ("append", "generate") while `tenant`'s bucket at
  // `rate` tokens per second (0 = unlimited) is below zero.
  Status Check(const std::string& tenant, int32_t rate, const std::string& what,
               Clock::time_point now = Clock::now());
  // Takes `tokens` from the bucket (it may go below zero).
  void Charge(const std::string& tenant, int32_t rate, int64_t tokens,
              Clock::time_point now = Clock::now());

 private:
  struct Bucket {
    double level = 0;
    Clock::time_point last;
    bool started = false;
  };
  // Refilled to `now`; a new bucket starts full.
  Bucket& RefilledLocked(const std::string& tenant, int32_t rate, Clock::time_point now);

  std::mutex mu_;
  std::map<std::string, Bucket, std::less<>> buckets_;
};

}  // namespace streamd
