// Engine::Capture and Engine::Restore: a session read out as a SessionState and written into
// another engine (another pool, other block numbers, other sessions around it) or back into the
// same one continues token for token as if it had never moved; bad states are refused with the
// field named and change nothing; copies never hold up other sessions' generations.
#include <gtest/gtest.h>

#include <thread>

#include "tests/support/engine_test_util.h"

namespace streamd {
namespace {

using namespace std::chrono_literals;
using namespace streamd::testing;

void ExpectSameInfo(Engine& a, Engine& b, SessionId id) {
  auto ia = a.Get(id), ib = b.Get(id);
  ASSERT_TRUE(ia.ok() && ib.ok());
  EXPECT_EQ(ia->tokens_seen, ib->tokens_seen);
  EXPECT_EQ(ia->tokens_cached, ib->tokens_cached);
  EXPECT_EQ(ia->tokens_evicted, ib->tokens_evicted);
  EXPECT_EQ(ia->pending_tokens, ib->pending_tokens);
  EXPECT_EQ(ia->revision, ib->revision);
  EXPECT_EQ(ia->tenant, ib->tenant);
}

TEST(EngineStateTest, RestoredSessionsContinueTokenForToken) {
  auto a = MakeEngine(64 << 20);
  auto b = MakeEngine(32 << 20);
  Collector events;
  // Other sessions in b first, so the restored one gets other block numbers.
  for (int i = 0; i < 2; ++i) {
    auto other = b->Open(Greedy());
    ASSERT_TRUE(other.ok());
    ASSERT_TRUE(b->Append(*other, RandomTokens(70 + 9 * i, 40 + i)).ok());
  }
  SessionOptions options = Greedy();
  options.tenant = "team-a";
  auto id = a->Open(options);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(a->Append(*id, RandomTokens(300, 7)).ok());  // far past S + W = 44
  ASSERT_TRUE(a->SetMetadata(*id, "chat", "assistant-open").ok());
  GenerateN(*a, events, *id, 15);
  auto state = a->Capture(*id);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ(state->id, *id);
  EXPECT_EQ(state->tenant, "team-a");
  EXPECT_EQ(state->metadata.at("chat"), "assistant-open");
  EXPECT_EQ(state->tokens_seen + static_cast<int64_t>(state->pending.size()), 315);
  EXPECT_EQ(state->pending.size(), 1u) << "an idle session keeps its last token pending";
  EXPECT_EQ(state->kv.n_tokens, 4 + 39);
  ASSERT_TRUE(b->Restore(*state).ok());
  ExpectSameInfo(*a, *b, *id);
  // Into a caller's buffer (as the snapshot writer gathers them), and into a reused state: the
  // same K/V and the same state.
  SessionState reused;
  std::vector<uint16_t> outside;
  ASSERT_TRUE(a->CaptureInto(*id, &reused, [&](const SessionState& meta) {
                 outside.assign(static_cast<size_t>(meta.kv.elements()), 0);
                 return outside.data();
               }).ok());
  EXPECT_TRUE(reused.kv.data.empty());
  EXPECT_EQ(outside, state->kv.data);
  ASSERT_TRUE(a->CaptureInto(*id, &reused).ok());
  reused.saved_unix_ms = state->saved_unix_ms;
  EXPECT_EQ(reused, *state);
  Collector events_b;
  const std::vector<int32_t> ta = GenerateN(*a, events, *id, 40);
  const std::vector<int32_t> tb = GenerateN(*b, events_b, *id, 40);
  EXPECT_EQ(ta, tb);
  // And again after more input: the restored session is an ordinary session.
  ASSERT_TRUE(a->Append(*id, RandomTokens(90, 8)).ok());
  ASSERT_TRUE(b->Append(*id, RandomTokens(90, 8)).ok());
  EXPECT_EQ(GenerateN(*a, events, *id, 20), GenerateN(*b, events_b, *id, 20));
}

TEST(EngineStateTest, StateWithInputStillPendingAndBackIntoTheSameEngine) {
  auto engine = MakeEngine();
  auto twin = MakeEngine();
  Collector events, twin_events;
  auto id = engine->Open(Greedy(100));
  ASSERT_TRUE(id.ok());
  // Captured right after a long append: most of it is still pending (or mid-prefill).
  ASSERT_TRUE(engine->Append(*id, RandomTokens(500, 11)).ok());
  auto state = engine->Capture(*id);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ(state->tokens_seen + static_cast<int64_t>(state->pending.size()), 500);
  ASSERT_TRUE(twin->Restore(*state).ok());
  ASSERT_TRUE(engine->Close(*id).ok());
  ASSERT_TRUE(engine->Restore(*state).ok()) << "back into the engine it came from";
  EXPECT_EQ(GenerateN(*engine, events, *id, 30), GenerateN(*twin, twin_events, *id, 30));
}

TEST(EngineStateTest, CaptureIsBetweenGenerationsAndNamesWhy) {
  auto engine = MakeEngine();
  Collector events;
  EXPECT_EQ(engine->Capture(SessionId::Random()).status().code(), StatusCode::kNotFound);
  auto id = engine->Open(Greedy());
  ASSERT_TRUE(id.ok());
  auto empty = engine->Capture(*id);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->tokens_seen, 0);
  EXPECT_TRUE(empty->pending.empty());
  EXPECT_EQ(empty->kv.n_tokens, 0);
  ASSERT_TRUE(engine->Append(*id, RandomTokens(30, 3)).ok());
  ASSERT_TRUE(engine->Generate(*id, UpTo(2000), events.Sink()).ok());
  auto busy = engine->Capture(*id);
  EXPECT_EQ(busy.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(busy.status().message().find("between generations"), std::string::npos);
  ASSERT_TRUE(engine->Cancel(*id).ok());
  events.WaitDone(*id);
  EXPECT_TRUE(engine->Capture(*id).ok());
}

TEST(EngineStateTest, BadStatesAreRefusedAndChangeNothing) {
  auto engine = MakeEngine(/*pool_bytes=*/BlockPool::BlockBytes({2, 2, 16}, 16) * 30);
  Collector events;
  auto id = engine->Open(Greedy());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(engine->Append(*id, RandomTokens(120, 5)).ok());
  GenerateN(*engine, events, *id, 5);
  auto state = engine->Capture(*id);
  ASSERT_TRUE(state.ok());
  const EngineStats before = engine->Stats();
  const auto expect_refused = [&](SessionState st, StatusCode code, const std::string& words) {
    const Status s = engine->Restore(st);
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
    const EngineStats after = engine->Stats();
    EXPECT_EQ(after.sessions, before.sessions);
    EXPECT_EQ(after.blocks_used, before.blocks_used);
    EXPECT_EQ(after.blocks_reserved, before.blocks_reserved);
  };
  expect_refused(*state, StatusCode::kAlreadyExists, "already exists");
  SessionState st = *state;
  st.id = SessionId::Random();
  SessionState bad = st;
  bad.cached_tokens[3] = 300;
  expect_refused(bad, StatusCode::kInvalidArgument, "cached_tokens[3] = 300");
  bad = st;
  bad.pending.push_back(-1);
  expect_refused(bad, StatusCode::kInvalidArgument, "pending[1] = -1");
  bad = st;
  bad.cached_tokens.pop_back();
  expect_refused(bad, StatusCode::kInvalidArgument, "cached ids");
  bad = st;
  bad.kv.head_dim = 8;
  expect_refused(bad, StatusCode::kInvalidArgument, "KV heads of 8");
  bad = st;
  bad.window = 100000;
  expect_refused(bad, StatusCode::kInvalidArgument, "window = 100000");
  bad = st;
  bad.tokens_seen = 30;  // a shorter history holds fewer tokens than the state carries
  expect_refused(bad, StatusCode::kInvalidArgument, "holds");
  bad = st;
  bad.sampling.top_p = 2.0f;
  expect_refused(bad, StatusCode::kInvalidArgument, "top_p");
  // Fill the pool; a state that does not fit is refused, not queued.
  std::vector<SessionId> fillers;
  while (true) {
    auto f = engine->Open(Greedy());
    if (!f.ok()) break;
    fillers.push_back(*f);
  }
  const Status full = engine->Restore(st);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full.ToString();
  ASSERT_TRUE(engine->Close(fillers.back()).ok());
  EXPECT_TRUE(engine->Restore(st).ok());
}

TEST(EngineStateTest, CloseIfUnchangedKeepsASessionThatMovedOn) {
  auto engine = MakeEngine();
  auto id = engine->Open(Greedy());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(engine->Append(*id, RandomTokens(20, 1)).ok());
  auto state = engine->Capture(*id);
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(engine->Append(*id, RandomTokens(3, 2)).ok());
  const Status moved = engine->CloseIfUnchanged(*id, state->revision);
  EXPECT_EQ(moved.code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(engine->Get(*id).ok());
  auto again = engine->Capture(*id);
  ASSERT_TRUE(again.ok());
  EXPECT_GT(again->revision, state->revision);
  EXPECT_TRUE(engine->CloseIfUnchanged(*id, again->revision).ok());
  EXPECT_EQ(engine->Get(*id).status().code(), StatusCode::kNotFound);
}

// Captures and restores from other threads, over and over, while other sessions generate: the
// generations are the tokens they would have been alone.
TEST(EngineStateTest, CopiesDoNotDisturbOtherSessions) {
  auto engine = MakeEngine();
  auto quiet = MakeEngine();
  Collector events, quiet_events;
  std::vector<SessionId> busy, quiet_ids;
  for (int i = 0; i < 4; ++i) {
    for (Engine* e : {engine.get(), quiet.get()}) {
      auto id = e->Open(Greedy());
      ASSERT_TRUE(id.ok());
      ASSERT_TRUE(e->Append(*id, RandomTokens(60 + i, 20 + i)).ok());
      (e == engine.get() ? busy : quiet_ids).push_back(*id);
    }
  }
  auto moving = engine->Open(Greedy());
  ASSERT_TRUE(moving.ok());
  ASSERT_TRUE(engine->Append(*moving, RandomTokens(200, 99)).ok());
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(engine->Generate(busy[i], UpTo(120), events.Sink()).ok());
    ASSERT_TRUE(quiet->Generate(quiet_ids[i], UpTo(120), quiet_events.Sink()).ok());
  }
  std::thread mover([&] {
    for (int round = 0; round < 30; ++round) {
      auto st = engine->Capture(*moving);
      ASSERT_TRUE(st.ok()) << st.status().ToString();
      ASSERT_TRUE(engine->CloseIfUnchanged(*moving, st->revision).ok());
      ASSERT_TRUE(engine->Restore(*st).ok());
    }
  });
  for (int i = 0; i < 4; ++i) {
    events.WaitDone(busy[i]);
    quiet_events.WaitDone(quiet_ids[i]);
    EXPECT_EQ(events.Tokens(busy[i]), quiet_events.Tokens(quiet_ids[i])) << "session " << i;
  }
  mover.join();
  EXPECT_TRUE(engine->Get(*moving).ok());
}

}  // namespace
}  // namespace streamd
