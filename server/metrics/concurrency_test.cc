// Many threads update the same children (and create children) while a scraper serializes:
// totals must come out exact, and every scrape must be internally consistent.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "server/metrics/registry.h"

namespace streamd::metrics {
namespace {

constexpr int kThreads = 8;
constexpr int kIterations = 100000;

// The value of the sample line starting with `prefix` (e.g. "h_count "), or -1.
double SampleValue(const std::string& text, const std::string& prefix) {
  const size_t at = text.find("\n" + prefix);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + 1 + prefix.size()));
}

TEST(ConcurrencyTest, ManyThreadsUpdatingGiveExactTotals) {
  Registry registry;
  Counter& counter = registry.AddCounter("ops_total", "Ops.").Get();
  Gauge& gauge = registry.AddGauge("level", "Level.").Get();
  Gauge& updown = registry.AddGauge("updown", "Up then down.").Get();
  Histogram& hist = registry.AddHistogram("h", "H.", {1, 2, 3}).Get();
  CounterFamily& by_thread = registry.AddCounter("by_thread_total", "By thread.", {"thread"});
  CounterFamily& shared = registry.AddCounter("shared_total", "Shared child.", {"k"});

  std::atomic<bool> stop_scraping{false};
  std::atomic<int> scrapes{0};
  std::atomic<int> inconsistent{0};
  std::thread scraper([&] {
    double last_count = 0;
    while (!stop_scraping.load()) {
      const std::string text = registry.Serialize();
      const double count = SampleValue(text, "h_count ");
      const double inf = SampleValue(text, "h_bucket{le=\"+Inf\"} ");
      if (count != inf || count < last_count) inconsistent.fetch_add(1);
      last_count = count;
      scrapes.fetch_add(1);
    }
  });

  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      Counter& mine = by_thread.WithLabels({std::to_string(t)});
      for (int i = 0; i < kIterations; ++i) {
        counter.Inc();
        gauge.Inc(2);
        updown.Inc();
        updown.Dec();
        // Dyadic values: the sum is exact in double whatever the order of additions.
        hist.Observe(0.5 + (i % 4));  // 0.5, 1.5, 2.5, 3.5: one per bucket
        mine.Inc();
        if (i % 1000 == 0) shared.WithLabels({"same"}).Inc();
      }
    });
  }
  for (std::thread& w : workers) w.join();
  stop_scraping.store(true);
  scraper.join();

  const double n = static_cast<double>(kThreads) * kIterations;
  EXPECT_EQ(counter.Value(), n);
  EXPECT_EQ(gauge.Value(), 2 * n);
  EXPECT_EQ(updown.Value(), 0);
  EXPECT_EQ(hist.Count(), static_cast<uint64_t>(n));
  const uint64_t quarter = static_cast<uint64_t>(n / 4);
  EXPECT_EQ(hist.CumulativeCounts(),
            (std::vector<uint64_t>{quarter, 2 * quarter, 3 * quarter, 4 * quarter}));
  EXPECT_EQ(hist.Sum(), (0.5 + 1.5 + 2.5 + 3.5) * n / 4);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(by_thread.WithLabels({std::to_string(t)}).Value(), kIterations);
  }
  EXPECT_EQ(shared.WithLabels({"same"}).Value(), kThreads * (kIterations / 1000));
  EXPECT_GT(scrapes.load(), 0);
  EXPECT_EQ(inconsistent.load(), 0) << "a scrape showed _count != +Inf bucket, or going down";

  const std::string final_text = registry.Serialize();
  EXPECT_EQ(SampleValue(final_text, "ops_total "), n);
  EXPECT_EQ(SampleValue(final_text, "h_count "), n);
}

}  // namespace
}  // namespace streamd::metrics
