// End-to-end: durable sessions (docs/SESSIONS.md) with real `streamd serve` processes on
// loopback. What a client was told survives, and comes back token for token:
//   - kill -9 at random moments, 20+ times on one snapshot directory: every session comes back
//     as its last completed snapshot, which is a state the client was acknowledged (or the
//     request in flight), holds everything acknowledged before a quiet snapshot interval, and
//     continues exactly as a session of a daemon that was never killed;
//   - SIGTERM: everything acknowledged is written, exactly;
//   - offload of idle sessions (blocks freed) and reload on Resume;
//   - ExportSession / ImportSession between two daemons, and the imports they must refuse;
//   - damaged, foreign and hostile files in the directory at start: refused, counted, moved
//     into rejected/, never deleted, and every good session still resumes;
//   - a full disk and a read-only directory: the daemon serves from memory and counts, logs and
//     cleans up its failed writes.
// The reference for "continues exactly" is a daemon without a snapshot directory that gets the
// same context as raw token ids (Append.tokens: no BOS, no chat framing), or a twin session fed
// the same input. Every daemon runs one token per step (see Flags). Small caches, short contexts
// and greedy decoding keep each daemon's work short: the file runs in about 100 s on a 2-core
// machine, 70 of them the 20 kills.
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
#include "engine/snapshot/snapshot_testing.h"
#include "tests/e2e/daemon_process.h"
#include "tests/e2e/durability_util.h"
#include "tests/e2e/e2e_util.h"

namespace streamd::e2e {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// ---- Settings -------------------------------------------------------------------------------

// Sessions keep 4 sinks (the default) and a window of 64: snapshots of up to ~1.5 MB.
constexpr int32_t kWindow = 64;
constexpr std::chrono::milliseconds kInterval{50};  // sessions.snapshot_interval
// How long a due write may take on this shared 2-core machine (capture, encode, write and fsync
// of ~1.5 MB, behind the other sessions' writes). It only bounds what the durability checks
// demand after a quiet period; nothing here measures speed.
constexpr std::chrono::milliseconds kWriteMargin{2000};
constexpr int32_t kContinuation = 8;  // greedy tokens compared with the reference

// The flags of every daemon here; `dir` is its snapshot directory ("" = memory only).
//
// One token per step (max_batch_tokens = 1). The CPU kernels' f32 sums are not bit-identical
// across batch shapes (a token multiplied in a batch of 3 differs in its last bits from the same
// token alone; kernels/cpu/matmul_test.cc pins only 1 token and multiples of 16), so two daemons
// that batched the same context differently can flip a greedy token at a near tie: about one
// continuation in 15 when three sessions share the steps. With one token per step every token's
// K/V and logits depend on the context alone, so "token-identical to a daemon that never
// restarted" is exact, whatever ran beside the session and however its input was chunked.
// A 24 MiB pool (68 blocks of 16 tokens; a session here is bound to 6) starts in a fraction of
// the time of a larger one, and there are 20 restarts.
std::vector<std::string> Flags(const std::string& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> f = {"--engine.kv_pool=24MiB",
                                "--engine.max_batch_tokens=1",
                                "--engine.max_batch_sessions=1",
                                "--engine.max_chunk=1",
                                "--sessions.default_window=" + std::to_string(kWindow),
                                "--sessions.snapshot_interval=50ms",
                                "--sessions.snapshot_dir=" + dir};
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

// ---- The suite: one reference daemon, never killed, without snapshots ----------------------

class DurabilityE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    reference_ = DaemonProcess::Start(Flags("")).release();
    // Ordinary text as token ids: the words sessions are made of.
    const RunResult r = RunStreamd(
        {"tokenize", "--model", ModelPath(), "--no-bos", "--text",
         "It was a bright cold day in April, and the clocks were striking thirteen. The "
         "harbour lay quiet under a pale sky while the fishing boats came home one by one, "
         "their engines coughing, gulls wheeling over the nets. In the village above, the "
         "baker had already sold the last loaf, and the schoolmaster was writing sums on the "
         "board for children who watched the window instead. Nobody expected the letter that "
         "the postman carried up the hill that afternoon."});
    std::string text = r.out;
    for (char& c : text) {
      if (c == '[' || c == ']' || c == ',') c = ' ';
    }
    std::istringstream in(text);
    for (int32_t id; in >> id;) words_.push_back(id);
  }
  static void TearDownTestSuite() {
    if (reference_ != nullptr) {
      reference_->Terminate();
      EXPECT_EQ(reference_->Wait(60s), 0) << reference_->Stderr();
    }
    delete reference_;
    reference_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(reference_, nullptr) << "the reference daemon did not start";
    ASSERT_GT(words_.size(), 60u) << "streamd tokenize gave no ids";
  }

  // `n` consecutive words starting at `from` (wrapping around).
  static std::vector<int32_t> Words(size_t from, size_t n) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < n; ++i) out.push_back(words_[(from + i) % words_.size()]);
    return out;
  }

  // A session on `d` with `context` appended as tokens and one greedy generation of `gen`
  // tokens; returns the stream (still attached) and fills the session's full context.
  static std::unique_ptr<RawStream> MakeSession(const DaemonProcess& d,
                                                const std::vector<int32_t>& context, int32_t gen,
                                                std::string* id, std::vector<int32_t>* full) {
    auto s = std::make_unique<RawStream>(d.Channel());
    auto opened = s->Open();
    if (!opened) return nullptr;
    *id = opened->session_id();
    if (auto e = s->Append(TokensMsg(context).append())) {
      ADD_FAILURE() << "append: " << e->ShortDebugString();
      return nullptr;
    }
    *full = context;
    if (gen > 0) {
      const Generation g = GenerateOn(*s, gen);
      EXPECT_EQ(g.done.reason(), v1::FINISH_REASON_LENGTH)
          << "pick a context whose greedy continuation does not end the text";
      full->insert(full->end(), g.ids.begin(), g.ids.end());
    }
    return s;
  }

  // Resumes `id` on `d`, expects `seen` tokens and a greedy continuation equal to the
  // reference's for `context`.
  static void ExpectResumesAndContinues(const DaemonProcess& d, const std::string& id,
                                        const std::vector<int32_t>& context) {
    SCOPED_TRACE("session " + id);
    Resumed r = ResumeSession(d, id);
    ASSERT_TRUE(r.opened) << "resume refused: " << r.error.ShortDebugString();
    EXPECT_TRUE(r.opened->resumed());
    EXPECT_EQ(r.opened->cache().tokens_seen(), static_cast<int64_t>(context.size()));
    const Generation g = GenerateOn(*r.stream, kContinuation);
    const Generation want = ReferenceContinuation(*reference_, context, kContinuation);
    EXPECT_EQ(g.ids, want.ids) << "the restored session does not continue as the reference";
    r.stream->Write(CloseMsg());
    EXPECT_TRUE(r.stream->Finish().ok());
  }

  inline static DaemonProcess* reference_ = nullptr;
  inline static std::vector<int32_t> words_;
};

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
  const std::string dir = tmp.Sub("sessions");
  std::vector<std::unique_ptr<Tracked>> sessions;
  KillStats stats;
  std::string last_log;  // of the daemon killed last: shown when its sessions fail the checks
  for (int life = 0; life <= kKills; ++life) {
    SCOPED_TRACE("life " + std::to_string(life) + " (seed " + std::to_string(seed) + ")");
    const int failures_before =
        ::testing::UnitTest::GetInstance()->failed_test_count() + (HasFailure() ? 1 : 0);
    std::vector<std::optional<SnapshotSummary>> stored;
    for (const auto& t : sessions) stored.push_back(StoredSummary(dir, t->id));
    auto d = DaemonProcess::Start(Flags(dir));
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

// With a snapshot interval of an hour only the detach and the drain can write: everything
// acknowledged before SIGTERM (a detached session, attached idle ones, one with input not yet
// prefilled, an empty one, one generating when the signal came) is on disk, exactly.
TEST_F(DurabilityE2eTest, SigtermWritesEverythingAcknowledged) {
  TempDir tmp;
  const std::string dir = tmp.Sub("sessions");
  struct Known {
    std::string id;
    std::vector<int32_t> context;
  };
  std::vector<Known> known(5);
  {
    auto d = DaemonProcess::Start(
        Flags(dir, {"--sessions.snapshot_interval=1h", "--server.shutdown_grace=300s"}));
    ASSERT_NE(d, nullptr);
    auto detached = MakeSession(*d, Words(0, 12), 6, &known[0].id, &known[0].context);
    auto idle = MakeSession(*d, Words(20, 9), 5, &known[1].id, &known[1].context);
    auto unprefilled = MakeSession(*d, Words(40, 7), 4, &known[2].id, &known[2].context);
    auto generating = MakeSession(*d, Words(60, 10), 0, &known[3].id, &known[3].context);
    auto empty = std::make_unique<RawStream>(d->Channel());
    ASSERT_TRUE(detached && idle && unprefilled && generating);
    auto opened = empty->Open();
    ASSERT_TRUE(opened);
    known[4].id = opened->session_id();
    DetachStream(*detached);
    // Each session's first write is due at once, the next one in an hour (or at the drain).
    for (const Known& k : known) {
      ASSERT_TRUE(WaitFor([&] { return fs::exists(dir + "/" + k.id + ".snap"); }))
          << k.id << " was never written";
    }
    // Until no write has happened for 300 ms: a touch during a first write queues a second.
    double writes = -1;
    ASSERT_TRUE(WaitFor([&] {
      const double now = MetricValue(d->ScrapeMetrics(), "streamd_snapshot_writes_total");
      if (now == writes) return true;
      writes = now;
      std::this_thread::sleep_for(300ms);
      return false;
    })) << "the daemon keeps writing snapshots";
    const std::vector<int32_t> more = Words(33, 4);
    ASSERT_FALSE(idle->Append(TokensMsg(more).append()));
    known[1].context.insert(known[1].context.end(), more.begin(), more.end());
    // Acknowledged, then SIGTERM before it is prefilled (one token per step: 30 steps).
    const std::vector<int32_t> long_input = Words(80, 30);
    ASSERT_FALSE(unprefilled->Append(TokensMsg(long_input).append()));
    known[2].context.insert(known[2].context.end(), long_input.begin(), long_input.end());
    // The attached sessions' changes are not written yet: the drain must do it.
    for (size_t i = 1; i < 3; ++i) {
      const auto stored = StoredSummary(dir, known[i].id);
      EXPECT_TRUE(!stored || SeenOf(*stored) < static_cast<int64_t>(known[i].context.size()))
          << "session " << i << " was written before the drain: the test proves nothing";
    }
    ASSERT_TRUE(generating->Write(GenerateMsg(24)));
    const Generation g = ReadGeneration(*generating, [&] { d->Terminate(); });
    ASSERT_TRUE(g.ended);
    EXPECT_EQ(g.done.reason(), v1::FINISH_REASON_LENGTH) << "finished within the grace period";
    known[3].context.insert(known[3].context.end(), g.ids.begin(), g.ids.end());
    for (RawStream* s : {idle.get(), unprefilled.get(), generating.get(), empty.get()}) {
      EXPECT_EQ(s->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
    }
    ASSERT_EQ(d->Wait(120s), 0) << d->Stderr();
  }
  for (const Known& k : known) {
    const auto stored = StoredSummary(dir, k.id);
    ASSERT_TRUE(stored) << k.id << " has no snapshot after SIGTERM";
    EXPECT_EQ(SeenOf(*stored), static_cast<int64_t>(k.context.size())) << k.id;
  }
  auto d = DaemonProcess::Start(Flags(dir));
  ASSERT_NE(d, nullptr);
  const auto listed = ListSessions(*d);
  EXPECT_EQ(listed.size(), known.size());
  for (size_t i = 0; i < 4; ++i) ExpectResumesAndContinues(*d, known[i].id, known[i].context);
  Resumed r = ResumeSession(*d, known[4].id);
  ASSERT_TRUE(r.opened) << r.error.ShortDebugString();
  EXPECT_EQ(r.opened->cache().tokens_seen(), 0);
  r.stream->Write(CloseMsg());
  EXPECT_TRUE(r.stream->Finish().ok());
  d->Terminate();
  EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
}

// ---- Offload and reload ----------------------------------------------------------------------

TEST_F(DurabilityE2eTest, IdleSessionsAreOffloadedAndComeBackOnResume) {
  TempDir tmp;
  const std::string dir = tmp.Sub("sessions");
  auto d = DaemonProcess::Start(Flags(dir, {"--sessions.offload_after=200ms"}));
  ASSERT_NE(d, nullptr);
  std::string id, twin_id;
  std::vector<int32_t> context, twin_context;
  auto s = MakeSession(*d, Words(3, 40), 8, &id, &context);
  auto twin = MakeSession(*d, Words(3, 40), 8, &twin_id, &twin_context);  // stays attached
  ASSERT_TRUE(s && twin);
  ASSERT_EQ(context, twin_context) << "the same input gave different tokens";
  v1::SessionInfo before;
  ASSERT_TRUE(GetSession(*d, id, &before).ok());
  ASSERT_GT(before.cache().blocks_held(), 0);
  const double used_before = MetricValue(d->ScrapeMetrics(), "streamd_kv_used_blocks");
  DetachStream(*s);

  ASSERT_TRUE(WaitFor([&] { return ListSessions(*d)[id].offloaded(); }))
      << "the detached session was not offloaded after 200 ms (+ " << kWaitLimit.count() << " s)";
  const auto listed = ListSessions(*d);
  EXPECT_FALSE(listed.at(twin_id).offloaded()) << "an attached session was offloaded";
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(*d, id, &info).ok());
  EXPECT_TRUE(info.offloaded());
  EXPECT_FALSE(info.attached());
  EXPECT_EQ(info.cache().blocks_held(), 0);
  EXPECT_EQ(info.cache().tokens_seen(), static_cast<int64_t>(context.size()));
  const std::string metrics = d->ScrapeMetrics();
  EXPECT_EQ(MetricValue(metrics, "streamd_kv_used_blocks"),
            used_before - before.cache().blocks_held())
      << "the offloaded session's blocks were not freed";
  EXPECT_GE(MetricValue(metrics, "streamd_session_offloads_total"), 1);
  EXPECT_EQ(MetricValue(metrics, "streamd_sessions_offloaded"), 1);
  const auto stored = StoredSummary(dir, id);
  ASSERT_TRUE(stored);
  EXPECT_EQ(SeenOf(*stored), static_cast<int64_t>(context.size()));

  Resumed r = ResumeSession(*d, id);
  ASSERT_TRUE(r.opened) << r.error.ShortDebugString();
  EXPECT_EQ(r.opened->cache().tokens_seen(), static_cast<int64_t>(context.size()));
  ASSERT_TRUE(GetSession(*d, id, &info).ok());
  EXPECT_FALSE(info.offloaded());
  EXPECT_GT(info.cache().blocks_held(), 0);
  // One after the other, so that neither shares a step with the other.
  const Generation back = GenerateOn(*r.stream, kContinuation);
  const Generation never = GenerateOn(*twin, kContinuation);
  EXPECT_EQ(back.ids, never.ids) << "the reloaded session does not continue as its twin";
  EXPECT_EQ(back.ids.size(), static_cast<size_t>(kContinuation));
  for (RawStream* x : {r.stream.get(), twin.get()}) {
    x->Write(CloseMsg());
    EXPECT_TRUE(x->Finish().ok());
  }
  d->Terminate();
  EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
}

// ---- Export and import -----------------------------------------------------------------------

TEST_F(DurabilityE2eTest, ExportImportMovesASessionAndRefusesBadSnapshots) {
  TempDir tmp;
  const std::string dir_a = tmp.Sub("a"), dir_b = tmp.Sub("b");
  auto a = DaemonProcess::Start(Flags(dir_a));
  // B takes snapshots of at most 1 MiB: ~45 cached tokens of SmolLM2-135M (23,040 bytes each).
  auto b = DaemonProcess::Start(Flags(dir_b, {"--sessions.max_snapshot_bytes=1MiB"}));
  ASSERT_TRUE(a && b);
  std::string id, other_id, big_id;
  std::vector<int32_t> context, other_context, big_context;
  auto s = MakeSession(*a, Words(7, 14), 6, &id, &context);
  auto other = MakeSession(*a, Words(30, 10), 0, &other_id, &other_context);
  auto big = MakeSession(*a, Words(50, 70), 0, &big_id, &big_context);
  ASSERT_TRUE(s && other && big);
  WaitPrefilled(*a, other_id);
  WaitPrefilled(*a, big_id);

  std::vector<uint8_t> bytes, other_bytes, big_bytes;
  ASSERT_TRUE(Export(*a, id, &bytes).ok());
  ASSERT_TRUE(Export(*a, other_id, &other_bytes).ok());
  ASSERT_TRUE(Export(*a, big_id, &big_bytes).ok());
  auto summary = ReadSnapshotSummary(bytes);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->id.ToString(), id);
  EXPECT_EQ(SeenOf(*summary), static_cast<int64_t>(context.size()));
  ASSERT_LT(bytes.size(), size_t{1} << 20);
  ASSERT_GT(big_bytes.size(), size_t{1} << 20);

  // In 64 KiB chunks, so that the daemon puts several together.
  ImportResult imported = Import(*b, bytes, 64 << 10);
  ASSERT_TRUE(imported.status.ok()) << imported.status.error_message();
  EXPECT_TRUE(imported.response.resident());
  EXPECT_EQ(imported.response.session().session_id(), id);
  EXPECT_EQ(imported.response.session().cache().tokens_seen(),
            static_cast<int64_t>(context.size()));
  EXPECT_TRUE(fs::exists(dir_b + "/" + id + ".snap")) << "the import is not on B's disk";
  const ImportResult again = Import(*b, bytes);
  EXPECT_EQ(again.status.error_code(), grpc::StatusCode::ALREADY_EXISTS)
      << again.status.error_message();

  // B continues it as A does (export copies; A keeps the session).
  Resumed r = ResumeSession(*b, id);
  ASSERT_TRUE(r.opened) << r.error.ShortDebugString();
  EXPECT_EQ(r.opened->cache().tokens_seen(), static_cast<int64_t>(context.size()));
  const Generation on_b = GenerateOn(*r.stream, kContinuation);
  const Generation on_a = GenerateOn(*s, kContinuation);
  EXPECT_EQ(on_b.ids, on_a.ids) << "the imported session does not continue as the exported one";
  EXPECT_EQ(on_b.ids.size(), static_cast<size_t>(kContinuation));

  // Damaged bytes are refused and create nothing.
  const auto files_before = FilesIn(dir_b);
  const auto sessions_before = ListSessions(*b);
  std::vector<uint8_t> truncated(other_bytes.begin(), other_bytes.begin() + other_bytes.size() / 2);
  std::vector<uint8_t> flipped = other_bytes;
  const auto sections = snapshot_testing::Sections(flipped);
  const auto kv = std::find_if(sections.begin(), sections.end(),
                               [](const auto& sec) { return sec.tag == snapshot_layout::kTagKv; });
  ASSERT_NE(kv, sections.end());
  flipped[kv->payload + kv->length / 2] ^= 0x10;
  for (const auto* bad : {&truncated, &flipped}) {
    const ImportResult refused = Import(*b, *bad);
    EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::DATA_LOSS)
        << refused.status.error_message();
  }
  // Over limits.max_snapshot_bytes: refused before the rest is read. 64 MiB follow the
  // snapshot; the call ends long before they are sent.
  std::vector<uint8_t> huge = big_bytes;
  huge.resize(huge.size() + (size_t{64} << 20), 0x5a);
  const ImportResult over = Import(*b, huge);
  EXPECT_EQ(over.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << over.status.error_message();
  EXPECT_NE(over.status.error_message().find("max_snapshot_bytes"), std::string::npos)
      << over.status.error_message();
  EXPECT_LT(over.bytes_written, huge.size() / 2) << "the daemon read the whole oversized import";
  EXPECT_EQ(FilesIn(dir_b), files_before) << "a refused import left a file";
  EXPECT_EQ(ListSessions(*b).size(), sessions_before.size()) << "a refused import made a session";
  v1::SessionInfo info;
  EXPECT_EQ(GetSession(*b, other_id, &info).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GetSession(*b, big_id, &info).error_code(), grpc::StatusCode::NOT_FOUND);

  // Export: unknown and malformed ids, and a session that is generating.
  std::vector<uint8_t> ignored;
  EXPECT_EQ(Export(*a, "0123456789abcdef0123456789abcdef", &ignored).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Export(*a, "xyz", &ignored).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(s->Write(GenerateMsg(400)));
  grpc::Status during;
  const Generation long_one = ReadGeneration(*s, [&] {
    during = Export(*a, id, &ignored);
    s->Write(CancelMsg());
  });
  EXPECT_EQ(during.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << during.error_message();
  EXPECT_EQ(long_one.done.reason(), v1::FINISH_REASON_CANCELLED);

  for (RawStream* x : {s.get(), other.get(), big.get(), r.stream.get()}) {
    x->Write(CloseMsg());
    EXPECT_TRUE(x->Finish().ok());
  }
  for (DaemonProcess* d : {a.get(), b.get()}) {
    d->Terminate();
    EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
  }
}

// ---- Damaged, foreign and hostile files at start ---------------------------------------------

// The file `name` in `dir` has been moved into rejected/ unchanged, and the log says why.
void ExpectRejected(const std::string& dir, const std::string& name,
                    const std::vector<uint8_t>& bytes, const std::string& code,
                    const std::string& log) {
  SCOPED_TRACE(name);
  EXPECT_FALSE(fs::exists(dir + "/" + name)) << "still in the snapshot directory";
  std::vector<std::string> moved;
  for (const std::string& f : FilesIn(dir + "/rejected")) {
    if (f.rfind(name + ".", 0) == 0) moved.push_back(f);
  }
  ASSERT_EQ(moved.size(), 1u) << "rejected/ holds " << Joined(FilesIn(dir + "/rejected"));
  EXPECT_EQ(ReadBytes(dir + "/rejected/" + moved[0]), bytes) << "the refused file was changed";
  EXPECT_NE(log.find("snapshot " + name + " refused (" + code + ")"), std::string::npos)
      << "no log line names the file and the reason";
}

double RejectedTotal(const std::string& metrics) {
  double n = 0;
  for (const char* reason : {"DATA_LOSS", "FAILED_PRECONDITION", "INVALID_ARGUMENT"}) {
    n += std::max(0.0,
                  MetricValue(metrics, std::string("streamd_snapshots_rejected_total{reason=\"") +
                                           reason + "\"}"));
  }
  return n;
}

TEST_F(DurabilityE2eTest, DamagedSnapshotsAreRefusedAndTheRestResume) {
  TempDir tmp;
  const std::string dir = tmp.Sub("sessions");
  constexpr int kGood = 2, kSessions = 6;
  std::vector<std::string> ids(kSessions);
  std::vector<std::vector<int32_t>> contexts(kSessions);
  {
    auto d = DaemonProcess::Start(Flags(dir));
    ASSERT_NE(d, nullptr);
    for (int i = 0; i < kSessions; ++i) {
      auto s = MakeSession(*d, Words(11 * i, 8 + i), i % 2 == 0 ? 4 : 0, &ids[i], &contexts[i]);
      ASSERT_TRUE(s);
      DetachStream(*s);
    }
    d->Terminate();
    ASSERT_EQ(d->Wait(60s), 0) << d->Stderr();
  }
  auto path = [&](int i) { return dir + "/" + ids[i] + ".snap"; };
  std::vector<std::vector<uint8_t>> bytes(kSessions);
  for (int i = 0; i < kSessions; ++i) {
    bytes[i] = ReadBytes(path(i));
    ASSERT_FALSE(bytes[i].empty()) << "no snapshot of session " << i;
  }
  namespace L = snapshot_layout;
  // 0: cut inside the K/V (its header and META still read: refused when it is loaded).
  bytes[0].resize(bytes[0].size() * 2 / 3);
  // 1: one flipped bit in the K/V.
  const auto sections = snapshot_testing::Sections(bytes[1]);
  const auto kv = std::find_if(sections.begin(), sections.end(),
                               [](const auto& sec) { return sec.tag == L::kTagKv; });
  ASSERT_NE(kv, sections.end());
  bytes[1][kv->payload + kv->length / 3] ^= 0x04;
  // 2: format version 2, behind a valid header checksum.
  const uint32_t version = 2;
  std::memcpy(bytes[2].data() + L::kHeaderVersionOffset, &version, sizeof(version));
  snapshot_testing::RewriteChecksums(bytes[2]);
  // 3: another model: one character of META's model fingerprint, META's checksum recomputed.
  const auto meta = snapshot_testing::Sections(bytes[3]).front();
  ASSERT_EQ(meta.tag, L::kTagMeta);
  uint32_t version_len = 0;
  std::memcpy(&version_len, bytes[3].data() + meta.payload + L::meta::kFixedSize, 4);
  const size_t fingerprint = meta.payload + L::meta::kFixedSize + 4 + version_len + 4;
  bytes[3][fingerprint] = bytes[3][fingerprint] == '0' ? '1' : '0';
  snapshot_testing::RewriteChecksums(bytes[3]);
  for (int i = 0; i < kSessions - kGood; ++i) WriteBytes(path(i), bytes[i]);
  // And a text file named like a snapshot.
  const std::string stray = "0123456789abcdef0123456789abcdef.snap";
  const std::string stray_text = "this is not a session snapshot\n";
  const std::vector<uint8_t> stray_bytes(stray_text.begin(), stray_text.end());
  WriteBytes(dir + "/" + stray, stray_bytes);

  auto d = DaemonProcess::Start(Flags(dir));
  ASSERT_NE(d, nullptr);
  // Header-level damage is refused by the start-up scan, K/V damage when the background
  // restore reads the file.
  ASSERT_TRUE(WaitFor([&] { return RejectedTotal(d->ScrapeMetrics()) >= 5; }))
      << "not every damaged file was refused: " << d->Stderr();
  const std::string metrics = d->ScrapeMetrics();
  EXPECT_EQ(MetricValue(metrics, "streamd_snapshots_rejected_total{reason=\"DATA_LOSS\"}"), 3);
  EXPECT_EQ(
      MetricValue(metrics, "streamd_snapshots_rejected_total{reason=\"FAILED_PRECONDITION\"}"), 2);
  const std::string log = d->Stderr();
  ExpectRejected(dir, ids[0] + ".snap", bytes[0], "DATA_LOSS", log);
  ExpectRejected(dir, ids[1] + ".snap", bytes[1], "DATA_LOSS", log);
  ExpectRejected(dir, ids[2] + ".snap", bytes[2], "FAILED_PRECONDITION", log);
  ExpectRejected(dir, ids[3] + ".snap", bytes[3], "FAILED_PRECONDITION", log);
  ExpectRejected(dir, stray, stray_bytes, "DATA_LOSS", log);
  EXPECT_NE(log.find("is not supported"), std::string::npos) << "the version is not named";
  EXPECT_NE(log.find("another model"), std::string::npos) << "the model is not named";

  for (int i = kSessions - kGood; i < kSessions; ++i) {
    ExpectResumesAndContinues(*d, ids[i], contexts[i]);
  }
  // A Resume of a refused one says why (whether the scan or the load refused it).
  const char* reasons[] = {"truncated", "checksum mismatch", "is not supported", "another model"};
  for (int i = 0; i < kSessions - kGood; ++i) {
    SCOPED_TRACE("damaged session " + std::to_string(i));
    Resumed r = ResumeSession(*d, ids[i]);
    EXPECT_FALSE(r.opened);
    EXPECT_EQ(r.error.code(), grpc::StatusCode::DATA_LOSS) << r.error.ShortDebugString();
    EXPECT_EQ(r.error.field(), "resume.session_id");
    EXPECT_NE(r.error.message().find("could not be restored from its snapshot"), std::string::npos)
        << r.error.message();
    EXPECT_NE(r.error.message().find(reasons[i]), std::string::npos) << r.error.message();
  }
  // And it serves new sessions.
  std::string id;
  std::vector<int32_t> context;
  auto fresh = MakeSession(*d, Words(5, 6), 3, &id, &context);
  ASSERT_TRUE(fresh);
  fresh->Write(CloseMsg());
  EXPECT_TRUE(fresh->Finish().ok());
  d->Terminate();
  EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
}

TEST_F(DurabilityE2eTest, HostileFilesNeverCrashTheDaemon) {
  TempDir tmp;
  const std::string dir = tmp.Sub("sessions");
  std::mt19937_64 rng(std::random_device{}());
  auto hex_name = [&] {
    std::string n;
    for (int i = 0; i < 32; ++i) n += "0123456789abcdef"[rng() % 16];
    return n + ".snap";
  };
  std::map<std::string, std::vector<uint8_t>> hostile;
  std::vector<uint8_t> random(4096 + rng() % 4096);
  for (uint8_t& b : random) b = static_cast<uint8_t>(rng());
  hostile[hex_name()] = random;
  hostile[hex_name()] = {};  // empty
  hostile[hex_name()] = {0x53};
  std::vector<uint8_t> magic(snapshot_layout::kMagic, snapshot_layout::kMagic + 8);
  magic.resize(2048);
  for (size_t i = 8; i < magic.size(); ++i) magic[i] = static_cast<uint8_t>(rng());
  hostile[hex_name()] = magic;  // the magic, then noise
  for (const auto& [name, b] : hostile) WriteBytes(dir + "/" + name, b);
  // Not snapshots by name: left alone.
  WriteBytes(dir + "/notes.txt", {'h', 'i'});
  fs::create_directories(dir + "/" + hex_name());

  auto d = DaemonProcess::Start(Flags(dir));
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(WaitFor([&] { return RejectedTotal(d->ScrapeMetrics()) >= hostile.size(); }))
      << d->Stderr();
  EXPECT_EQ(
      MetricValue(d->ScrapeMetrics(), "streamd_snapshots_rejected_total{reason=\"DATA_LOSS\"}"),
      static_cast<double>(hostile.size()));
  const std::string log = d->Stderr();
  for (const auto& [name, b] : hostile) ExpectRejected(dir, name, b, "DATA_LOSS", log);
  EXPECT_TRUE(fs::exists(dir + "/notes.txt"));
  EXPECT_TRUE(ListSessions(*d).empty());
  std::string id;
  std::vector<int32_t> context;
  auto s = MakeSession(*d, Words(0, 5), 3, &id, &context);
  ASSERT_TRUE(s);
  s->Write(CloseMsg());
  EXPECT_TRUE(s->Finish().ok());
  d->Terminate();
  EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
}

// ---- A full disk and a read-only directory ---------------------------------------------------

double WriteErrors(const DaemonProcess& d, const std::string& reason) {
  return MetricValue(d.ScrapeMetrics(),
                     "streamd_snapshot_write_errors_total{reason=\"" + reason + "\"}");
}

// Resumes `id`, checks it is still resident (its offload failed) and continues as the reference.
void ExpectStillServed(const DaemonProcess& d, const DaemonProcess& reference,
                       const std::string& id, const std::vector<int32_t>& context) {
  SCOPED_TRACE("session " + id);
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(d, id, &info).ok());
  EXPECT_FALSE(info.offloaded()) << "offloaded although its snapshot could not be written";
  EXPECT_GT(info.cache().blocks_held(), 0);
  Resumed r = ResumeSession(d, id);
  ASSERT_TRUE(r.opened) << r.error.ShortDebugString();
  EXPECT_EQ(r.opened->cache().tokens_seen(), static_cast<int64_t>(context.size()));
  const Generation g = GenerateOn(*r.stream, kContinuation);
  EXPECT_EQ(g.ids, ReferenceContinuation(reference, context, kContinuation).ids);
  r.stream->Write(CloseMsg());
  EXPECT_TRUE(r.stream->Finish().ok());
}

TEST_F(DurabilityE2eTest, AFullDiskCostsSnapshotsNotSessions) {
  TempDir tmp;
  const std::string dir = tmp.Sub("full");
  // A 256 KiB file system: a snapshot of more than ~11 cached tokens does not fit.
  std::vector<std::string> wrap;
  bool in_namespace = false;
  if (auto w = InMountNamespace("mount -t tmpfs -o size=256k,mode=0700 tmpfs \"$0\"", dir)) {
    wrap = *w;
    in_namespace = true;
  } else if (const std::string prlimit = SystemTool("prlimit");
             !prlimit.empty() &&
             RunProgram({prlimit, "--fsize=262144", SystemTool("true")}).exit_code == 0) {
    wrap = {prlimit, "--fsize=262144"};  // writes past 256 KiB fail with EFBIG
  } else {
    GTEST_SKIP() << "neither unshare -m (a private tmpfs) nor prlimit --fsize works here";
  }
  std::printf("[ disk     ] %s\n", in_namespace ? "a 256 KiB tmpfs in a private mount namespace"
                                                : "a file size limit of 256 KiB (prlimit)");
  auto d = DaemonProcess::Start(Flags(dir, {"--sessions.offload_after=300ms"}), wrap);
  ASSERT_NE(d, nullptr);
  const std::string seen_dir =
      in_namespace ? "/proc/" + std::to_string(d->pid()) + "/root" + dir : dir;
  std::string id, other_id;
  std::vector<int32_t> context, other_context;
  auto s = MakeSession(*d, Words(0, 40), 6, &id, &context);
  auto other = MakeSession(*d, Words(17, 30), 4, &other_id, &other_context);
  ASSERT_TRUE(s && other);
  WaitPrefilled(*d, id);
  WaitPrefilled(*d, other_id);
  DetachStream(*s);  // written at once: it does not fit
  DetachStream(*other);
  ASSERT_TRUE(WaitFor([&] { return WriteErrors(*d, "RESOURCE_EXHAUSTED") >= 2; }))
      << "no failed write was counted: " << d->Stderr();
  const double failed = WriteErrors(*d, "RESOURCE_EXHAUSTED");
  std::this_thread::sleep_for(600ms);  // past offload_after: an offload needs a write
  // The reaper asks to offload them every 30 ms meanwhile; a failed write waits for its
  // backoff (1 s, doubling) before the next attempt, whoever asks.
  EXPECT_LE(WriteErrors(*d, "RESOURCE_EXHAUSTED") - failed, 2)
      << "failed writes were retried without backoff: " << d->Stderr();
  EXPECT_NE(d->Stderr().find("not written (RESOURCE_EXHAUSTED)"), std::string::npos) << d->Stderr();
  EXPECT_TRUE(TempFilesIn(seen_dir).empty()) << "partial files: " << Joined(TempFilesIn(seen_dir));
  for (const std::string& f : FilesIn(seen_dir)) {  // what did fit is whole
    EXPECT_TRUE(ReadSnapshotSummary(ReadBytes(seen_dir + "/" + f)).ok()) << f;
  }
  ExpectStillServed(*d, *reference_, id, context);
  ExpectStillServed(*d, *reference_, other_id, other_context);
  EXPECT_TRUE(TempFilesIn(seen_dir).empty()) << "partial files: " << Joined(TempFilesIn(seen_dir));
  // The drain's writes fail too; it gives up after its flush timeout and exits cleanly.
  d->Terminate();
  EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
}

TEST_F(DurabilityE2eTest, AReadOnlyDirectoryCostsSnapshotsNotSessions) {
  TempDir tmp;
  const std::string dir = tmp.Sub("ro");
  auto wrap =
      InMountNamespace("mount --bind \"$0\" \"$0\" && mount -o remount,bind,ro \"$0\"", dir);
  if (!wrap) {
    GTEST_SKIP() << "unshare -m with a read-only bind mount is not allowed here (and a chmod "
                    "does not stop root)";
  }
  // A session written while the directory was writable: it still comes back.
  std::string old_id;
  std::vector<int32_t> old_context;
  {
    auto d = DaemonProcess::Start(Flags(dir));
    ASSERT_NE(d, nullptr);
    auto s = MakeSession(*d, Words(9, 12), 4, &old_id, &old_context);
    ASSERT_TRUE(s);
    DetachStream(*s);
    d->Terminate();
    ASSERT_EQ(d->Wait(60s), 0) << d->Stderr();
  }
  const std::vector<std::string> files = FilesIn(dir);
  auto d = DaemonProcess::Start(Flags(dir, {"--sessions.offload_after=300ms"}), *wrap);
  ASSERT_NE(d, nullptr);
  std::string id;
  std::vector<int32_t> context;
  auto s = MakeSession(*d, Words(30, 20), 5, &id, &context);
  ASSERT_TRUE(s);
  DetachStream(*s);
  ASSERT_TRUE(WaitFor([&] { return WriteErrors(*d, "PERMISSION_DENIED") >= 1; }))
      << "no failed write was counted: " << d->Stderr();
  const double failed = WriteErrors(*d, "PERMISSION_DENIED");
  std::this_thread::sleep_for(600ms);  // past offload_after
  EXPECT_LE(WriteErrors(*d, "PERMISSION_DENIED") - failed, 1)
      << "failed writes were retried without backoff: " << d->Stderr();
  EXPECT_NE(d->Stderr().find("not written (PERMISSION_DENIED)"), std::string::npos) << d->Stderr();
  ExpectStillServed(*d, *reference_, id, context);
  ExpectResumesAndContinues(*d, old_id, old_context);
  EXPECT_EQ(FilesIn(dir), files) << "the read-only directory changed";
  d->Terminate();
  EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
}

}  // namespace
}  // namespace streamd::e2e
