#include "server/metrics/scrape_source.h"

namespace streamd::metrics {

void ScrapeSource::AddHook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  hooks_.push_back(std::move(hook));
}

std::vector<prometheus::MetricFamily> ScrapeSource::Collect() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& hook : hooks_) hook();
  return registry_->Collect();
}

}  // namespace streamd::metrics
