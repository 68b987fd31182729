// Shorthands for declaring streamd's metric families on a prometheus-cpp registry.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <initializer_list>
#include <string>

namespace streamd::metrics {

template <size_t N>
prometheus::Histogram::BucketBoundaries Bounds(const std::array<double, N>& buckets) {
  return prometheus::Histogram::BucketBoundaries(buckets.begin(), buckets.end());
}

// A family without labels and its only child, exported (at 0) before its first update.
inline prometheus::Counter& OneCounter(prometheus::Registry& r, const char* name,
                                       const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}
inline prometheus::Gauge& OneGauge(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}
template <size_t N>
prometheus::Histogram& OneHistogram(prometheus::Registry& r, const char* name, const char* help,
                                    const std::array<double, N>& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add({}, Bounds(buckets));
}

// A counter family with one label whose every value in `values` is exported from 0, so that a
// rate() over it is defined before the first event.
inline prometheus::Family<prometheus::Counter>& LabelledCounters(
    prometheus::Registry& r, const char* name, const char* help, const std::string& label,
    std::initializer_list<const char*> values) {
  auto& family = prometheus::BuildCounter().Name(name).Help(help).Register(r);
  for (const char* v : values) family.Add({{label, v}});
  return family;
}

}  // namespace streamd::metrics
