#include "server/metrics/registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace streamd::metrics {
namespace {

TEST(CounterTest, OnlyGoesUp) {
  Registry registry;
  Counter& c = registry.AddCounter("c_total", "A counter.").Get();
  EXPECT_EQ(c.Value(), 0);
  c.Inc();
  c.Inc(2.5);
  c.Inc(-7);            // ignored
  c.Inc(std::nan(""));  // ignored
  EXPECT_EQ(c.Value(), 3.5);
}

TEST(GaugeTest, SetIncDec) {
  Registry registry;
  Gauge& g = registry.AddGauge("g", "A gauge.").Get();
  g.Set(10);
  g.Inc();
  g.Dec(4);
  EXPECT_EQ(g.Value(), 7);
  g.Set(-1.5);
  EXPECT_EQ(g.Value(), -1.5);
  EXPECT_FALSE(g.is_callback());
}

TEST(GaugeTest, CallbackIsEvaluatedAtEachScrape) {
  Registry registry;
  int calls = 0;
  Gauge& g = registry.AddCallbackGauge("cb", "A callback.", [&calls] { return ++calls * 1.0; });
  EXPECT_TRUE(g.is_callback());
  g.Set(100);  // no effect on a callback gauge
  EXPECT_NE(registry.Serialize().find("\ncb 1\n"), std::string::npos);
  EXPECT_NE(registry.Serialize().find("\ncb 2\n"), std::string::npos);
}

TEST(HistogramTest, BucketsAreInclusiveUpperBoundsAndCumulative) {
  Registry registry;
  Histogram& h = registry.AddHistogram("h", "A histogram.", {1, 2, 5}).Get();
  for (double v : {0.5, 1.0, 1.5, 2.0, 4.0, 5.0, 7.0, -3.0}) h.Observe(v);
  h.Observe(std::numeric_limits<double>::infinity());
  h.Observe(std::nan(""));  // ignored
  // <=1: {0.5, 1, -3}; <=2: +{1.5, 2}; <=5: +{4, 5}; +Inf: +{7, inf}.
  EXPECT_EQ(h.CumulativeCounts(), (std::vector<uint64_t>{3, 5, 7, 9}));
  EXPECT_EQ(h.Count(), 9u);
  EXPECT_TRUE(std::isinf(h.Sum()));
}

TEST(HistogramTest, ExposesBucketsInfSumAndCount) {
  Registry registry;
  Histogram& h = registry.AddHistogram("lat_seconds", "Latency.", {0.1, 0.25, 1}).Get();
  h.Observe(0.05);
  h.Observe(0.25);
  h.Observe(0.5);
  h.Observe(3);
  EXPECT_EQ(registry.Serialize(),
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{le=\"0.1\"} 1\n"
            "lat_seconds_bucket{le=\"0.25\"} 2\n"
            "lat_seconds_bucket{le=\"1\"} 3\n"
            "lat_seconds_bucket{le=\"+Inf\"} 4\n"
            "lat_seconds_sum 3.8\n"
            "lat_seconds_count 4\n");
}

TEST(RegistryTest, FullOutputIsSortedAndStable) {
  Registry registry;
  // Registered out of order, children created out of order.
  CounterFamily& requests =
      registry.AddCounter("b_requests_total", "Requests by zone and app.", {"zone", "app"});
  requests.WithLabels({"west", "chat"}).Inc(2);
  requests.WithLabels({"east", "x\"y\\z\n"}).Inc();
  requests.WithLabels({"east", "chat"}).Inc(3);
  registry.AddGauge("a_temperature", "Help with \\ and\nnewline.").Get().Set(21.5);
  HistogramFamily& sizes = registry.AddHistogram("c_size_bytes", "Sizes.", {10, 100}, {"kind"});
  sizes.WithLabels({"put"}).Observe(50);
  sizes.WithLabels({"get"}).Observe(5);
  registry.AddGauge("d_unused", "Labelled, no children yet.", {"state"});

  const std::string expected =
      "# HELP a_temperature Help with \\\\ and\\nnewline.\n"
      "# TYPE a_temperature gauge\n"
      "a_temperature 21.5\n"
      "# HELP b_requests_total Requests by zone and app.\n"
      "# TYPE b_requests_total counter\n"
      "b_requests_total{zone=\"east\",app=\"chat\"} 3\n"
      "b_requests_total{zone=\"east\",app=\"x\\\"y\\\\z\\n\"} 1\n"
      "b_requests_total{zone=\"west\",app=\"chat\"} 2\n"
      "# HELP c_size_bytes Sizes.\n"
      "# TYPE c_size_bytes histogram\n"
      "c_size_bytes_bucket{kind=\"get\",le=\"10\"} 1\n"
      "c_size_bytes_bucket{kind=\"get\",le=\"100\"} 1\n"
      "c_size_bytes_bucket{kind=\"get\",le=\"+Inf\"} 1\n"
      "c_size_bytes_sum{kind=\"get\"} 5\n"
      "c_size_bytes_count{kind=\"get\"} 1\n"
      "c_size_bytes_bucket{kind=\"put\",le=\"10\"} 0\n"
      "c_size_bytes_bucket{kind=\"put\",le=\"100\"} 1\n"
      "c_size_bytes_bucket{kind=\"put\",le=\"+Inf\"} 1\n"
      "c_size_bytes_sum{kind=\"put\"} 50\n"
      "c_size_bytes_count{kind=\"put\"} 1\n"
      "# HELP d_unused Labelled, no children yet.\n"
      "# TYPE d_unused gauge\n";
  EXPECT_EQ(registry.Serialize(), expected);
  EXPECT_EQ(registry.Serialize(), expected);  // scraping changes nothing
}

TEST(RegistryTest, UnlabelledFamiliesAreExposedBeforeTheirFirstUpdate) {
  Registry registry;
  registry.AddCounter("x_total", "X.");
  registry.AddGauge("y", "Y.");
  registry.AddHistogram("z", "Z.", {1});
  const std::string out = registry.Serialize();
  EXPECT_NE(out.find("\nx_total 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("\ny 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("\nz_count 0\n"), std::string::npos) << out;
}

TEST(RegistryTest, WithLabelsReturnsTheSameChild) {
  Registry registry;
  CounterFamily& f = registry.AddCounter("f_total", "F.", {"code"});
  Counter& a = f.WithLabels({"A"});
  EXPECT_EQ(&a, &f.WithLabels({"A"}));
  EXPECT_NE(&a, &f.WithLabels({"B"}));
  a.Inc();
  EXPECT_EQ(f.WithLabels({"A"}).Value(), 1);
  EXPECT_EQ(f.label_names(), (std::vector<std::string>{"code"}));
  EXPECT_EQ(f.type(), MetricType::kCounter);
}

TEST(RegistryTest, CollectHooksRunBeforeValuesAreRead) {
  Registry registry;
  Gauge& used = registry.AddGauge("used", "Used.").Get();
  Gauge& free = registry.AddGauge("free", "Free.").Get();
  int snapshots = 0;
  registry.AddCollectHook([&] {
    ++snapshots;
    used.Set(snapshots * 10);
    free.Set(100 - snapshots * 10);
  });
  const std::vector<FamilySnapshot> families = registry.Collect();
  ASSERT_EQ(families.size(), 2u);
  EXPECT_EQ(families[0].name, "free");
  EXPECT_EQ(families[0].samples[0].value, 90);
  EXPECT_EQ(families[1].samples[0].value, 10);
  registry.Serialize();
  EXPECT_EQ(snapshots, 2);
}

// ---- Misuse aborts with a message naming the metric ---------------------------------------

using RegistryDeathTest = ::testing::Test;

TEST_F(RegistryDeathTest, InvalidNames) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Registry r;
  EXPECT_DEATH(r.AddGauge("1abc", "h"), "invalid metric name \"1abc\"");
  EXPECT_DEATH(r.AddGauge("a-b", "h"), "invalid metric name");
  EXPECT_DEATH(r.AddGauge("", "h"), "invalid metric name");
  EXPECT_DEATH(r.AddGauge("ok", "h", {"bad-label"}), "invalid label name \"bad-label\"");
  EXPECT_DEATH(r.AddGauge("ok", "h", {"__reserved"}), "invalid label name");
  EXPECT_DEATH(r.AddGauge("ok", "h", {"a", "a"}), "duplicate label name \"a\"");
}

TEST_F(RegistryDeathTest, TotalSuffixRules) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Registry r;
  EXPECT_DEATH(r.AddCounter("requests", "h"), "counter \"requests\" must end in _total");
  EXPECT_DEATH(r.AddGauge("open_total", "h"), "gauge \"open_total\" must not end in _total");
  EXPECT_DEATH(r.AddHistogram("h_total", "h", {1}), "must not end in _total");
}

TEST_F(RegistryDeathTest, DuplicatesAndArity) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Registry r;
  r.AddGauge("g", "h", {"a", "b"});
  EXPECT_DEATH(r.AddCounter("g", "h"), "");  // "g" is not a counter name either
  EXPECT_DEATH(r.AddGauge("g", "h"), "metric \"g\" registered twice");
  GaugeFamily& g2 = r.AddGauge("g2", "h", {"a", "b"});
  EXPECT_DEATH(g2.WithLabels({"only-one"}), "\"g2\" has 2 label\\(s\\), got 1 value");
  g2.WithLabels({"x", "y"});
  EXPECT_DEATH(g2.AddCallback({"x", "y"}, [] { return 0.0; }), "child already exists");
}

TEST_F(RegistryDeathTest, HistogramBoundsAndLe) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Registry r;
  EXPECT_DEATH(r.AddHistogram("h1", "h", {1, 1}), "strictly increasing");
  EXPECT_DEATH(r.AddHistogram("h2", "h", {2, 1}), "strictly increasing");
  EXPECT_DEATH(r.AddHistogram("h3", "h", {1, std::nan("")}), "finite");
  EXPECT_DEATH(r.AddHistogram("h4", "h", {std::numeric_limits<double>::infinity()}), "finite");
  EXPECT_DEATH(r.AddHistogram("h5", "h", {1}, {"le"}), "may not use the label \"le\"");
}

}  // namespace
}  // namespace streamd::metrics
