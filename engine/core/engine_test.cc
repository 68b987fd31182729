// The engine end to end on a synthetic model with a byte vocabulary (no model file needed):
// the API's contract, batch invariance, admission from the block bound, bad input, and the
// planner's tenants as the engine passes them.
#include "engine/core/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "engine/backends/cpu/synthetic_model.h"
#include "tests/support/engine_test_util.h"

namespace streamd {
namespace {

using namespace std::chrono_literals;
using namespace streamd::testing;

TEST(EngineTest, GeneratesStreamsAndKeepsDeliveredTokensInContext) {
  auto engine = MakeEngine();
  Collector events;
  auto id = engine->Open(Greedy());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(engine->Append(*id, RandomTokens(30, 1)).ok());
  GenerateOptions g = UpTo(12);
  g.request_id = "r1";
  ASSERT_TRUE(engine->Generate(*id, g, events.Sink()).ok());
  const GenerationEvent done = events.WaitDone(*id);
  EXPECT_EQ(done.reason, FinishReason::kLength);
  EXPECT_EQ(done.request_id, "r1");
  EXPECT_EQ(done.output_tokens, 12);
  // The input still pending when the generation started: the scheduler may prefill all but the
  // held-back last token while the session idles between Append and Generate.
  EXPECT_GE(done.prompt_tokens, 1);
  EXPECT_LE(done.prompt_tokens, 30);
  EXPECT_EQ(events.Tokens(*id).size(), 12u);
  auto info = engine->Get(*id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->tokens_seen, 42);  // the prompt and every delivered token
  EXPECT_FALSE(info->generating);
  // A second generation continues after the first.
  ASSERT_TRUE(engine->Generate(*id, UpTo(5), events.Sink()).ok());
  EXPECT_EQ(events.WaitDone(*id).output_tokens, 5);
  EXPECT_EQ(engine->Get(*id)->tokens_seen, 47);
  EXPECT_GT(engine->Get(*id)->tokens_evicted, 0);  // window 40 + 4 sinks < 47
}

// Greedy output of 16 sessions of different lengths and phases, run together, equals each
// run alone (on the plain path, full logits rows and host sampling).
void CheckBatchInvariance(bool ids_on_device) {
  constexpr int kSessions = 16;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kSessions; ++i) prompts.push_back(RandomTokens(5 + 23 * i, 100 + i));
  std::vector<std::vector<int32_t>> alone(kSessions);
  {
    auto engine = MakeEngine();
    Collector events;
    for (int i = 0; i < kSessions; ++i) {
      auto id = engine->Open(Greedy());
      ASSERT_TRUE(engine->Append(*id, prompts[i]).ok());
      ASSERT_TRUE(engine->Generate(*id, UpTo(20), events.Sink()).ok());
      events.WaitDone(*id);
      alone[i] = events.Tokens(*id);
    }
  }
  IdsOnDevice* wrapper = nullptr;
  auto engine = MakeEngine(64 << 20, 64, TinyModel(), ids_on_device ? &wrapper : nullptr);
  Collector events;
  std::vector<SessionId> ids;
  for (int i = 0; i < kSessions; ++i) {
    auto id = engine->Open(Greedy());
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
    ASSERT_TRUE(engine->Append(*id, prompts[i]).ok());
    ASSERT_TRUE(engine->Generate(*id, UpTo(20), events.Sink()).ok());
    if (i % 3 == 0) std::this_thread::sleep_for(2ms);  // stagger: mixed phases per step
  }
  for (int i = 0; i < kSessions; ++i) {
    events.WaitDone(ids[i]);
    EXPECT_EQ(events.Tokens(ids[i]), alone[i]) << "session " << i;
  }
  EXPECT_GT(engine->Stats().steps, 0);
  if (ids_on_device) {  // every session greedy: no step brought back full rows
    EXPECT_EQ(wrapper->full_rows_steps, 0);
    EXPECT_GT(wrapper->ids_only_steps, 0);
  }
}

TEST(EngineTest, SessionOutputDoesNotDependOnTheBatch) { CheckBatchInvariance(false); }

// A backend that picks greedy ids on the device gets ids-only steps, with the same tokens.
TEST(EngineTest, IdsOnlyStepsGiveTheTokensOfFullRows) { CheckBatchInvariance(true); }

// A step in which one session samples brings back full rows; greedy sessions in it get the
// same tokens either way, and a seeded sampling session draws the same tokens as on the plain
// path.
TEST(EngineTest, IdsOnlyBackendFallsBackToRowsWhenASessionSamples) {
  const std::vector<int32_t> prompt = RandomTokens(9, 31);
  SessionOptions sampling = Greedy();
  sampling.sampling.temperature = 0.9f;
  sampling.sampling.seed = 1234;
  std::vector<int32_t> plain_greedy, plain_sampled;
  for (bool ids_on_device : {false, true}) {
    IdsOnDevice* wrapper = nullptr;
    auto engine = MakeEngine(64 << 20, 64, TinyModel(), ids_on_device ? &wrapper : nullptr);
    Collector events;
    auto a = engine->Open(Greedy());
    auto b = engine->Open(sampling);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_TRUE(engine->Append(*a, prompt).ok());
    ASSERT_TRUE(engine->Append(*b, prompt).ok());
    ASSERT_TRUE(engine->Generate(*a, UpTo(15), events.Sink()).ok());
    ASSERT_TRUE(engine->Generate(*b, UpTo(15), events.Sink()).ok());
    events.WaitDone(*a);
    events.WaitDone(*b);
    if (!ids_on_device) {
      plain_greedy = events.Tokens(*a);
      plain_sampled = events.Tokens(*b);
      continue;
    }
    EXPECT_EQ(events.Tokens(*a), plain_greedy);
    EXPECT_EQ(events.Tokens(*b), plain_sampled);
    EXPECT_GT(wrapper->full_rows_steps, 0);
  }
}

TEST(EngineTest, CancelStopsTheGenerationAndKeepsItsTokens) {
  auto engine = MakeEngine();
  Collector events;
  auto id = engine->Open(Greedy());
  ASSERT_TRUE(engine->Append(*id, RandomTokens(10, 3)).ok());
  ASSERT_TRUE(engine->Generate(*id, UpTo(100000), events.Sink()).ok());
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(engine->Cancel(*id).ok());
  const GenerationEvent done = events.WaitDone(*id);
  EXPECT_EQ(done.reason, FinishReason::kCancelled);
  EXPECT_LT(done.output_tokens, 100000);
  std::this_thread::sleep_for(20ms);  // a step in flight may still finish after the cancel
  const size_t delivered = events.Tokens(*id).size();
  EXPECT_EQ(engine->Get(*id)->tokens_seen, 10 + static_cast<int64_t>(delivered));
  EXPECT_TRUE(engine->Append(*id, RandomTokens(3, 4)).ok());  // idle again
}

// A cancel lands at any moment, often while the generation's last token is in the forward pass.
// The session must stay continuable, and continuing must give exactly the tokens one
// uninterrupted greedy generation gives. With ids-only steps, a cancel mid-step makes the
// engine fetch the row it holds for the next generation (CopyGreedyStepLogits).
void CheckCancelAtAnyMoment(bool ids_on_device) {
  // Wide enough that a step takes about a millisecond: most cancels land mid-step.
  SyntheticModelSpec spec = TinyModel();
  spec.dim = 512;
  spec.ffn_dim = 1536;
  spec.n_layers = 4;
  IdsOnDevice* wrapper = nullptr;
  auto engine = MakeEngine(64 << 20, 64, spec, ids_on_device ? &wrapper : nullptr);
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    Collector events;
    auto id = engine->Open(Greedy());
    ASSERT_TRUE(id.ok());
    const std::vector<int32_t> prompt = RandomTokens(12, 50 + round);
    ASSERT_TRUE(engine->Append(*id, prompt).ok());
    ASSERT_TRUE(engine->Generate(*id, UpTo(100000), events.Sink()).ok());
    std::this_thread::sleep_for(std::chrono::microseconds(200 + rng() % 3000));
    ASSERT_TRUE(engine->Cancel(*id).ok());
    events.WaitDone(*id);
    std::this_thread::sleep_for(20ms);  // the step in flight at the cancel (if any) ends
    const Status continued = engine->Generate(*id, UpTo(3), events.Sink());
    ASSERT_TRUE(continued.ok()) << "round " << round << ": " << continued.ToString();
    EXPECT_EQ(events.WaitDone(*id).output_tokens, 3);
    const std::vector<int32_t> interrupted = events.Tokens(*id);
    ASSERT_TRUE(engine->Close(*id).ok());

    auto ref = engine->Open(Greedy());
    ASSERT_TRUE(engine->Append(*ref, prompt).ok());
    ASSERT_TRUE(
        engine->Generate(*ref, UpTo(static_cast<int32_t>(interrupted.size())), events.Sink()).ok());
    events.WaitDone(*ref);
    EXPECT_EQ(events.Tokens(*ref), interrupted) << "round " << round;
    ASSERT_TRUE(engine->Close(*ref).ok());
  }
}

TEST(EngineTest, CancelAtAnyMomentLeavesTheSessionContinuable) { CheckCancelAtAnyMoment(false); }

TEST(EngineTest, CancelAtAnyMomentWithIdsOnlySteps) { CheckCancelAtAnyMoment(true); }

TEST(EngineTest, BadRequestsGetStableCodesAndDisturbNothing) {
  auto engine = MakeEngine();
  Collector events;
  auto other = engine->Open(Greedy());
  ASSERT_TRUE(engine->Append(*other, RandomTokens(20, 5)).ok());
  ASSERT_TRUE(engine->Generate(*other, UpTo(30), events.Sink()).ok());

  const SessionId unknown = SessionId::Random();
  EXPECT_EQ(engine->Append(unknown, RandomTokens(3, 1)).code(), StatusCode::kNotFound);
  EXPECT_EQ(engine->Generate(unknown, UpTo(3), events.Sink()).code(), StatusCode::kNotFound);
  EXPECT_EQ(engine->Close(unknown).code(), StatusCode::kNotFound);
  auto id = engine->Open(Greedy());
  ASSERT_TRUE(id.ok());
  Status s = engine->Append(*id, std::vector<int32_t>{1, 2, 300});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token id 300 at index 2 is outside the vocabulary [0, 300)"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(engine->Append(*id, std::vector<int32_t>{}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Generate(*id, UpTo(3), events.Sink()).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(engine->Append(*id, RandomTokens(5, 2)).ok());
  GenerateOptions zero = UpTo(0);
  s = engine->Generate(*id, zero, events.Sink());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("max_tokens = 0"), std::string::npos);
  GenerateOptions bad_p = UpTo(3);
  bad_p.sampling = SamplingParams{};
  bad_p.sampling->top_p = 1.5f;
  EXPECT_EQ(engine->Generate(*id, bad_p, events.Sink()).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(engine->Generate(*id, UpTo(1000), events.Sink()).ok());
  EXPECT_EQ(engine->Generate(*id, UpTo(3), events.Sink()).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine->Append(*id, RandomTokens(2, 9)).code(), StatusCode::kFailedPrecondition);
  SessionOptions bad = Greedy();
  bad.sinks = -1;
  EXPECT_EQ(engine->Open(bad).status().code(), StatusCode::kInvalidArgument);
  bad = Greedy(0);
  EXPECT_EQ(engine->Open(bad).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(engine->Close(*id).ok());
  EXPECT_EQ(engine->Append(*id, RandomTokens(2, 9)).code(), StatusCode::kNotFound);

  const GenerationEvent done = events.WaitDone(*other);
  EXPECT_EQ(done.reason, FinishReason::kLength);
  EXPECT_EQ(done.output_tokens, 30);
}

// Sessions are admitted only while their bound fits beside the prefill headroom; admitted
// sessions then run to the end with the pool completely reserved (their 150-token appends
// share the headroom in shortened chunks), and closing frees every block.
TEST(EngineTest, AdmissionFromTheBoundAndNoMidStreamFailure) {
  // SessionCache bound: ceil(4/16) + ceil((40 + 16 - 1)/16) = 1 + 4 = 5 blocks; prefill
  // headroom for steps of 128 tokens in chunks of 64: ceil(128/16) + 2 + 2 = 12 blocks.
  SyntheticModelSpec spec;  // 2 layers, 2 kv heads, head_dim 16
  const int64_t block_bytes = BlockPool::BlockBytes({2, 2, 16}, 16);
  auto engine = MakeEngine(/*pool_bytes=*/block_bytes * 30, /*max_chunk=*/64);
  Collector events;
  std::vector<SessionId> ids;
  for (int i = 0; i < 3; ++i) {
    auto id = engine->Open(Greedy());
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(*id);
  }
  auto refused = engine->Open(Greedy());
  ASSERT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("needs up to 5 blocks"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("15 of 30"), std::string::npos);
  EXPECT_NE(refused.status().message().find("12 by the prefill headroom"), std::string::npos);
  for (size_t i = 0; i < ids.size(); ++i) {
    const SessionId id = ids[i];
    ASSERT_TRUE(engine->Append(id, RandomTokens(150, i + 1)).ok());
    ASSERT_TRUE(engine->Generate(id, UpTo(200), events.Sink()).ok());
  }
  // A queued Open is admitted when a session closes.
  std::thread closer([&] {
    events.WaitDone(ids[0]);
    EXPECT_TRUE(engine->Close(ids[0]).ok());
  });
  SessionOptions patient = Greedy();
  patient.admission_timeout = 60s;
  auto late = engine->Open(patient);
  closer.join();
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  for (size_t i = 1; i < ids.size(); ++i) {
    const GenerationEvent done = events.WaitDone(ids[i]);
    EXPECT_EQ(done.reason, FinishReason::kLength) << done.status.ToString();
    EXPECT_EQ(done.output_tokens, 200);
  }
  for (size_t i = 1; i < ids.size(); ++i) ASSERT_TRUE(engine->Close(ids[i]).ok());
  ASSERT_TRUE(engine->Close(*late).ok());
  EXPECT_EQ(engine->Stats().blocks_used, 0);
  EXPECT_EQ(engine->Stats().blocks_reserved, 0);
}

// Ids are 128 random bits: valid, distinct, and never those of an earlier engine (a restart).
TEST(EngineTest, OpenNamesSessionsWithRandomIds) {
  std::set<SessionId> first;
  {
    auto engine = MakeEngine();
    for (int i = 0; i < 4; ++i) {
      auto id = engine->Open(Greedy());
      ASSERT_TRUE(id.ok()) << id.status().ToString();
      EXPECT_TRUE(id->valid());
      EXPECT_TRUE(first.insert(*id).second) << "a repeated id: " << *id;
      auto info = engine->Get(*id);
      ASSERT_TRUE(info.ok());
      EXPECT_EQ(info->id, *id);
    }
    const SessionId closed = *first.begin();
    ASSERT_TRUE(engine->Close(closed).ok());
    const Status gone = engine->Get(closed).status();
    EXPECT_EQ(gone.code(), StatusCode::kNotFound);
    EXPECT_NE(gone.message().find("session " + closed.ToString()), std::string::npos)
        << gone.message();
  }
  auto restarted = MakeEngine();
  for (int i = 0; i < 4; ++i) {
    auto id = restarted->Open(Greedy());
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    EXPECT_EQ(first.count(*id), 0u) << "id " << *id << " was handed out before the restart";
  }
  for (const SessionId& old : first) {
    EXPECT_EQ(restarted->Get(old).status().code(), StatusCode::kNotFound);
  }
}

// Tenant A's six decoding sessions and tenant B's one share two session slots. With tenants,
// every step runs one of A's and B's one, so at most two of A's tokens come between two of
// B's; without (fair_tenants off) B waits its turn among seven sessions. Counts events, not
// time: A's generations are far longer than B's (and cancelled once B is done), so a fast
// machine cannot finish them before B starts.
TEST(EngineTest, TenantsShareContendedStepsEvenly) {
  for (bool fair : {true, false}) {
    SCOPED_TRACE(fair ? "fair_tenants on" : "fair_tenants off");
    // What the sinks write outlives the engine (declared first, destroyed last), which is reset
    // before the log is read: no event can arrive during the analysis or after an early return.
    std::mutex mu;
    std::condition_variable cv;
    std::vector<char> log;  // 'a' or 'b' for each token event, in delivery order
    std::set<SessionId> a_started;
    int done = 0;
    int done_when_b_finished = -1;  // generations ended by the time B's ended (B's included)
    auto engine = MakeEngine(64 << 20, 64, TinyModel(), nullptr, 16, {128, 2, fair});
    const auto sink = [&](char who) {
      return [&, who](GenerationEvent&& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (e.kind == GenerationEvent::Kind::kToken) {
          log.push_back(who);
          if (who == 'a') a_started.insert(e.session);
        } else {
          ++done;
          if (who == 'b') done_when_b_finished = done;
        }
        cv.notify_all();
      };
    };
    SessionOptions a = Greedy(), b = Greedy();
    a.tenant = "a";
    b.tenant = "b";
    std::vector<SessionId> ids;
    for (int i = 0; i < 6; ++i) {
      auto id = engine->Open(a);
      ASSERT_TRUE(id.ok()) << id.status().ToString();
      ASSERT_TRUE(engine->Append(*id, RandomTokens(8, i)).ok());
      // Far longer than B's turn: A contends for the whole of it (and is cancelled after).
      ASSERT_TRUE(engine->Generate(*id, UpTo(3000), sink('a')).ok());
      ids.push_back(*id);
    }
    {
      std::unique_lock<std::mutex> lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, 60s, [&] { return a_started.size() == 6; }));
    }
    auto id_b = engine->Open(b);
    ASSERT_TRUE(id_b.ok());
    EXPECT_EQ(engine->Get(*id_b)->tenant, "b");
    ASSERT_TRUE(engine->Append(*id_b, RandomTokens(8, 99)).ok());
    ASSERT_TRUE(engine->Generate(*id_b, UpTo(12), sink('b')).ok());
    ids.push_back(*id_b);
    {
      std::unique_lock<std::mutex> lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, 60s, [&] { return done_when_b_finished > 0; }));
    }
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(engine->Cancel(ids[i]).ok());
    {
      std::unique_lock<std::mutex> lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, 60s, [&] { return done == 7; }));
    }
    for (SessionId id : ids) ASSERT_TRUE(engine->Close(id).ok());
    engine.reset();  // its thread joined: every event delivered
    ASSERT_EQ(done_when_b_finished, 1) << "A must outlast B";
    // Between B's first and last token.
    const auto first = std::find(log.begin(), log.end(), 'b');
    const auto last = std::find(log.rbegin(), log.rend(), 'b').base() - 1;
    ASSERT_EQ(std::count(first, last + 1, 'b'), 12);
    int most = 0, run = 0;
    for (auto it = first; it <= last; ++it) {
      run = *it == 'a' ? run + 1 : 0;
      most = std::max(most, run);
    }
    if (fair) {
      EXPECT_LE(most, 2) << "A's tokens in a row while B generates";
    } else {
      EXPECT_GE(most, 4) << "A's tokens in a row while B generates";
    }
  }
}

// A Cancel racing the scheduler's delivery of a step: whatever the timing, a generation's sink
// sees its events in the order they were made, so never a token after its GenerationDone, and
// the GenerationDone has arrived when Cancel returns. (Before events were delivered in turn, a
// Cancel landing between a step's unlock and its delivery sent the done event first.)
TEST(EngineTest, NoTokenArrivesAfterItsGenerationDone) {
  struct Seen {
    std::mutex mu;
    std::condition_variable cv;
    int tokens = 0, tokens_after_done = 0, dones = 0;
  };
  std::vector<std::shared_ptr<Seen>> all;
  auto engine = MakeEngine();
  for (int round = 0; round < 100; ++round) {
    auto id = engine->Open(Greedy());
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE(engine->Append(*id, RandomTokens(8, round)).ok());
    auto seen = std::make_shared<Seen>();
    all.push_back(seen);
    ASSERT_TRUE(engine
                    ->Generate(*id, UpTo(1000),
                               [seen](GenerationEvent&& e) {
                                 std::lock_guard<std::mutex> lock(seen->mu);
                                 if (e.kind == GenerationEvent::Kind::kToken) {
                                   ++seen->tokens;
                                   if (seen->dones > 0) ++seen->tokens_after_done;
                                 } else {
                                   ++seen->dones;
                                 }
                                 seen->cv.notify_all();
                               })
                    .ok());
    {
      std::unique_lock<std::mutex> lock(seen->mu);
      ASSERT_TRUE(seen->cv.wait_for(lock, 60s, [&] { return seen->tokens > round % 4; }));
    }
    ASSERT_TRUE(engine->Cancel(*id).ok());
    {
      std::lock_guard<std::mutex> lock(seen->mu);
      EXPECT_EQ(seen->dones, 1) << "round " << round << ": Cancel returned before the done";
    }
    ASSERT_TRUE(engine->Close(*id).ok());
  }
  engine.reset();  // its thread joined: nothing more can arrive
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i]->tokens_after_done, 0) << "round " << i;
    EXPECT_EQ(all[i]->dones, 1) << "round " << i;
  }
}

// Found by client_message_fuzz: Close returned at once when the session's generation had
// already ended in a step that was still delivering its events, so the sink ran after Close
// had returned: after the server stream that sent Close had ended (and, at shutdown, after the
// server's task thread it posts to was gone).
TEST(EngineTest, CloseReturnsAfterTheSessionsLastEventsAreDelivered) {
  auto engine = MakeEngine();
  auto id = engine->Open(Greedy());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(engine->Append(*id, RandomTokens(8, 5)).ok());
  std::mutex mu;
  std::condition_variable cv;
  bool delivering = false;
  std::atomic<bool> delivered{false};
  // One token: the step that samples it ends the generation, and delivers both events.
  ASSERT_TRUE(engine
                  ->Generate(*id, UpTo(1),
                             [&](GenerationEvent&& e) {
                               if (e.kind != GenerationEvent::Kind::kDone) return;
                               {
                                 std::lock_guard<std::mutex> lock(mu);
                                 delivering = true;
                               }
                               cv.notify_all();
                               std::this_thread::sleep_for(200ms);  // a slow sink
                               delivered = true;
                             })
                  .ok());
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 60s, [&] { return delivering; }));
  }
  ASSERT_TRUE(engine->Close(*id).ok());  // no generation left to cancel: nothing of its own
  EXPECT_TRUE(delivered) << "Close returned while the session's sink was still running";
}

}  // namespace
}  // namespace streamd
