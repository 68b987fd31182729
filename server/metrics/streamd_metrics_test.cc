#include "server/metrics/streamd_metrics.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "server/metrics/process_memory.h"

namespace streamd::metrics {
namespace {

const FamilySnapshot* FindFamily(const std::vector<FamilySnapshot>& families,
                                 const std::string& name) {
  for (const FamilySnapshot& f : families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

TEST(StreamdMetricsTest, ExposesTheWholeSetWithTypes) {
  StreamdMetrics m;
  const std::vector<FamilySnapshot> families = m.registry.Collect();
  const std::vector<std::pair<std::string, MetricType>> expected = {
      {"streamd_time_to_first_token_seconds", MetricType::kHistogram},
      {"streamd_inter_token_latency_seconds", MetricType::kHistogram},
      {"streamd_e2e_generation_latency_seconds", MetricType::kHistogram},
      {"streamd_queue_time_seconds", MetricType::kHistogram},
      {"streamd_step_duration_seconds", MetricType::kHistogram},
      {"streamd_step_tokens", MetricType::kHistogram},
      {"streamd_prompt_tokens_total", MetricType::kCounter},
      {"streamd_generation_tokens_total", MetricType::kCounter},
      {"streamd_evicted_tokens_total", MetricType::kCounter},
      {"streamd_sessions_opened_total", MetricType::kCounter},
      {"streamd_sessions_closed_total", MetricType::kCounter},
      {"streamd_sessions_rejected_total", MetricType::kCounter},
      {"streamd_errors_total", MetricType::kCounter},
      {"streamd_sessions", MetricType::kGauge},
      {"streamd_kv_used_blocks", MetricType::kGauge},
      {"streamd_kv_free_blocks", MetricType::kGauge},
      {"streamd_kv_capacity_blocks", MetricType::kGauge},
      {"streamd_kv_used_bytes", MetricType::kGauge},
      {"streamd_kv_capacity_bytes", MetricType::kGauge},
      {"streamd_kv_usage_ratio", MetricType::kGauge},
      {"streamd_process_resident_memory_bytes", MetricType::kGauge},
  };
  EXPECT_EQ(families.size(), expected.size());
  for (const auto& [name, type] : expected) {
    const FamilySnapshot* f = FindFamily(families, name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_EQ(f->type, type) << name;
    EXPECT_FALSE(f->help.empty()) << name;
    EXPECT_FALSE(f->samples.empty()) << name << " has no series before its first update";
  }
}

// The buckets are vLLM's (vllm/v1/metrics/loggers.py); spot-check them in the output.
TEST(StreamdMetricsTest, HistogramBucketsMatchVllm) {
  StreamdMetrics m;
  EXPECT_EQ(m.time_to_first_token.bounds(),
            std::vector<double>(kTimeToFirstTokenBuckets.begin(), kTimeToFirstTokenBuckets.end()));
  EXPECT_EQ(kTimeToFirstTokenBuckets.front(), 0.001);
  EXPECT_EQ(kTimeToFirstTokenBuckets.back(), 2560.0);
  EXPECT_EQ(m.inter_token_latency.bounds().size(), 19u);
  EXPECT_EQ(m.inter_token_latency.bounds().front(), 0.01);
  EXPECT_EQ(m.inter_token_latency.bounds().back(), 80.0);
  EXPECT_EQ(m.e2e_generation_latency.bounds(), m.queue_time.bounds());
  EXPECT_EQ(m.queue_time.bounds().front(), 0.3);
  EXPECT_EQ(m.queue_time.bounds().back(), 7680.0);
  EXPECT_EQ(m.step_tokens.bounds(),
            (std::vector<double>{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}));
  const std::string out = m.registry.Serialize();
  EXPECT_NE(out.find("streamd_time_to_first_token_seconds_bucket{le=\"2560\"} 0\n"),
            std::string::npos);
  EXPECT_NE(out.find("streamd_inter_token_latency_seconds_bucket{le=\"0.075\"} 0\n"),
            std::string::npos);
  EXPECT_NE(out.find("streamd_step_tokens_bucket{le=\"16384\"} 0\n"), std::string::npos);
}

TEST(StreamdMetricsTest, ErrorsAreCountedByGrpcCodeName) {
  StreamdMetrics m;
  EXPECT_EQ(GrpcCodeName(0), "OK");
  EXPECT_EQ(GrpcCodeName(3), "INVALID_ARGUMENT");
  EXPECT_EQ(GrpcCodeName(8), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(GrpcCodeName(16), "UNAUTHENTICATED");
  EXPECT_EQ(GrpcCodeName(17), "UNKNOWN");
  EXPECT_EQ(GrpcCodeName(-1), "UNKNOWN");

  m.RecordError(8);
  m.RecordError(8);
  m.RecordError(3);
  m.RecordError(0);   // OK: not an error
  m.RecordError(42);  // out of range: UNKNOWN
  EXPECT_EQ(m.errors.WithLabels({"RESOURCE_EXHAUSTED"}).Value(), 2);
  EXPECT_EQ(m.errors.WithLabels({"INVALID_ARGUMENT"}).Value(), 1);
  EXPECT_EQ(m.errors.WithLabels({"UNKNOWN"}).Value(), 1);
  const std::string out = m.registry.Serialize();
  EXPECT_EQ(out.find("code=\"OK\""), std::string::npos);
  // Every other code is exposed from the start, at 0.
  EXPECT_NE(out.find("streamd_errors_total{code=\"DATA_LOSS\"} 0\n"), std::string::npos);
  EXPECT_NE(out.find("streamd_errors_total{code=\"RESOURCE_EXHAUSTED\"} 2\n"), std::string::npos);
}

TEST(StreamdMetricsTest, SessionAndKvGauges) {
  StreamdMetrics m;
  EXPECT_EQ(m.kv_usage_ratio.Value(), 0);  // no pool yet: 0, not NaN
  m.SetSessions(3, 5, 1);
  m.SetKvBlocks(/*used=*/30, /*free_blocks=*/90, /*block_bytes=*/1024);
  EXPECT_EQ(m.kv_capacity_blocks.Value(), 120);
  EXPECT_EQ(m.kv_used_bytes.Value(), 30 * 1024);
  EXPECT_EQ(m.kv_capacity_bytes.Value(), 120 * 1024);
  EXPECT_EQ(m.kv_usage_ratio.Value(), 0.25);
  const std::string out = m.registry.Serialize();
  EXPECT_NE(out.find("streamd_sessions{state=\"active\"} 3\n"
                     "streamd_sessions{state=\"idle\"} 5\n"
                     "streamd_sessions{state=\"queued\"} 1\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("streamd_kv_usage_ratio 0.25\n"), std::string::npos);
}

TEST(StreamdMetricsTest, ResidentMemoryIsReadAtScrape) {
  const double rss = ResidentMemoryBytes();
  ASSERT_FALSE(std::isnan(rss)) << "/proc/self/statm unreadable";
  EXPECT_GT(rss, 0);
  EXPECT_EQ(std::fmod(rss, static_cast<double>(sysconf(_SC_PAGESIZE))), 0);
  StreamdMetrics m;
  EXPECT_GT(m.process_resident_memory.Value(), 0);
}

// ---- promtool ----------------------------------------------------------------------------

std::string FindOnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Runs `command`, returns its exit status; *output gets stdout and stderr.
int RunCommand(const std::string& command, std::string* output) {
  std::FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) output->append(buf, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(StreamdMetricsTest, PromtoolAcceptsTheFullSet) {
  const std::string promtool = FindOnPath("promtool");
  ASSERT_FALSE(promtool.empty())
      << "promtool is not on PATH: install the Debian package `prometheus` "
         "(scripts/install-deps.sh does) to check the exposition format";

  StreamdMetrics m;
  m.time_to_first_token.Observe(0.042);
  m.inter_token_latency.Observe(0.012);
  m.inter_token_latency.Observe(0.3);
  m.e2e_generation_latency.Observe(4.2);
  m.queue_time.Observe(0.0);
  m.step_duration.Observe(0.004);
  m.step_tokens.Observe(17);
  m.prompt_tokens.Inc(1234);
  m.generation_tokens.Inc(56);
  m.evicted_tokens.Inc(100);
  m.sessions_opened.Inc(3);
  m.sessions_closed.Inc();
  m.sessions_rejected.Inc();
  m.RecordError(8);
  m.SetSessions(1, 1, 0);
  m.SetKvBlocks(12, 500, 2 * 30 * 3 * 64 * 16 * 2);
  // A label value and help text that need escaping, in the same registry.
  m.registry.AddGauge("streamd_test_escaping", "Help with \\ and\na newline.", {"v"})
      .WithLabels({"quote \" backslash \\ newline \n end"})
      .Set(1);

  const std::string text = m.registry.Serialize();
  const std::string file =
      ::testing::TempDir() + "streamd_metrics_" + std::to_string(getpid()) + ".prom";
  {
    std::ofstream out(file, std::ios::binary);
    ASSERT_TRUE(out) << "cannot write " << file;
    out << text;
  }
  std::string output;
  const int rc = RunCommand("'" + promtool + "' check metrics < '" + file + "'", &output);
  std::remove(file.c_str());
  EXPECT_EQ(rc, 0) << "promtool check metrics failed:\n" << output << "\n--- input:\n" << text;
  EXPECT_EQ(output, "") << "promtool reported problems:\n" << output;
}

}  // namespace
}  // namespace streamd::metrics
