// End-to-end churn: a real daemon with offload_after in the tens of milliseconds and a pool for
// a few sessions, and many clients looping over open-or-resume, append, generate, truncate,
// fork, detach and close. Every message gets its answer within the bound (sessions.resume_wait
// and a margin, never a silent wait); every Resume brings back every token the session had
// (Opened's tokens_seen); when the clients are done the KV blocks held and the session count
// return to their baseline, no session is left in a transition, and the daemon's RSS is where it
// was after the warm-up. The registry's ChurnTest (server_test, also under TSan) checks the
// cache bit for bit; this one the daemon as deployed.
//
// STREAMD_CHURN_SECONDS sets the run's length (default 20; docs/TESTING.md has the longer run).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/daemon_process.h"
#include "tests/e2e/durability_util.h"
#include "tests/e2e/e2e_util.h"

namespace streamd::e2e {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kClients = 8;
constexpr int kMaxSessionsPerClient = 3;
constexpr auto kResumeWait = 5s;
// Any answer later than this is a hang: resume_wait, the reaper's period and a loaded 2-core
// machine's worst step.
constexpr auto kAnswerBound = kResumeWait + 5s;

std::chrono::seconds RunLength() {
  const char* s = std::getenv("STREAMD_CHURN_SECONDS");
  return std::chrono::seconds(s != nullptr ? std::max(1, std::atoi(s)) : 20);
}

int64_t RssBytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

struct Tally {
  std::atomic<int64_t> opens{0}, resumes{0}, retried{0}, forks{0}, closes{0}, generations{0};
  std::atomic<int64_t> truncates{0}, slowest_ms{0};
  void Took(Clock::duration d) {
    const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
    int64_t seen = slowest_ms.load();
    while (ms > seen && !slowest_ms.compare_exchange_weak(seen, ms)) {
    }
  }
};

class ChurnClient {
 public:
  ChurnClient(DaemonProcess& daemon, Tally& tally, uint64_t seed)
      : daemon_(daemon), tally_(tally), rng_(seed) {}

  void Run(Clock::time_point until) {
    while (Clock::now() < until && !::testing::Test::HasFatalFailure()) Step();
    CloseAll();
  }

 private:
  struct Owned {
    std::string id;
    int64_t tokens_seen = 0;  // as it was when its stream ended
  };

  int Pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }

  // The next message, which must come within the bound.
  std::optional<v1::ServerMessage> Next() {
    const Clock::time_point start = Clock::now();
    std::optional<v1::ServerMessage> m = stream_->Read();
    const Clock::duration took = Clock::now() - start;
    tally_.Took(took);
    EXPECT_LT(took, kAnswerBound)
        << "an answer took " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
        << " ms";
    EXPECT_TRUE(m.has_value()) << "the stream ended without an answer";
    return m;
  }

  void Step() {
    if (stream_ == nullptr) return Bind();
    switch (Pick(10)) {
      case 0:
      case 1:
      case 2:
        return Append();
      case 3:
      case 4:
        return Generate();
      case 5:
        return Truncate();
      case 6:
        return Fork();
      case 7:
      case 8:
        return Detach();
      default:
        return Close();
    }
  }

  void Bind() {
    // A stream lives for a few messages: its deadline bounds any one of them (a hang fails the
    // test here, with the daemon's log, instead of running into ctest's timeout).
    stream_ = std::make_unique<RawStream>(daemon_.Channel(), 60s);
    const bool open =
        owned_.empty() || (static_cast<int>(owned_.size()) < kMaxSessionsPerClient && Pick(3) == 0);
    size_t which = 0;
    if (open) {
      ASSERT_TRUE(stream_->Write(OpenMsg(60)));
    } else {
      which = static_cast<size_t>(Pick(static_cast<int>(owned_.size())));
      ASSERT_TRUE(stream_->Write(ResumeMsg(owned_[which].id)));
    }
    std::optional<v1::ServerMessage> m = Next();
    ASSERT_TRUE(m);
    if (m->has_error()) {
      // The pool is full of attached sessions, or the session is still moving: retry later.
      const int code = m->error().code();
      EXPECT_TRUE(code == static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED) ||
                  code == static_cast<int>(grpc::StatusCode::UNAVAILABLE))
          << m->ShortDebugString();
      ++tally_.retried;
      stream_->WritesDone();
      stream_->Finish();
      stream_.reset();
      std::this_thread::sleep_for(5ms);
      return;
    }
    ASSERT_TRUE(m->has_opened()) << m->ShortDebugString();
    if (open) {
      ++tally_.opens;
      owned_.push_back({m->opened().session_id(), 0});
      current_ = owned_.size() - 1;
      return Append();  // a generation needs context
    }
    ++tally_.resumes;
    current_ = which;
    EXPECT_EQ(m->opened().cache().tokens_seen(), owned_[which].tokens_seen)
        << "session " << owned_[which].id << " came back without all its tokens";
    seen_ = m->opened().cache().tokens_seen();
  }

  void Append() {
    std::vector<int32_t> ids;
    for (int i = 1 + Pick(30); i > 0; --i) ids.push_back(100 + Pick(5000));
    v1::CacheState state;
    std::optional<v1::Error> error = stream_->Append(TokensMsg(ids).append(), &state);
    ASSERT_FALSE(error) << error->ShortDebugString();
    seen_ = state.tokens_seen();
  }

  void Generate() {
    request_ = "g" + std::to_string(++requests_);
    ASSERT_TRUE(stream_->Write(GenerateMsg(1 + Pick(4), true, request_)));
    const Clock::time_point start = Clock::now();
    Generation g = ReadGeneration(*stream_);
    EXPECT_LT(Clock::now() - start, kAnswerBound);
    ASSERT_TRUE(g.ended);
    ++tally_.generations;
    seen_ = g.cache.tokens_seen();
  }

  void Truncate() {
    if (request_.empty()) return Generate();
    v1::ClientMessage m;
    m.mutable_truncate()->set_request_id(request_);
    m.mutable_truncate()->set_keep_tokens(0);
    request_.clear();
    ASSERT_TRUE(stream_->Write(m));
    std::optional<v1::ServerMessage> answer = Next();
    ASSERT_TRUE(answer);
    if (answer->has_cache_state()) {
      ++tally_.truncates;
      seen_ = answer->cache_state().tokens_seen();
    } else {  // rows the window evicted: refused, nothing changed
      ASSERT_TRUE(answer->has_error()) << answer->ShortDebugString();
    }
  }

  void Fork() {
    if (static_cast<int>(owned_.size()) >= kMaxSessionsPerClient) return Detach();
    v1::ClientMessage m;
    m.mutable_fork()->set_request_id("f");
    ASSERT_TRUE(stream_->Write(m));
    std::optional<v1::ServerMessage> answer = Next();
    ASSERT_TRUE(answer);
    if (answer->has_error()) {
      EXPECT_EQ(answer->error().code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED))
          << answer->ShortDebugString();
      return;
    }
    ASSERT_TRUE(answer->has_forked()) << answer->ShortDebugString();
    ++tally_.forks;
    EXPECT_EQ(answer->forked().cache().tokens_seen(), seen_);
    owned_.push_back({answer->forked().session_id(), answer->forked().cache().tokens_seen()});
  }

  void Detach() {
    // A half-close: the call ends once the session's snapshot is written.
    stream_->WritesDone();
    const Clock::time_point start = Clock::now();
    EXPECT_TRUE(stream_->Finish().ok());
    EXPECT_LT(Clock::now() - start, kAnswerBound);
    owned_[current_].tokens_seen = seen_;
    stream_.reset();
    request_.clear();
  }

  void Close() {
    ASSERT_TRUE(stream_->Write(CloseMsg()));
    EXPECT_TRUE(stream_->Finish().ok());
    ++tally_.closes;
    owned_.erase(owned_.begin() + static_cast<std::ptrdiff_t>(current_));
    stream_.reset();
    request_.clear();
  }

  void CloseAll() {
    if (stream_ != nullptr) Close();
    const Clock::time_point give_up = Clock::now() + 90s;
    for (int tries = 0; !owned_.empty() && tries < 200 && Clock::now() < give_up; ++tries) {
      Bind();  // resumes one of them (or retries)
      if (stream_ != nullptr && owned_.size() > 0) Close();
    }
    EXPECT_TRUE(owned_.empty()) << owned_.size() << " sessions could not be closed";
  }

  DaemonProcess& daemon_;
  Tally& tally_;
  std::mt19937_64 rng_;
  std::vector<Owned> owned_;
  std::unique_ptr<RawStream> stream_;
  size_t current_ = 0;  // owned_ index of the session the stream drives
  int64_t seen_ = 0;    // its tokens_seen, from the last answer
  std::string request_;
  int64_t requests_ = 0;
};

TEST(ChurnE2eTest, ResumesAtAnyMomentGetTheirContextAndEveryMessageItsAnswer) {
  const TempDir tmp;  // removed, with the daemon's snapshots, after the daemon has stopped
  const std::string dir = tmp.Sub("sessions");
  auto d = DaemonProcess::Start({"--sessions.snapshot_dir=" + dir, "--sessions.offload_after=30ms",
                                 "--sessions.resume_wait=5s", "--sessions.max_detached_share=1",
                                 "--engine.kv_pool=40MiB", "--engine.max_chunk=64",
                                 "--sessions.default_window=60", "--sessions.admission_timeout=0s",
                                 "--sessions.snapshot_interval=50ms"});
  ASSERT_NE(d, nullptr);
  const std::string at_start = d->ScrapeMetrics();
  const double blocks_at_start = MetricValue(at_start, "streamd_kv_used_blocks");

  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Tally tally;
  const auto run = RunLength();
  const Clock::time_point start = Clock::now();
  int64_t rss_after_warmup = -1;
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back(
        [&, i] { ChurnClient(*d, tally, seed + static_cast<uint64_t>(i)).Run(start + run); });
  }
  std::this_thread::sleep_for(run / 4);
  rss_after_warmup = RssBytes(d->pid());
  for (std::thread& t : clients) t.join();

  std::printf(
      "churn e2e: %lld opens, %lld resumes, %lld retried, %lld forks, %lld closes, %lld "
      "generations, %lld truncates; slowest answer %lld ms\n",
      static_cast<long long>(tally.opens), static_cast<long long>(tally.resumes),
      static_cast<long long>(tally.retried), static_cast<long long>(tally.forks),
      static_cast<long long>(tally.closes), static_cast<long long>(tally.generations),
      static_cast<long long>(tally.truncates), static_cast<long long>(tally.slowest_ms));
  EXPECT_GT(tally.resumes, 20);
  if (::testing::Test::HasFailure()) {
    const std::string log = d->Stderr();
    std::printf("the daemon's log, last 8 KiB:\n%s\n",
                log.substr(log.size() > 8192 ? log.size() - 8192 : 0).c_str());
  }

  // Back to the baseline once every client closed its sessions.
  const auto settled = [&] {
    const std::string m = d->ScrapeMetrics();
    return MetricValue(m, "streamd_kv_used_blocks") == blocks_at_start &&
           MetricValue(m, "streamd_sessions_in_transition{state=\"offloading\"}") == 0 &&
           MetricValue(m, "streamd_sessions_in_transition{state=\"loading\"}") == 0;
  };
  bool back = false;
  for (int i = 0; i < 200 && !back; ++i) {
    back = settled();
    if (!back) std::this_thread::sleep_for(50ms);
  }
  const std::string end = d->ScrapeMetrics();
  EXPECT_TRUE(back) << end;
  EXPECT_GT(MetricValue(end, "streamd_session_offloads_total"), 20) << "nothing was offloaded";
  EXPECT_GT(
      MetricValue(end, "streamd_session_transitions_total{outcome=\"ok\",transition=\"load\"}"),
      20);
  EXPECT_EQ(MetricValue(end, "streamd_resume_waits_total{outcome=\"timed_out\"}"), 0);
  const int64_t rss = RssBytes(d->pid());
  EXPECT_LE(rss, rss_after_warmup + rss_after_warmup / 10 + (32 << 20))
      << "RSS grew from " << rss_after_warmup << " after the warm-up to " << rss;
}

}  // namespace
}  // namespace streamd::e2e
