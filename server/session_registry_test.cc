// SessionRegistry over a small synthetic engine: one stream per session, detach/resume, close
// notifying the attached owner, the idle reaper.
#include "server/session_registry.h"

#include <gtest/gtest.h>

#include "engine/model/synthetic_model.h"

namespace streamd::server {
namespace {

std::unique_ptr<Engine> MakeEngine() {
  SyntheticModelSpec spec;
  spec.with_vocab = true;
  spec.vocab_size = 300;
  auto model = MakeSyntheticModel(spec);
  EXPECT_TRUE(model.ok());
  auto vocab = tokenizer::Tokenizer::FromGguf((*model)->file());
  EXPECT_TRUE(vocab.ok());
  EngineConfig config;
  config.pool_bytes = 16 << 20;
  config.max_chunk = 32;
  config.threads = 1;
  auto engine = Engine::Create(std::move(model).value(), std::move(vocab).value(), config);
  EXPECT_TRUE(engine.ok());
  return std::move(engine).value();
}

struct FakeOwner : SessionOwner {
  void OnSessionClosed(SessionId id, const Status& why) override {
    closed_id = id;
    reason = why.message();
  }
  SessionId closed_id;
  std::string reason;
};

SessionOptions Small() {
  SessionOptions o;
  o.window = 32;
  return o;
}

TEST(SessionRegistryTest, OneOwnerAtATimeAndResumeAfterDetach) {
  auto engine = MakeEngine();
  SessionRegistry registry(*engine, std::chrono::minutes(10));
  auto a = std::make_shared<FakeOwner>();
  auto b = std::make_shared<FakeOwner>();
  auto s = registry.Open(Small(), a);
  ASSERT_TRUE(s.ok());
  const SessionId id = (*s)->id;
  auto second = registry.Attach(id, b);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  registry.Detach(*s);
  auto resumed = registry.Attach(id, b);
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(resumed->get(), s->get());  // the same session, state and all
  const SessionId unknown = SessionId::Random();
  const Status not_found = registry.Attach(unknown, a).status();
  EXPECT_EQ(not_found.code(), StatusCode::kNotFound);
  EXPECT_NE(not_found.message().find("session " + unknown.ToString() + " does not exist"),
            std::string::npos)
      << not_found.message();
}

TEST(SessionRegistryTest, CloseTellsTheAttachedOwnerButNotTheCaller) {
  auto engine = MakeEngine();
  SessionRegistry registry(*engine, std::chrono::minutes(10));
  auto owner = std::make_shared<FakeOwner>();
  auto s = registry.Open(Small(), owner);
  ASSERT_TRUE(s.ok());
  const SessionId id = (*s)->id;
  ASSERT_TRUE(registry.Close(id, CancelledError("closed by CloseSession")).ok());
  EXPECT_EQ(owner->closed_id, id);
  EXPECT_EQ(owner->reason, "closed by CloseSession");
  EXPECT_FALSE(engine->Get(id).ok());  // blocks freed
  EXPECT_EQ(registry.Close(id, CancelledError("again")).code(), StatusCode::kNotFound);

  auto self = std::make_shared<FakeOwner>();
  auto t = registry.Open(Small(), self);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(registry.Close((*t)->id, CancelledError("by its stream"), self.get()).ok());
  EXPECT_FALSE(self->closed_id.valid());  // the caller is not told
}

TEST(SessionRegistryTest, ReaperClosesOnlySessionsDetachedPastTheTimeout) {
  auto engine = MakeEngine();
  SessionRegistry registry(*engine, std::chrono::seconds(60));
  auto owner = std::make_shared<FakeOwner>();
  auto attached = registry.Open(Small(), owner);
  auto detached = registry.Open(Small(), owner);
  ASSERT_TRUE(attached.ok() && detached.ok());
  registry.Detach(*detached);
  const Clock::time_point now = Clock::now();
  EXPECT_EQ(registry.ReapIdle(now), 0);  // detached just now
  EXPECT_EQ(registry.ReapIdle(now + std::chrono::seconds(61)), 1);
  EXPECT_EQ(registry.Find((*detached)->id), nullptr);
  EXPECT_NE(registry.Find((*attached)->id), nullptr);
  EXPECT_EQ(registry.All().size(), 1u);

  SessionRegistry never(*engine, std::chrono::milliseconds(0));  // 0 = never
  auto s = never.Open(Small(), owner);
  ASSERT_TRUE(s.ok());
  never.Detach(*s);
  EXPECT_EQ(never.ReapIdle(Clock::now() + std::chrono::hours(1000)), 0);
}

}  // namespace
}  // namespace streamd::server
