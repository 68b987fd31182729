// Residency transitions met by every other operation, deterministically. The registry stops at a
// test-only pause point inside a transition (RegistryOptions::pause_for_test) while an operation
// arrives, then the transition goes on. Each case checks that the operation got its answer
// promptly (never a silent wait), and that the session kept its whole context: tokens_seen, and
// a greedy continuation equal to a twin session with the same input that never left memory.
//
// Points: an offload claimed (nothing written yet); an offload whose snapshot is complete and
// whose blocks are not freed yet; a Resume's load restored into the engine and not resident
// yet; the same for a load at start (restore_on_start).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <tuple>
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

// Holds the transition of one session at one point, once, until Release.
class PauseGate {
 public:
  explicit PauseGate(TransitionPoint at) : at_(at) {}
  void Arm(SessionId id) {
    std::lock_guard<std::mutex> lock(mu_);
    target_ = id;
  }
  void At(TransitionPoint point, SessionId id) {
    std::unique_lock<std::mutex> lock(mu_);
    if (point != at_ || id != target_ || reached_) return;
    reached_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
  }
  bool WaitReached(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return reached_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  const TransitionPoint at_;
  std::mutex mu_;
  std::condition_variable cv_;
  SessionId target_;
  bool reached_ = false;
  bool released_ = false;
};

// A Resume whose answer may come later, from another thread.
class PendingResume {
 public:
  PendingResume(SessionRegistry& registry, SessionId id)
      : owner_(std::make_shared<FakeOwner>()), start_(Clock::now()) {
    registry.Attach(id, owner_, [this](StatusOr<std::shared_ptr<SessionRecord>> s) {
      answered_after_ = Clock::now() - start_;
      answer_.set_value(std::move(s));
    });
  }
  bool AnsweredWithin(std::chrono::milliseconds limit) {
    return future_.wait_for(limit) == std::future_status::ready;
  }
  StatusOr<std::shared_ptr<SessionRecord>> Get() {
    EXPECT_TRUE(AnsweredWithin(10s)) << "a Resume got no answer";
    return future_.get();
  }
  Clock::duration answered_after() const { return answered_after_; }

 private:
  std::shared_ptr<FakeOwner> owner_;
  Clock::time_point start_;
  Clock::duration answered_after_{};
  std::promise<StatusOr<std::shared_ptr<SessionRecord>>> answer_;
  std::future<StatusOr<std::shared_ptr<SessionRecord>>> future_ = answer_.get_future();
};

enum class Op {
  kResume,          // a Resume: waits, then gets the whole session
  kSecondResume,    // two Resumes: one gets it, the other FAILED_PRECONDITION
  kClose,           // CloseSession: closed at once, its Resumes told NOT_FOUND
  kIdleTimeout,     // the reaper, past the idle timeout: passes the session by
  kExport,          // ExportSession: the whole session's snapshot, at once
  kResumeTimesOut,  // a Resume past sessions.resume_wait: UNAVAILABLE, the session intact
};

const char* OpName(Op op) {
  switch (op) {
    case Op::kResume:
      return "Resume";
    case Op::kSecondResume:
      return "SecondResume";
    case Op::kClose:
      return "Close";
    case Op::kIdleTimeout:
      return "IdleTimeout";
    case Op::kExport:
      return "Export";
    case Op::kResumeTimesOut:
      return "ResumeTimesOut";
  }
  return "?";
}

const char* PointName(TransitionPoint p) {
  switch (p) {
    case TransitionPoint::kOffloadClaimed:
      return "OffloadClaimed";
    case TransitionPoint::kOffloadWritten:
      return "OffloadWritten";
    case TransitionPoint::kResumeLoaded:
      return "ResumeLoaded";
    case TransitionPoint::kStartupLoaded:
      return "StartupLoaded";
  }
  return "?";
}

constexpr std::chrono::milliseconds kOffloadAfter = 1h;
constexpr std::chrono::milliseconds kIdleTimeout = 10h;
constexpr std::chrono::milliseconds kShortResumeWait = 300ms;
// What "at once" means for an answer that does not wait for the transition: generous for a
// loaded 2-core machine under TSan, far below resume_wait.
constexpr std::chrono::milliseconds kPrompt = 2000ms;
constexpr size_t kContext = 40;

class ResidencyRaceTest : public ::testing::TestWithParam<std::tuple<TransitionPoint, Op>> {
 protected:
  TransitionPoint point() const { return std::get<0>(GetParam()); }
  Op op() const { return std::get<1>(GetParam()); }
  bool offload_point() const {
    return point() == TransitionPoint::kOffloadClaimed ||
           point() == TransitionPoint::kOffloadWritten;
  }

  void SetUp() override {
    dir_ = TempDir();
    seed_ = std::random_device{}();
    tokens_ = RandomTokens(kContext, seed_);
    gate_ = std::make_shared<PauseGate>(point());
  }

  void TearDown() override {
    gate_->Release();  // a failed case must not leave the transition held
    if (transition_.joinable()) transition_.join();
    registry_.reset();
    persister_.reset();
  }

  std::unique_ptr<SessionRegistry> NewRegistry() {
    RegistryOptions o = Timeouts(kIdleTimeout, kOffloadAfter);
    if (op() == Op::kResumeTimesOut) o.resume_wait = kShortResumeWait;
    std::shared_ptr<PauseGate> gate = gate_;
    o.pause_for_test = [gate](TransitionPoint p, SessionId id) { gate->At(p, id); };
    auto r = std::make_unique<SessionRegistry>(*e_.engine, o, persister_.get());
    if (op() == Op::kResumeTimesOut) r->StartReaper();  // it answers expired waits
    return r;
  }

  // A session of `registry` over `engine` with the case's context, prefilled (all but the
  // held-back token).
  SessionId OpenWithContext(SessionRegistry& registry, Engine& engine) {
    auto s = registry.Open(Small(), std::make_shared<FakeOwner>());
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    const SessionId id = (*s)->id;
    EXPECT_TRUE(engine.Append(id, tokens_).ok());
    for (int i = 0; i < 2000 && engine.Get(id)->pending_tokens > 1; ++i) {
      std::this_thread::sleep_for(5ms);
    }
    sessions_[id] = *s;
    return id;
  }

  // Brings session `target_` to the case's pause point and holds it there.
  void ReachThePoint() {
    if (point() == TransitionPoint::kStartupLoaded) {
      {  // a first life: the session is written, then the process ends
        TestEngine first = MakeEngine();
        auto first_persister = MakePersister(first, dir_);
        SessionRegistry r(*first.engine, Timeouts(kIdleTimeout, kOffloadAfter),
                          first_persister.get());
        target_ = OpenWithContext(r, *first.engine);
        r.Touched(*sessions_[target_]);
        ASSERT_TRUE(r.PersistAll(Clock::now() + 20s));
      }
      e_ = MakeEngine();
      persister_ = MakePersister(e_, dir_);
      registry_ = NewRegistry();
      gate_->Arm(target_);
      ASSERT_EQ(registry_->RestoreFromStore(/*load=*/true), 1);
      twin_ = OpenWithContext(*registry_, *e_.engine);
      ASSERT_TRUE(gate_->WaitReached(20s)) << "the start-up load never reached its pause point";
      return;
    }
    e_ = MakeEngine();
    persister_ = MakePersister(e_, dir_);
    registry_ = NewRegistry();
    target_ = OpenWithContext(*registry_, *e_.engine);
    twin_ = OpenWithContext(*registry_, *e_.engine);  // stays attached: never offloaded
    if (offload_point()) gate_->Arm(target_);
    registry_->Detach(sessions_[target_]);
    if (offload_point()) {
      transition_ = std::thread([this] { registry_->ReapIdle(Clock::now() + kOffloadAfter + 1s); });
    } else {
      ASSERT_EQ(registry_->ReapIdle(Clock::now() + kOffloadAfter + 1s), 1);
      ASSERT_EQ(ResidencyOf(target_), Residency::kOffloaded);
      gate_->Arm(target_);
      first_resume_.emplace(*registry_, target_);  // starts the load
    }
    ASSERT_TRUE(gate_->WaitReached(20s)) << "the transition never reached its pause point";
  }

  Residency ResidencyOf(SessionId id) {
    std::shared_ptr<SessionRecord> s = registry_->Find(id);
    std::lock_guard<std::mutex> lock(s->mu);
    return s->residency;
  }

  // The greedy continuation of `id` (8 tokens).
  std::vector<int32_t> Continue(SessionId id) {
    Collector events;
    EXPECT_TRUE(e_.engine->Generate(id, UpTo(8), events.Sink()).ok());
    events.WaitDone(id);
    return events.Tokens(id);
  }

  // The session is whole: a Resume (when `attached` is null) gets it, with every token, and its
  // continuation is the twin's.
  void ExpectWhole(std::shared_ptr<SessionRecord> attached = nullptr) {
    if (attached == nullptr) {
      auto back = AttachNow(*registry_, target_, std::make_shared<FakeOwner>());
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      attached = *back;
    }
    EXPECT_EQ(attached->id, target_);
    auto info = e_.engine->Get(target_);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->tokens_seen, static_cast<int64_t>(kContext));
    EXPECT_EQ(Continue(target_), Continue(twin_)) << "seed " << seed_;
  }

  // Lets the held transition go on, then checks the session is whole: through the Resume that
  // started its load, or a new one once the offload has ended.
  void ReleaseAndExpectWhole() {
    gate_->Release();
    if (first_resume_) {
      auto s = first_resume_->Get();
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      ExpectWhole(*s);
      return;
    }
    if (transition_.joinable()) transition_.join();
    ExpectWhole();
  }

  std::string dir_;
  uint64_t seed_ = 0;
  std::vector<int32_t> tokens_;
  std::shared_ptr<PauseGate> gate_;
  TestEngine e_;
  std::unique_ptr<SessionPersister> persister_;
  std::unique_ptr<SessionRegistry> registry_;
  std::map<SessionId, std::shared_ptr<SessionRecord>> sessions_;
  SessionId target_, twin_;
  std::thread transition_;
  std::optional<PendingResume> first_resume_;  // the Resume that started a load
};

TEST_P(ResidencyRaceTest, EveryOperationIsAnsweredAndTheContextIsKept) {
  ASSERT_NO_FATAL_FAILURE(ReachThePoint());
  SCOPED_TRACE(std::string(PointName(point())) + " x " + OpName(op()) + ", seed " +
               std::to_string(seed_));
  switch (op()) {
    case Op::kResume: {
      std::optional<PendingResume> resume;
      if (!first_resume_) resume.emplace(*registry_, target_);
      PendingResume& r = first_resume_ ? *first_resume_ : *resume;
      // It waits for the transition: no half-state to attach to.
      EXPECT_FALSE(r.AnsweredWithin(100ms));
      gate_->Release();
      auto s = r.Get();
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      ExpectWhole(*s);
      break;
    }
    case Op::kSecondResume: {
      std::optional<PendingResume> resume;
      if (!first_resume_) resume.emplace(*registry_, target_);
      PendingResume second(*registry_, target_);
      PendingResume& first = first_resume_ ? *first_resume_ : *resume;
      EXPECT_FALSE(first.AnsweredWithin(100ms));
      gate_->Release();
      auto a = first.Get();
      auto b = second.Get();
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition) << b.status().ToString();
      ExpectWhole(*a);
      break;
    }
    case Op::kClose: {
      const Clock::time_point start = Clock::now();
      EXPECT_TRUE(registry_->Close(target_, CancelledError("closed by CloseSession")).ok());
      EXPECT_LT(Clock::now() - start, kPrompt);
      if (first_resume_) {  // the Resume that waited for the load is told at once
        ASSERT_TRUE(first_resume_->AnsweredWithin(kPrompt));
        EXPECT_EQ(first_resume_->Get().status().code(), StatusCode::kNotFound);
      }
      EXPECT_EQ(AttachNow(*registry_, target_, std::make_shared<FakeOwner>()).status().code(),
                StatusCode::kNotFound);
      gate_->Release();
      if (transition_.joinable()) transition_.join();
      // Gone everywhere once the transition ended: the engine's copy, the registry, the disk.
      bool engine_copy_gone = false;
      for (int i = 0; i < 2000 && !engine_copy_gone; ++i) {
        engine_copy_gone = !e_.engine->Get(target_).ok();
        if (!engine_copy_gone) std::this_thread::sleep_for(5ms);
      }
      EXPECT_TRUE(engine_copy_gone);
      EXPECT_EQ(registry_->Find(target_), nullptr);
      ASSERT_TRUE(persister_->WaitIdle(Clock::now() + 20s));
      EXPECT_FALSE(persister_->Summary(target_).ok()) << "the closed session's snapshot is back";
      EXPECT_EQ(AttachNow(*registry_, target_, std::make_shared<FakeOwner>()).status().code(),
                StatusCode::kNotFound);
      // The twin is untouched.
      EXPECT_EQ(e_.engine->Get(twin_)->tokens_seen, static_cast<int64_t>(kContext));
      break;
    }
    case Op::kIdleTimeout: {
      const Clock::time_point start = Clock::now();
      registry_->ReapIdle(Clock::now() + kIdleTimeout + 1h);
      EXPECT_LT(Clock::now() - start, kPrompt);
      EXPECT_NE(registry_->Find(target_), nullptr) << "closed in the middle of a transition";
      ASSERT_NO_FATAL_FAILURE(ReleaseAndExpectWhole());
      break;
    }
    case Op::kExport: {
      const Clock::time_point start = Clock::now();
      auto bytes = persister_->Export(target_);
      EXPECT_LT(Clock::now() - start, kPrompt);
      ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
      auto summary = ReadSnapshotSummary(*bytes);
      ASSERT_TRUE(summary.ok()) << summary.status().ToString();
      EXPECT_EQ(summary->id, target_);
      EXPECT_EQ(summary->tokens_seen + summary->pending_tokens, static_cast<int64_t>(kContext));
      ASSERT_NO_FATAL_FAILURE(ReleaseAndExpectWhole());
      break;
    }
    case Op::kResumeTimesOut: {
      std::optional<PendingResume> resume;
      if (!first_resume_) resume.emplace(*registry_, target_);
      PendingResume& r = first_resume_ ? *first_resume_ : *resume;
      // Answered while the transition is still held: UNAVAILABLE with a hint, within the bound.
      ASSERT_TRUE(r.AnsweredWithin(kShortResumeWait + kPrompt));
      auto s = r.Get();
      EXPECT_EQ(s.status().code(), StatusCode::kUnavailable) << s.status().ToString();
      EXPECT_NE(s.status().message().find("retry"), std::string::npos) << s.status().ToString();
      EXPECT_GE(r.answered_after(), kShortResumeWait);
      gate_->Release();
      if (transition_.joinable()) transition_.join();
      ExpectWhole();  // a Resume after it gets everything
      break;
    }
  }
  // Nothing is left in a transition.
  for (const auto& s : registry_->All()) {
    std::lock_guard<std::mutex> lock(s->mu);
    EXPECT_NE(s->residency, Residency::kOffloading) << s->id;
  }
}

INSTANTIATE_TEST_SUITE_P(AllPointsAndOperations, ResidencyRaceTest,
                         ::testing::Combine(::testing::Values(TransitionPoint::kOffloadClaimed,
                                                              TransitionPoint::kOffloadWritten,
                                                              TransitionPoint::kResumeLoaded,
                                                              TransitionPoint::kStartupLoaded),
                                            ::testing::Values(Op::kResume, Op::kSecondResume,
                                                              Op::kClose, Op::kIdleTimeout,
                                                              Op::kExport, Op::kResumeTimesOut)),
                         [](const ::testing::TestParamInfo<ResidencyRaceTest::ParamType>& param) {
                           return std::string(PointName(std::get<0>(param.param))) + "_" +
                                  OpName(std::get<1>(param.param));
                         });

}  // namespace
}  // namespace streamd
