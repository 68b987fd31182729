#include "server/metrics/exposition.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace streamd::metrics {
namespace {

TEST(FormatValueTest, ShortestRoundTripAndSpecialValues) {
  EXPECT_EQ(FormatValue(0.0), "0");
  EXPECT_EQ(FormatValue(1.0), "1");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(-2.5), "-2.5");
  EXPECT_EQ(FormatValue(16384.0), "16384");
  EXPECT_EQ(FormatValue(123456789.0), "123456789");
  EXPECT_EQ(FormatValue(1e6), "1e+06");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  // Round trip of an awkward value.
  const double v = 0.1 + 0.2;
  EXPECT_EQ(std::stod(FormatValue(v)), v);
}

TEST(EscapeTest, LabelValuesEscapeBackslashQuoteAndNewline) {
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
  EXPECT_EQ(EscapeLabelValue("a\\b"), "a\\\\b");
  EXPECT_EQ(EscapeLabelValue("say \"hi\""), "say \\\"hi\\\"");
  EXPECT_EQ(EscapeLabelValue("two\nlines"), "two\\nlines");
  EXPECT_EQ(EscapeLabelValue("tab\tstays"), "tab\tstays");
  EXPECT_EQ(EscapeLabelValue("größe ✓"), "größe ✓");  // UTF-8 passes through
  EXPECT_EQ(EscapeLabelValue(""), "");
}

TEST(EscapeTest, HelpEscapesBackslashAndNewlineButNotQuotes) {
  EXPECT_EQ(EscapeHelp("a \"quoted\" word"), "a \"quoted\" word");
  EXPECT_EQ(EscapeHelp("path C:\\x"), "path C:\\\\x");
  EXPECT_EQ(EscapeHelp("line one\nline two"), "line one\\nline two");
}

TEST(AppendTextFormatTest, WritesHelpTypeAndSamplesInOrder) {
  FamilySnapshot family;
  family.name = "demo_requests_total";
  family.help = "Requests.\nSecond \\ line.";
  family.type = MetricType::kCounter;
  family.samples.push_back({"demo_requests_total", {}, 3});
  family.samples.push_back({"demo_requests_total", {{"path", "/a\"b"}, {"method", "GET"}}, 0.5});
  std::string out = "previous\n";
  AppendTextFormat(family, &out);
  EXPECT_EQ(out,
            "previous\n"
            "# HELP demo_requests_total Requests.\\nSecond \\\\ line.\n"
            "# TYPE demo_requests_total counter\n"
            "demo_requests_total 3\n"
            "demo_requests_total{path=\"/a\\\"b\",method=\"GET\"} 0.5\n");
}

TEST(AppendTextFormatTest, TypeNames) {
  EXPECT_EQ(MetricTypeName(MetricType::kCounter), "counter");
  EXPECT_EQ(MetricTypeName(MetricType::kGauge), "gauge");
  EXPECT_EQ(MetricTypeName(MetricType::kHistogram), "histogram");
  EXPECT_EQ(kTextContentType, "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace
}  // namespace streamd::metrics
