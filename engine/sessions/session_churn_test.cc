// Churn: many clients at once loop over open-or-resume, append, generate, truncate, fork,
// detach and close on one registry, with the reaper offloading detached sessions after 20 ms
// and a pool small enough that Opens offload others to fit. Every Resume is answered within
// sessions.resume_wait (plus the reaper's period), and a session that comes back is the session
// that left: the same tokens, the same cache ids and bit for bit the same K/V (so the same
// continuation). When every client has closed its sessions, the pool and the snapshot
// directory are empty again. TSan runs it too (scripts/sanitize-check.sh).
//
// STREAMD_CHURN_SECONDS sets the run's length (default 8; docs/TESTING.md has the longer
// manual run).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/engine_test_util.h"
#include "tests/support/session_registry_test_util.h"

namespace streamd {
namespace {

using namespace std::chrono_literals;
using namespace registry_testing;  // NOLINT: the registry tests' helpers
using streamd::testing::Collector;
using streamd::testing::RandomTokens;
using streamd::testing::UpTo;

constexpr std::chrono::milliseconds kResumeWait = 3s;
constexpr int kClients = 6;
constexpr int kMaxSessionsPerClient = 3;

std::chrono::seconds RunLength() {
  const char* s = std::getenv("STREAMD_CHURN_SECONDS");
  return std::chrono::seconds(s != nullptr ? std::max(1, std::atoi(s)) : 8);
}

// What a session is, as far as a Resume must bring it back.
struct Context {
  int64_t tokens_seen = 0;
  std::vector<int32_t> cached;
  std::vector<int32_t> pending;
  std::vector<uint16_t> kv;
  bool operator==(const Context&) const = default;
};

struct ChurnCounts {
  std::atomic<int64_t> opens{0}, resumes{0}, refused_resumes{0}, forks{0}, closes{0};
  std::atomic<int64_t> generations{0}, truncates{0}, offloads{0}, loads{0};
  std::atomic<int64_t> resume_ms_max{0};
};

class ChurnClient {
 public:
  ChurnClient(int index, SessionRegistry& registry, Engine& engine, ChurnCounts& counts,
              uint64_t seed)
      : name_("client " + std::to_string(index)),
        registry_(registry),
        engine_(engine),
        counts_(counts),
        rng_(seed) {}

  void Run(Clock::time_point until) {
    while (Clock::now() < until && !::testing::Test::HasFatalFailure()) Step();
    CloseAll();
  }

 private:
  struct Owned {
    SessionId id;
    std::shared_ptr<SessionRecord> attached;  // null while detached
    Context left_as;                          // what it was when it was detached
  };

  int Pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }

  Context Read(SessionId id) {
    auto state = engine_.Capture(id);
    EXPECT_TRUE(state.ok()) << state.status().ToString();
    if (!state.ok()) return {};
    return {state->tokens_seen, state->cached_tokens, state->pending, state->kv.data};
  }

  // Waits until the session's input is in its cache (all but the held-back token), so that
  // what a snapshot holds is what the cache holds.
  void WaitPrefilled(SessionId id) {
    for (int i = 0; i < 4000; ++i) {
      auto info = engine_.Get(id);
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      if (info->pending_tokens <= 1) return;
      std::this_thread::sleep_for(1ms);
    }
    FAIL() << "session " << id << " never finished its prefill";
  }

  Owned* AnyAttached() {
    for (Owned& o : owned_) {
      if (o.attached != nullptr) return &o;
    }
    return nullptr;
  }

  void Step() {
    Owned* current = AnyAttached();
    if (current == nullptr) return Bind();
    switch (Pick(10)) {
      case 0:
      case 1:
      case 2:
        return Append(*current);
      case 3:
      case 4:
        return Generate(*current);
      case 5:
        return Truncate(*current);
      case 6:
        return Fork(*current);
      case 7:
      case 8:
        return Detach(*current);
      default:
        return Close(*current);
    }
  }

  // Open a new session, or resume one of ours that is detached (offloaded by now, often).
  void Bind() {
    std::vector<Owned*> detached;
    for (Owned& o : owned_) detached.push_back(&o);
    if (detached.empty() ||
        (static_cast<int>(owned_.size()) < kMaxSessionsPerClient && Pick(3) == 0)) {
      auto s = registry_.Open(Small(), std::make_shared<FakeOwner>(), name_);
      if (!s.ok()) {
        EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted) << s.status().ToString();
        std::this_thread::sleep_for(2ms);  // everyone else is attached: wait for a detach
        return;
      }
      ++counts_.opens;
      owned_.push_back({(*s)->id, *s, {}});
      return Append(owned_.back());  // a generation needs context
    }
    Owned& o = *detached[Pick(static_cast<int>(detached.size()))];
    std::promise<StatusOr<std::shared_ptr<SessionRecord>>> answer;
    const Clock::time_point start = Clock::now();
    registry_.Attach(
        o.id, std::make_shared<FakeOwner>(),
        [&](StatusOr<std::shared_ptr<SessionRecord>> s) { answer.set_value(std::move(s)); });
    auto f = answer.get_future();
    // The bound: resume_wait, and the reaper's period (a tenth of the shortest timeout).
    ASSERT_EQ(f.wait_for(kResumeWait + 2s), std::future_status::ready)
        << "a Resume of " << o.id << " got no answer";
    auto s = f.get();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    int64_t seen = counts_.resume_ms_max.load();
    while (ms.count() > seen && !counts_.resume_ms_max.compare_exchange_weak(seen, ms.count())) {
    }
    if (!s.ok()) {
      // No room now (every other session attached), or still moving: both say to retry.
      EXPECT_TRUE(s.status().code() == StatusCode::kResourceExhausted ||
                  s.status().code() == StatusCode::kUnavailable)
          << s.status().ToString();
      ++counts_.refused_resumes;
      std::this_thread::sleep_for(2ms);
      return;
    }
    ++counts_.resumes;
    o.attached = *s;
    EXPECT_EQ(Read(o.id), o.left_as) << "session " << o.id << " came back changed";
  }

  void Append(Owned& o) {
    const auto tokens = RandomTokens(1 + Pick(24), rng_());
    ASSERT_TRUE(engine_.Append(o.id, tokens).ok());
    registry_.Touched(*o.attached);
  }

  void Generate(Owned& o) {
    Collector events;
    GenerateOptions g = UpTo(1 + Pick(3));
    g.request_id = "r" + std::to_string(++requests_);
    {
      std::lock_guard<std::mutex> lock(o.attached->mu);
      o.attached->generating = true;  // as SessionStream marks it
    }
    const Status started = engine_.Generate(o.id, g, events.Sink());
    ASSERT_TRUE(started.ok()) << started.ToString();
    events.WaitDone(o.id);
    {
      std::lock_guard<std::mutex> lock(o.attached->mu);
      o.attached->generating = false;
    }
    last_request_ = g.request_id;
    ++counts_.generations;
    registry_.Touched(*o.attached);
  }

  void Truncate(Owned& o) {
    if (last_request_.empty()) return Generate(o);
    auto info = engine_.Truncate(o.id, last_request_, 0);
    last_request_.clear();
    // Input appended since, or rows the window evicted: refused, nothing changed.
    if (info.ok()) ++counts_.truncates;
    registry_.Touched(*o.attached);
  }

  void Fork(Owned& o) {
    if (static_cast<int>(owned_.size()) >= kMaxSessionsPerClient) return Detach(o);
    ASSERT_NO_FATAL_FAILURE(WaitPrefilled(o.id));
    auto fork = registry_.Fork(o.attached);
    if (!fork.ok()) {
      EXPECT_EQ(fork.status().code(), StatusCode::kResourceExhausted) << fork.status().ToString();
      return;
    }
    ++counts_.forks;
    // The fork is detached from the start (the reaper may offload it at once): it is a copy of
    // the parent as it is now, blocks shared copy-on-write.
    owned_.push_back({(*fork)->id, nullptr, Read(o.id)});
  }

  void Detach(Owned& o) {
    ASSERT_NO_FATAL_FAILURE(WaitPrefilled(o.id));
    o.left_as = Read(o.id);
    registry_.Detach(o.attached);
    o.attached = nullptr;
    last_request_.clear();
  }

  void Close(Owned& o) {
    const SessionId id = o.id;
    EXPECT_TRUE(registry_.Close(id, CancelledError("closed by its client")).ok());
    ++counts_.closes;
    std::erase_if(owned_, [&](const Owned& x) { return x.id == id; });
    last_request_.clear();
  }

  void CloseAll() {
    for (const Owned& o : owned_) {
      const Status closed = registry_.Close(o.id, CancelledError("the client is done"));
      EXPECT_TRUE(closed.ok()) << o.id << ": " << closed.ToString();
    }
    owned_.clear();
  }

  const std::string name_;
  SessionRegistry& registry_;
  Engine& engine_;
  ChurnCounts& counts_;
  std::mt19937_64 rng_;
  std::vector<Owned> owned_;
  std::string last_request_;  // of the attached session's last generation
  int64_t requests_ = 0;
};

TEST(ChurnTest, ResumesAlwaysAnswerAndBringBackTheWholeSession) {
  // Room for 8 of the 4 + 32 sessions beside the prefill headroom: 6 clients that hold up to
  // 3 each need offloads to fit.
  const int64_t block = BlockPool::BlockBytes({2, 2, 16}, 16);
  const int32_t bound = SessionCache::BoundBlocks({CacheMode::kSink, 4, 32, 32}, 16);
  auto e = MakeEngine(block * (8 * bound + DefaultPrefillHeadroom({64, 16}, 32, 16)));
  const int32_t baseline_blocks = e.engine->Stats().blocks_used;
  const std::string dir = TempDir();
  auto persister = MakePersister(e, dir);
  RegistryOptions options = Timeouts(1h, 20ms);
  options.resume_wait = kResumeWait;
  options.max_detached_share = 1.0;  // the cap has tests of its own; here Opens make room
  SessionRegistry registry(*e.engine, options, persister.get());
  ChurnCounts counts;
  RegistryHooks hooks;
  hooks.on_offload = [&] { ++counts.offloads; };
  hooks.on_load = [&] { ++counts.loads; };
  registry.set_hooks(hooks);
  registry.StartReaper();

  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Clock::time_point until = Clock::now() + RunLength();
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      ChurnClient(i, registry, *e.engine, counts, seed + static_cast<uint64_t>(i)).Run(until);
    });
  }
  for (std::thread& t : clients) t.join();

  std::printf(
      "churn: %lld opens, %lld resumes (%lld refused: retry), %lld forks, %lld closes, "
      "%lld generations, %lld truncates, %lld offloads, %lld loads; slowest resume %lld "
      "ms\n",
      static_cast<long long>(counts.opens), static_cast<long long>(counts.resumes),
      static_cast<long long>(counts.refused_resumes), static_cast<long long>(counts.forks),
      static_cast<long long>(counts.closes), static_cast<long long>(counts.generations),
      static_cast<long long>(counts.truncates), static_cast<long long>(counts.offloads),
      static_cast<long long>(counts.loads), static_cast<long long>(counts.resume_ms_max));
  // Not vacuous: sessions really left memory and came back.
  EXPECT_GT(counts.offloads, 10);
  EXPECT_GT(counts.loads, 10);
  EXPECT_GT(counts.resumes, 10);
  EXPECT_LE(counts.resume_ms_max, (kResumeWait + 2s).count() * 1000);

  // Everything the clients held is gone: no session, no block, no snapshot.
  EXPECT_TRUE(registry.All().empty());
  // A closed session stops counting at once; its blocks go back when the engine destroys it,
  // after any step still running it (Engine::DestroyClosed): wait for both, bounded.
  const auto drained = [&] {
    const EngineStats st = e.engine->Stats();
    return st.sessions == 0 && st.blocks_used == baseline_blocks;
  };
  for (int i = 0; i < 2000 && !drained(); ++i) std::this_thread::sleep_for(5ms);
  const EngineStats after = e.engine->Stats();
  EXPECT_EQ(after.sessions, 0);
  EXPECT_EQ(after.blocks_used, baseline_blocks);
  // A transition that ended after the last Close deletes its session's snapshot then.
  size_t left = 0;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(persister->WaitIdle(Clock::now() + 30s));
    auto listed = persister->store().List();
    ASSERT_TRUE(listed.ok());
    left = listed->size();
    if (left == 0) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(left, 0u) << "snapshots of closed sessions are left";
}

}  // namespace
}  // namespace streamd
