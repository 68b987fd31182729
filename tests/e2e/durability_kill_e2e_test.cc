// End-to-end: kill -9 at random moments, 20+ times on one snapshot directory (docs/SESSIONS.md,
// "The guarantee"). Every session comes back as its last completed snapshot, which is a state
// the client was acknowledged (or the request in flight), holds everything acknowledged before a
// quiet snapshot interval, and continues exactly as a twin session of a daemon that was never
// killed. About 70 s on a 2-core machine. The other durability tests: durability_e2e_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/snapshot/snapshot_format.h"
#include "engine/snapshot/snapshot_layout.h"
#include "tests/e2e/daemon_process.h"
#include "tests/e2e/durability_fixture.h"
#include "tests/e2e/durability_util.h"
#include "tests/e2e/e2e_util.h"
#include "tests/support/snapshot_testing.h"

namespace streamd::e2e {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// ---- kill -9 at random moments --------------------------------------------------------------

// A session of the reference daemon that follows one test session's context (its twin): it is
// extended with each new piece of context, and made again from scratch when the test session
// came back with less than the twin has (a kill lost a tail that was never written).
struct Twin {
  std::unique_ptr<RawStream> stream;
  std::vector<int32_t> context;

  void Close() {
    if (stream == nullptr) return;
    stream->Write(CloseMsg());
    EXPECT_TRUE(stream->Finish().ok());
    stream.reset();
    context.clear();
  }
  // Brings the twin's context to `want` (which holds no -1).
  bool Sync(const DaemonProcess& reference, const std::vector<int32_t>& want) {
    const bool prefix =
        context.size() <= want.size() && std::equal(context.begin(), context.end(), want.begin());
    if (stream == nullptr || !prefix) {
      Close();
      stream = std::make_unique<RawStream>(reference.Channel());
      if (!stream->Open()) return false;
    }
    if (context.size() < want.size()) {
      const std::vector<int32_t> rest(want.begin() + static_cast<std::ptrdiff_t>(context.size()),
                                      want.end());
      if (auto e = stream->Append(TokensMsg(rest).append())) {
        ADD_FAILURE() << "reference append: " << e->ShortDebugString();
        return false;
      }
      context = want;
    }
    return true;
  }
  Generation Generate(int32_t n) {
    Generation g = GenerateOn(*stream, n);
    context.insert(context.end(), g.ids.begin(), g.ids.end());
    if (g.done.reason() == v1::FINISH_REASON_END_OF_GENERATION) Close();  // its id is unknown
    return g;
  }
};

// One session as its client saw it, across the lives of the daemon.
struct Tracked {
  std::string id;
  // The acknowledged context, token by token; -1 stands for an end-of-generation token (it
  // stays in the context, but no TokenDelta shows its id).
  std::vector<int32_t> context;
  std::unique_ptr<RawStream> stream;  // attached, in the current life
  Twin twin;
  struct Ack {
    int64_t seen = 0;  // context size acknowledged (Opened, an Append's CacheState, a Done)
    Clock::time_point at;
    std::optional<Clock::time_point> next;  // when the next request went out
  };
  std::vector<Ack> acks;  // of the current life
  int64_t durable = -1;   // context that any kill must keep (-1: nothing yet)
  enum class InFlight { kNone, kAppend, kGenerate };
  InFlight in_flight = InFlight::kNone;
  std::vector<int32_t> in_flight_tokens;  // the append's tokens, or the deltas received
  int32_t in_flight_max = 0;              // the generation's max_tokens
  bool ended = false;                     // an end of text entered the context: no more requests
  int lives = 0;

  bool Opaque() const { return std::count(context.begin(), context.end(), -1) > 0; }
  void Acked() { acks.push_back({static_cast<int64_t>(context.size()), Clock::now(), {}}); }
  void Sending() {
    if (!acks.empty() && !acks.back().next) acks.back().next = Clock::now();
  }
};

// Appends and greedy generations, with pauses (a few longer than a snapshot interval and its
// write), until the daemon dies under it. Tracks exactly what was acknowledged. A session
// without a stream is opened here first, so that a kill may come before its first write.
void Drive(const DaemonProcess& d, Tracked& t, uint64_t seed, const std::vector<int32_t>& words) {
  std::mt19937_64 rng(seed);
  if (t.stream == nullptr) {
    t.stream = std::make_unique<RawStream>(d.Channel());
    if (!t.stream->Write(OpenMsg())) return;
    const std::optional<v1::ServerMessage> m = t.stream->Read();
    if (!m) return;  // died before it answered: there is no session to track
    if (!m->has_opened()) {
      ADD_FAILURE() << "open: " << m->ShortDebugString();
      return;
    }
    t.id = m->opened().session_id();
    t.Acked();  // an empty session is a state too
  }
  RawStream& s = *t.stream;
  while (!t.ended) {
    const bool append = t.context.empty() || rng() % 5 < 3;
    t.in_flight_tokens.clear();
    if (append) {
      const size_t from = rng() % words.size(), n = 2 + rng() % 6;
      for (size_t i = 0; i < n; ++i) t.in_flight_tokens.push_back(words[(from + i) % words.size()]);
      t.in_flight = Tracked::InFlight::kAppend;
      t.Sending();
      if (!s.Write(TokensMsg(t.in_flight_tokens))) return;
    } else {
      t.in_flight_max = static_cast<int32_t>(3 + rng() % 5);
      t.in_flight = Tracked::InFlight::kGenerate;
      t.Sending();
      if (!s.Write(GenerateMsg(t.in_flight_max))) return;
    }
    while (t.in_flight != Tracked::InFlight::kNone) {
      std::optional<v1::ServerMessage> m = s.Read();
      if (!m) return;  // the daemon died: the request stays in flight
      if (m->has_error()) {
        ADD_FAILURE() << t.id << ": " << m->error().ShortDebugString();
        return;
      }
      if (append && m->has_cache_state()) {
        t.context.insert(t.context.end(), t.in_flight_tokens.begin(), t.in_flight_tokens.end());
        EXPECT_EQ(m->cache_state().tokens_seen(), static_cast<int64_t>(t.context.size()));
        t.in_flight = Tracked::InFlight::kNone;
        t.Acked();
      } else if (!append && m->has_token_delta()) {
        const auto& ids = m->token_delta().token_ids();
        t.in_flight_tokens.insert(t.in_flight_tokens.end(), ids.begin(), ids.end());
      } else if (!append && m->has_generation_done()) {
        const v1::FinishReason reason = m->generation_done().reason();
        t.context.insert(t.context.end(), t.in_flight_tokens.begin(), t.in_flight_tokens.end());
        if (reason == v1::FINISH_REASON_END_OF_GENERATION) {
          t.context.push_back(-1);
          t.ended = true;
        } else {
          EXPECT_EQ(reason, v1::FINISH_REASON_LENGTH) << m->ShortDebugString();
          EXPECT_EQ(t.in_flight_tokens.size(), static_cast<size_t>(t.in_flight_max));
        }
        t.in_flight = Tracked::InFlight::kNone;
        t.Acked();
        if (auto state = s.Read(); state && state->has_cache_state()) {
          EXPECT_EQ(state->cache_state().tokens_seen(), static_cast<int64_t>(t.context.size()));
        } else {
          return;  // died right after the Done (which acknowledged the generation)
        }
      }
    }
    const uint64_t pause = rng() % 20;
    if (pause == 0) {
      std::this_thread::sleep_for(kInterval + kWriteMargin + 100ms);  // quiet: must be written
    } else if (pause >= 12) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 45));
    }
  }
}

struct KillStats {
  std::atomic<int> continuations{0};        // restored sessions whose continuation was compared
  std::atomic<int> rolled_back{0};          // back to an earlier acknowledgement than the last
  std::atomic<int> completed_in_flight{0};  // with the request in flight done
  std::atomic<int> never_written{0};        // killed before their first snapshot (NOT_FOUND)
  std::atomic<int> quiet_kept{0};           // quiet acknowledgements that a kill had to keep
  int killed_generating = 0;                // kills that landed while a generation ran
};

// After a kill: the session's last completed snapshot (read from the directory before the
// daemon restarted) must be a state the client was acknowledged, or the request in flight done;
// must hold everything acknowledged before a quiet period; Resume must bring back exactly it;
// and its greedy continuation must equal its twin's. False when the session is gone.
bool VerifyRestored(const DaemonProcess& d, const DaemonProcess& reference, Tracked& t,
                    const std::optional<SnapshotSummary>& stored, KillStats& stats) {
  SCOPED_TRACE("session " + t.id);
  if (!stored) {
    EXPECT_LT(t.durable, 0) << "no snapshot, although " << t.durable
                            << " tokens were acknowledged and then quiet for longer than the "
                               "snapshot interval + "
                            << kWriteMargin.count() << " ms";
    Resumed r = ResumeSession(d, t.id);
    EXPECT_FALSE(r.opened) << "resumed without a snapshot";
    EXPECT_EQ(r.error.code(), grpc::StatusCode::NOT_FOUND) << r.error.ShortDebugString();
    ++stats.never_written;
    return false;
  }
  EXPECT_EQ(stored->id.ToString(), t.id);
  const int64_t seen = SeenOf(*stored);
  std::set<int64_t> acked;
  for (const Tracked::Ack& a : t.acks) acked.insert(a.seen);
  bool known = acked.count(seen) > 0;
  const int64_t size = static_cast<int64_t>(t.context.size());
  if (known && seen < size) {
    t.context.resize(static_cast<size_t>(seen));
    ++stats.rolled_back;
  } else if (!known && t.in_flight == Tracked::InFlight::kAppend &&
             seen == size + static_cast<int64_t>(t.in_flight_tokens.size())) {
    t.context.insert(t.context.end(), t.in_flight_tokens.begin(), t.in_flight_tokens.end());
    known = true;
    ++stats.completed_in_flight;
  } else if (!known && t.in_flight == Tracked::InFlight::kGenerate && !t.Opaque()) {
    // The daemon finished the generation (a snapshot is only taken between generations) but
    // its end did not reach the client: what the twin generates is what it was.
    if (t.twin.Sync(reference, t.context)) {
      const Generation full = t.twin.Generate(t.in_flight_max);
      EXPECT_TRUE(
          t.in_flight_tokens.size() <= full.ids.size() &&
          std::equal(t.in_flight_tokens.begin(), t.in_flight_tokens.end(), full.ids.begin()))
          << "the tokens streamed before the kill differ from the reference's";
      const bool eog = full.done.reason() == v1::FINISH_REASON_END_OF_GENERATION;
      if (seen == size + static_cast<int64_t>(full.ids.size()) + (eog ? 1 : 0)) {
        t.context.insert(t.context.end(), full.ids.begin(), full.ids.end());
        if (eog) {
          t.context.push_back(-1);
          t.ended = true;
        }
        known = true;
        ++stats.completed_in_flight;
      }
    }
  }
  std::string acked_text;
  for (int64_t a : acked) acked_text += " " + std::to_string(a);
  EXPECT_TRUE(known) << "the snapshot holds " << seen << " tokens: no acknowledged state ("
                     << acked_text << " ) nor the request in flight";
  EXPECT_GE(seen, t.durable) << "acknowledged context was lost: " << t.durable
                             << " tokens were acknowledged and then quiet for longer than the "
                                "snapshot interval + "
                             << kWriteMargin.count() << " ms, the snapshot holds " << seen;
  Resumed r = ResumeSession(d, t.id);
  if (!r.opened) {
    ADD_FAILURE() << "a session with a snapshot did not resume: " << r.error.ShortDebugString();
    return false;
  }
  EXPECT_EQ(r.opened->cache().tokens_seen(), seen) << "Resume did not bring back the snapshot";
  t.stream = std::move(r.stream);
  if (!known) return false;
  t.acks.clear();
  t.in_flight = Tracked::InFlight::kNone;
  t.durable = seen;  // on disk until a later snapshot replaces it
  ++t.lives;
  if (seen > 0 && !t.Opaque()) {
    const Generation g = GenerateOn(*t.stream, kContinuation);
    if (t.twin.Sync(reference, t.context)) {
      const Generation want = t.twin.Generate(kContinuation);
      EXPECT_EQ(g.ids, want.ids) << "the restored session does not continue as its twin on a "
                                    "daemon that was never killed";
      EXPECT_EQ(g.done.reason(), want.done.reason());
    }
    ++stats.continuations;
    t.context.insert(t.context.end(), g.ids.begin(), g.ids.end());
    if (g.done.reason() == v1::FINISH_REASON_END_OF_GENERATION) {
      t.context.push_back(-1);
      t.ended = true;
    }
  }
  t.Acked();
  return true;
}

// Waits until `dir` holds the session's acknowledged context (its last Ack); the snapshot is due
// within the snapshot interval of that acknowledgement.
void ExpectWrittenWhenQuiet(const std::string& dir, Tracked& t) {
  const int64_t want = t.acks.back().seen;
  std::optional<SnapshotSummary> stored;
  const auto deadline = Clock::now() + kInterval + kWriteMargin;
  while (Clock::now() < deadline) {
    stored = StoredSummary(dir, t.id);
    if (stored && SeenOf(*stored) == want) break;
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(stored) << t.id << ": no snapshot " << kWriteMargin.count()
                      << " ms after its acknowledgement";
  EXPECT_EQ(SeenOf(*stored), want) << t.id << ": the snapshot lags the acknowledged context "
                                   << kWriteMargin.count() << " ms after it";
  t.durable = std::max(t.durable, SeenOf(*stored));
}

TEST_F(DurabilityE2eTest, KillNineAtRandomMomentsLosesNothingAcknowledged) {
  constexpr int kKills = 20;
  constexpr size_t kSessions = 3;
  const uint64_t seed = std::random_device{}();
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
  RecordProperty("seed", std::to_string(seed));
  std::mt19937_64 rng(seed);
  TempDir tmp;
  const std::string root = tmp.Sub("sessions"), dir = ModelDir(root);
  std::vector<std::unique_ptr<Tracked>> sessions;
  KillStats stats;
  std::string last_log;  // of the daemon killed last: shown when its sessions fail the checks
  for (int life = 0; life <= kKills; ++life) {
    SCOPED_TRACE("life " + std::to_string(life) + " (seed " + std::to_string(seed) + ")");
    const int failures_before =
        ::testing::UnitTest::GetInstance()->failed_test_count() + (HasFailure() ? 1 : 0);
    std::vector<std::optional<SnapshotSummary>> stored;
    for (const auto& t : sessions) stored.push_back(StoredSummary(dir, t->id));
    auto d = DaemonProcess::Start(Flags(root));
    ASSERT_NE(d, nullptr);
    {  // What the last life left, all sessions at once.
      std::vector<char> keep(sessions.size(), 0);
      std::vector<std::thread> checks;
      for (size_t i = 0; i < sessions.size(); ++i) {
        checks.emplace_back(
            [&, i] { keep[i] = VerifyRestored(*d, *reference_, *sessions[i], stored[i], stats); });
      }
      for (auto& c : checks) c.join();
      std::vector<std::unique_ptr<Tracked>> kept;
      for (size_t i = 0; i < sessions.size(); ++i) {
        Tracked& t = *sessions[i];
        const bool retire = t.ended || t.lives >= 3 || t.context.size() > 70;
        if (keep[i] && !retire) {
          kept.push_back(std::move(sessions[i]));
          continue;
        }
        if (t.stream != nullptr) {  // closed: its snapshot goes too
          t.stream->Write(CloseMsg());
          EXPECT_TRUE(t.stream->Finish().ok());
        }
        t.twin.Close();
      }
      sessions = std::move(kept);
    }
    EXPECT_EQ(
        MetricValue(d->ScrapeMetrics(), "streamd_snapshots_rejected_total{reason=\"DATA_LOSS\"}"),
        0)
        << "a kill left a snapshot the daemon could not read";
    if (life == kKills) {
      for (auto& t : sessions) {
        t->stream->WritesDone();
        EXPECT_TRUE(t->stream->Finish().ok());
        t->twin.Close();
      }
      d->Terminate();
      EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
      break;
    }
    // Quiet: every session's acknowledged state must reach the disk.
    for (auto& t : sessions) ExpectWrittenWhenQuiet(dir, *t);
    // New sessions are opened by their drivers, under the kill.
    while (sessions.size() < kSessions) sessions.push_back(std::make_unique<Tracked>());
    const int failures_now =
        ::testing::UnitTest::GetInstance()->failed_test_count() + (HasFailure() ? 1 : 0);
    if (failures_now > failures_before && !last_log.empty()) {
      std::printf("log of the daemon killed before life %d:\n%s\n", life, last_log.c_str());
    }
    const auto delay = std::chrono::milliseconds(30 + rng() % 1470);
    std::vector<std::thread> drivers;
    for (auto& t : sessions) {
      drivers.emplace_back([&d, &t, s = rng()] { Drive(*d, *t, s, words_); });
    }
    std::this_thread::sleep_for(delay);
    const Clock::time_point killed_at = Clock::now();
    d->Kill();
    last_log = d->Stderr();
    for (auto& th : drivers) th.join();
    for (auto& t : sessions) {
      if (t->stream != nullptr) t->stream->Finish();  // the daemon is gone: ends at once
      t->stream.reset();
    }
    std::erase_if(sessions, [](const auto& t) { return t->id.empty(); });  // never opened
    std::string line;
    bool generating = false;
    for (auto& t : sessions) {
      for (const Tracked::Ack& a : t->acks) {
        // A driver asleep through the kill stamps its next request after it: the daemon had
        // only until the kill to write.
        const Clock::time_point quiet_until = std::min(a.next.value_or(killed_at), killed_at);
        if (quiet_until - a.at >= kInterval + kWriteMargin && a.seen > t->durable) {
          t->durable = a.seen;
          ++stats.quiet_kept;
        }
      }
      generating |= t->in_flight == Tracked::InFlight::kGenerate;
      line += " " + t->id.substr(0, 8) + ":" + std::to_string(t->context.size()) + "/" +
              std::to_string(t->durable) +
              (t->in_flight == Tracked::InFlight::kGenerate ? "+gen"
               : t->in_flight == Tracked::InFlight::kAppend ? "+append"
                                                            : "");
    }
    stats.killed_generating += generating;
    std::printf("[ kill %2d  ] after %4lld ms; acknowledged/durable:%s\n", life + 1,
                static_cast<long long>(delay.count()), line.c_str());
  }
  std::printf(
      "[ kills    ] %d with a generation running; %d continuations compared, %d rolled "
      "back, %d with the request in flight done, %d never written, %d quiet "
      "acknowledgements kept\n",
      stats.killed_generating, stats.continuations.load(), stats.rolled_back.load(),
      stats.completed_in_flight.load(), stats.never_written.load(), stats.quiet_kept.load());
  // The checks must have had something to check.
  EXPECT_GE(stats.continuations.load(), kKills);
  EXPECT_FALSE(fs::exists(dir + "/rejected")) << "a kill left a snapshot that was refused";
  // A kill mid-write leaves a temp file (never read as a snapshot); at most one per kill.
  EXPECT_LE(TempFilesIn(dir).size(), static_cast<size_t>(kKills)) << Joined(TempFilesIn(dir));
}

// ---- SIGTERM ---------------------------------------------------------------------------------

}  // namespace
}  // namespace streamd::e2e
