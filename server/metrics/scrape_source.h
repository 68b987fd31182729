// ScrapeSource: what the /metrics endpoint collects, a prometheus-cpp registry with hooks that
// run at the start of every scrape.
//
// A hook copies state that lives elsewhere (the engine's pool, the session registry, tenants)
// into gauges from one consistent reading of its owner, so that related gauges never come from
// different instants and nothing has to push them on the hot path. Hooks run in the order they
// were added, on the scraping thread, one scrape at a time; they must be quick and thread-safe
// against their owner, and must not add hooks.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace streamd::metrics {

class ScrapeSource final : public prometheus::Collectable {
 public:
  explicit ScrapeSource(std::shared_ptr<prometheus::Registry> registry)
      : registry_(std::move(registry)) {}

  void AddHook(std::function<void()> hook);
  // Runs the hooks, then collects the registry.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::shared_ptr<prometheus::Registry> registry_;
  mutable std::mutex mu_;  // held for a whole scrape: hooks never overlap
  std::vector<std::function<void()>> hooks_;
};

}  // namespace streamd::metrics
