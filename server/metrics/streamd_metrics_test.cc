#include "server/metrics/streamd_metrics.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "server/metrics/process_memory.h"
#include "server/metrics/snapshot_metrics.h"

namespace streamd::metrics {
namespace {

using prometheus::MetricFamily;
using prometheus::MetricType;

const MetricFamily* FindFamily(const std::vector<MetricFamily>& families, const std::string& name) {
  for (const MetricFamily& f : families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool Contains(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

TEST(StreamdMetricsTest, ExposesTheWholeSetWithTypes) {
  StreamdMetrics m;
  m.SetBuildInfo("0.0.0-test", "cpu", "m.gguf");
  const std::vector<MetricFamily> families = m.source->Collect();
  const std::vector<std::pair<std::string, MetricType>> expected = {
      {"streamd_time_to_first_token_seconds", MetricType::Histogram},
      {"streamd_inter_token_latency_seconds", MetricType::Histogram},
      {"streamd_e2e_generation_latency_seconds", MetricType::Histogram},
      {"streamd_queue_time_seconds", MetricType::Histogram},
      {"streamd_request_prefill_time_seconds", MetricType::Histogram},
      {"streamd_request_decode_time_seconds", MetricType::Histogram},
      {"streamd_request_prompt_tokens", MetricType::Histogram},
      {"streamd_request_generation_tokens", MetricType::Histogram},
      {"streamd_step_duration_seconds", MetricType::Histogram},
      {"streamd_step_tokens", MetricType::Histogram},
      {"streamd_prompt_tokens_total", MetricType::Counter},
      {"streamd_generation_tokens_total", MetricType::Counter},
      {"streamd_evicted_tokens_total", MetricType::Counter},
      {"streamd_preemptions_total", MetricType::Counter},
      {"streamd_sessions_opened_total", MetricType::Counter},
      {"streamd_sessions_closed_total", MetricType::Counter},
      {"streamd_sessions_rejected_total", MetricType::Counter},
      {"streamd_errors_total", MetricType::Counter},
      {"streamd_requests_total", MetricType::Counter},
      {"streamd_request_success_total", MetricType::Counter},
      {"streamd_http_requests_total", MetricType::Counter},
      {"streamd_backend_failures_total", MetricType::Counter},
      {"streamd_sessions", MetricType::Gauge},
      {"streamd_sessions_attached", MetricType::Gauge},
      {"streamd_kv_used_blocks", MetricType::Gauge},
      {"streamd_kv_free_blocks", MetricType::Gauge},
      {"streamd_kv_reserved_blocks", MetricType::Gauge},
      {"streamd_kv_capacity_blocks", MetricType::Gauge},
      {"streamd_kv_used_bytes", MetricType::Gauge},
      {"streamd_kv_capacity_bytes", MetricType::Gauge},
      {"streamd_kv_usage_ratio", MetricType::Gauge},
      {"streamd_backend_healthy", MetricType::Gauge},
      {"streamd_ready", MetricType::Gauge},
      {"streamd_process_resident_memory_bytes", MetricType::Gauge},
      {"streamd_build_info", MetricType::Gauge},
  };
  EXPECT_EQ(families.size(), expected.size());
  std::set<std::string> names;
  for (const MetricFamily& f : families) EXPECT_TRUE(names.insert(f.name).second) << f.name;
  for (const auto& [name, type] : expected) {
    const MetricFamily* f = FindFamily(families, name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_EQ(f->type, type) << name;
    EXPECT_FALSE(f->help.empty()) << name;
    EXPECT_FALSE(f->metric.empty()) << name << " has no series before its first update";
  }
}

// The buckets are vLLM's (vllm/v1/metrics/loggers.py); checked in the exposition itself.
TEST(StreamdMetricsTest, HistogramBucketsMatchVllm) {
  StreamdMetrics m;
  const std::vector<MetricFamily> families = m.source->Collect();
  const auto bounds = [&](const std::string& name) {
    std::vector<double> out;
    const MetricFamily* f = FindFamily(families, name);
    if (f == nullptr || f->metric.empty()) return out;
    for (const auto& b : f->metric[0].histogram.bucket) {
      if (!std::isinf(b.upper_bound)) out.push_back(b.upper_bound);
    }
    return out;
  };
  EXPECT_EQ(bounds("streamd_time_to_first_token_seconds"),
            std::vector<double>(kTimeToFirstTokenBuckets.begin(), kTimeToFirstTokenBuckets.end()));
  EXPECT_EQ(kTimeToFirstTokenBuckets.front(), 0.001);
  EXPECT_EQ(kTimeToFirstTokenBuckets.back(), 2560.0);
  const std::vector<double> itl = bounds("streamd_inter_token_latency_seconds");
  ASSERT_EQ(itl.size(), 19u);
  EXPECT_EQ(itl.front(), 0.01);
  EXPECT_EQ(itl.back(), 80.0);
  const std::vector<double> queue = bounds("streamd_queue_time_seconds");
  EXPECT_EQ(bounds("streamd_e2e_generation_latency_seconds"), queue);
  EXPECT_EQ(bounds("streamd_request_prefill_time_seconds"), queue);
  EXPECT_EQ(bounds("streamd_request_decode_time_seconds"), queue);
  ASSERT_FALSE(queue.empty());
  EXPECT_EQ(queue.front(), 0.3);
  EXPECT_EQ(queue.back(), 7680.0);
  EXPECT_EQ(bounds("streamd_step_tokens"),
            (std::vector<double>{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}));
  EXPECT_EQ(bounds("streamd_request_generation_tokens").back(), 100000.0);
  const std::string out = m.Text();
  EXPECT_TRUE(Contains(out, "streamd_time_to_first_token_seconds_bucket{le=\"2560\"} 0\n")) << out;
  EXPECT_TRUE(Contains(out, "streamd_inter_token_latency_seconds_bucket{le=\"0.075\"} 0\n"));
  EXPECT_TRUE(Contains(out, "streamd_step_tokens_bucket{le=\"16384\"} 0\n"));
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
  const std::string out = m.Text();
  EXPECT_FALSE(Contains(out, "code=\"OK\""));
  // Every other code is exposed from the start, at 0.
  EXPECT_TRUE(Contains(out, "streamd_errors_total{code=\"DATA_LOSS\"} 0\n")) << out;
  EXPECT_TRUE(Contains(out, "streamd_errors_total{code=\"RESOURCE_EXHAUSTED\"} 2\n"));
  EXPECT_TRUE(Contains(out, "streamd_errors_total{code=\"INVALID_ARGUMENT\"} 1\n"));
  EXPECT_TRUE(Contains(out, "streamd_errors_total{code=\"UNKNOWN\"} 1\n"));
}

TEST(StreamdMetricsTest, RequestsAndOutcomesByLabel) {
  StreamdMetrics m;
  m.RecordRequest(RequestKind::kGenerate);
  m.RecordRequest(RequestKind::kGenerate);
  m.RecordRequest(RequestKind::kImportSession);
  m.RecordGeneration({Finished::kAbort, 7, 3, 0.25, 1.0});
  m.RecordGeneration({Finished::kLength, 0, 0, 0.0, 0.5});  // cancelled before its first token
  const std::string out = m.Text();
  EXPECT_TRUE(Contains(out, "streamd_requests_total{kind=\"generate\"} 2\n")) << out;
  EXPECT_TRUE(Contains(out, "streamd_requests_total{kind=\"import_session\"} 1\n"));
  EXPECT_TRUE(Contains(out, "streamd_requests_total{kind=\"open\"} 0\n"));
  EXPECT_TRUE(Contains(out, "streamd_request_success_total{finished_reason=\"abort\"} 1\n"));
  EXPECT_TRUE(Contains(out, "streamd_request_success_total{finished_reason=\"length\"} 1\n"));
  EXPECT_TRUE(Contains(out, "streamd_request_success_total{finished_reason=\"stop\"} 0\n"));
  // Both end to end; only the one that produced a token has a first token and a decode phase.
  EXPECT_TRUE(Contains(out, "streamd_e2e_generation_latency_seconds_count 2\n"));
  EXPECT_TRUE(Contains(out, "streamd_time_to_first_token_seconds_count 1\n"));
  EXPECT_TRUE(Contains(out, "streamd_request_decode_time_seconds_sum 0.75\n"));
  EXPECT_TRUE(Contains(out, "streamd_request_prompt_tokens_sum 7\n"));
  EXPECT_TRUE(Contains(out, "streamd_request_generation_tokens_count 2\n"));
}

TEST(StreamdMetricsTest, HttpAnswersByRouteAndStatus) {
  StreamdMetrics m;
  // Every route's 200 exists from the start.
  std::string out = m.Text();
  EXPECT_TRUE(
      Contains(out, "streamd_http_requests_total{route=\"/v1/responses\",status=\"200\"} 0\n"))
      << out;
  m.RecordHttpRequest("/v1/chat/completions", 200);
  m.RecordHttpRequest("/v1/chat/completions", 200);
  m.RecordHttpRequest("/v1/chat/completions", 429);
  m.RecordHttpRequest("other", 404);
  out = m.Text();
  EXPECT_TRUE(Contains(
      out, "streamd_http_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 2\n"))
      << out;
  EXPECT_TRUE(Contains(
      out, "streamd_http_requests_total{route=\"/v1/chat/completions\",status=\"429\"} 1\n"));
  EXPECT_TRUE(Contains(out, "streamd_http_requests_total{route=\"other\",status=\"404\"} 1\n"));
  EXPECT_TRUE(
      Contains(out, "streamd_http_requests_total{route=\"/v1/models\",status=\"200\"} 0\n"));
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
  m.SetKvBlocks(0, 0, 1024);
  EXPECT_EQ(m.kv_usage_ratio.Value(), 0);
  const std::string out = m.Text();
  EXPECT_TRUE(Contains(out, "streamd_sessions{state=\"active\"} 3\n")) << out;
  EXPECT_TRUE(Contains(out, "streamd_sessions{state=\"idle\"} 5\n"));
  EXPECT_TRUE(Contains(out, "streamd_sessions{state=\"queued\"} 1\n"));
}

TEST(StreamdMetricsTest, ScrapeHooksRunBeforeEveryCollectionInOrder) {
  StreamdMetrics m;
  std::vector<int> calls;
  m.AddScrapeHook([&] {
    calls.push_back(1);
    m.sessions_attached.Set(calls.size());
  });
  m.AddScrapeHook([&] { calls.push_back(2); });
  (void)m.Text();
  const std::string out = m.Text();
  EXPECT_EQ(calls, (std::vector<int>{1, 2, 1, 2}));
  EXPECT_TRUE(Contains(out, "streamd_sessions_attached 3\n")) << out;
}

TEST(StreamdMetricsTest, ResidentMemoryIsReadAtScrape) {
  const double rss = ResidentMemoryBytes();
  ASSERT_FALSE(std::isnan(rss)) << "/proc/self/statm unreadable";
  EXPECT_GT(rss, 0);
  EXPECT_EQ(std::fmod(rss, static_cast<double>(sysconf(_SC_PAGESIZE))), 0);
  StreamdMetrics m;
  EXPECT_EQ(m.process_resident_memory.Value(), 0);  // not read until a scrape
  (void)m.Text();
  EXPECT_GT(m.process_resident_memory.Value(), 0);
}

TEST(StreamdMetricsTest, SnapshotReasonsAreExportedFromZero) {
  StreamdMetrics m;
  SnapshotMetrics s(*m.registry);
  s.RecordWriteError("RESOURCE_EXHAUSTED");
  const std::string out = m.Text();
  EXPECT_TRUE(
      Contains(out, "streamd_snapshot_write_errors_total{reason=\"RESOURCE_EXHAUSTED\"} 1\n"))
      << out;
  EXPECT_TRUE(Contains(out, "streamd_snapshot_write_errors_total{reason=\"INTERNAL\"} 0\n"));
  EXPECT_TRUE(Contains(out, "streamd_snapshots_rejected_total{reason=\"DATA_LOSS\"} 0\n"));
  EXPECT_TRUE(Contains(out, "streamd_sessions_offloaded 0\n"));
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
  SnapshotMetrics snapshots(*m.registry);
  m.SetBuildInfo("0.2.0", "cpu", "SmolLM2 \"135M\"\\x");  // a value that needs escaping
  m.RecordGeneration({Finished::kStop, 12, 34, 0.042, 4.2});
  m.inter_token_latency.Observe(0.012);
  m.inter_token_latency.Observe(0.3);
  m.queue_time.Observe(0.0);
  m.RecordStep(0.004, 17);
  m.prompt_tokens.Increment(1234);
  m.generation_tokens.Increment(56);
  m.evicted_tokens.Increment(100);
  m.sessions_opened.Increment(3);
  m.sessions_closed.Increment();
  m.sessions_rejected.Increment();
  m.RecordError(8);
  m.RecordRequest(RequestKind::kOpen);
  m.SetSessions(1, 1, 0);
  m.SetKvBlocks(12, 500, 2 * 30 * 3 * 64 * 16 * 2);
  snapshots.write_bytes.Observe(5.9e6);

  const std::string text = m.Text();
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
