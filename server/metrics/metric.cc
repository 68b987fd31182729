#include "server/metrics/metric.h"

#include <algorithm>
#include <cmath>

namespace streamd::metrics {

void Counter::Collect(const std::string& name, const LabelPairs& labels,
                      std::vector<Sample>* out) const {
  out->push_back({name, labels, Value()});
}

void Gauge::Collect(const std::string& name, const LabelPairs& labels,
                    std::vector<Sample>* out) const {
  out->push_back({name, labels, Value()});
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  // First bound >= value; past the end means the +Inf bucket.
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) -
                                       bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> cumulative(counts_.size());
  uint64_t running = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    cumulative[i] = running;
  }
  return cumulative;
}

uint64_t Histogram::Count() const { return CumulativeCounts().back(); }

void Histogram::Collect(const std::string& name, const LabelPairs& labels,
                        std::vector<Sample>* out) const {
  const std::vector<uint64_t> cumulative = CumulativeCounts();
  const std::string bucket_name = name + "_bucket";
  for (size_t i = 0; i < cumulative.size(); ++i) {
    LabelPairs with_le = labels;
    with_le.emplace_back("le", i < bounds_.size() ? FormatValue(bounds_[i]) : "+Inf");
    out->push_back({bucket_name, std::move(with_le), static_cast<double>(cumulative[i])});
  }
  out->push_back({name + "_sum", labels, Sum()});
  // _count is the +Inf bucket read above, so the two always agree within one scrape.
  out->push_back({name + "_count", labels, static_cast<double>(cumulative.back())});
}

}  // namespace streamd::metrics
