// End-to-end: the real `streamd serve` with the default model, driven over gRPC. The session
// protocol: open, append, generate and stream, cancel, barge-in, resume, one stream per session,
// many sessions at once, the unary calls.
#include <gtest/gtest.h>

#include <thread>

#include "tests/e2e/e2e_util.h"
#include "tests/e2e/shared_daemon_test.h"

namespace streamd::e2e {
namespace {

class SessionE2eTest : public SharedDaemonTest {
 protected:
  static std::shared_ptr<grpc::Channel> Channel() { return daemon_->Channel(); }
};

constexpr char kQuestion[] = "What is the capital of France?";

TEST_F(SessionE2eTest, ChatGenerationMatchesTheCliGreedyContinuation) {
  RawStream s(Channel());
  auto opened = s.Open();
  ASSERT_TRUE(opened);
  EXPECT_TRUE(IsSessionId(opened->session_id())) << opened->session_id();
  EXPECT_EQ(opened->model().vocab_size(), 49152);
  EXPECT_EQ(opened->model().chat_template(), "chatml");
  EXPECT_GT(opened->model().context_length(), 0);
  EXPECT_EQ(opened->settings().cache_mode(), v1::CACHE_MODE_SINK);
  EXPECT_EQ(opened->settings().window(), 128);
  EXPECT_EQ(opened->limits().max_sinks(), 64);
  EXPECT_EQ(opened->limits().idle_timeout_s(), 7 * 24 * 3600);
  EXPECT_TRUE(opened->limits().persistent());
  EXPECT_EQ(opened->limits().snapshot_interval_ms(), 2000);
  EXPECT_EQ(opened->limits().offload_after_s(), 600);
  v1::CacheState state;
  ASSERT_FALSE(s.Append(TextMsg(kQuestion, v1::CHAT_ROLE_USER).append(), &state));
  EXPECT_GT(state.tokens_seen(), 10);
  ASSERT_TRUE(s.Write(GenerateMsg(24, true, "golden")));
  const Generation g = ReadGeneration(s);
  ASSERT_TRUE(g.ended);
  EXPECT_EQ(g.done.request_id(), "golden");
  EXPECT_TRUE(g.done.reason() == v1::FINISH_REASON_END_OF_GENERATION ||
              g.done.reason() == v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(g.done.usage().output_tokens(),
            static_cast<int64_t>(g.ids.size()) +
                (g.done.reason() == v1::FINISH_REASON_END_OF_GENERATION ? 1 : 0));
  EXPECT_GT(g.done.usage().time_to_first_token_s(), 0.0);
  // The same prompt through `streamd generate --chat` (no server, no batching).
  const RunResult cli = RunStreamd(
      {"generate", "--model", ModelPath(), "--chat", "-t", "0", "-n", "24", "--prompt", kQuestion});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_EQ(g.text + "\n", cli.out);
  EXPECT_NE(g.text.find("Paris"), std::string::npos) << g.text;
  ASSERT_TRUE(s.Write(CloseMsg()));
  EXPECT_TRUE(s.Finish().ok());
}

TEST_F(SessionE2eTest, CancelEndsTheGenerationNotTheSession) {
  RawStream s(Channel());
  ASSERT_TRUE(s.Open());
  ASSERT_FALSE(s.Append(TextMsg("Once upon a time").append()));
  ASSERT_TRUE(s.Write(GenerateMsg(400, true, "long")));
  const Generation g = ReadGeneration(s, [&] { s.Write(CancelMsg()); });
  ASSERT_TRUE(g.ended);
  EXPECT_EQ(g.done.reason(), v1::FINISH_REASON_CANCELLED);
  EXPECT_LT(g.done.usage().output_tokens(), 400);
  EXPECT_FALSE(g.done.has_error());
  // The session goes on.
  ASSERT_TRUE(s.Write(GenerateMsg(3)));
  const Generation next = ReadGeneration(s);
  EXPECT_EQ(next.done.reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(next.ids.size(), 3u);
  ASSERT_TRUE(s.Write(CloseMsg()));
  EXPECT_TRUE(s.Finish().ok());
}

TEST_F(SessionE2eTest, AppendDuringAGenerationBargesIn) {
  RawStream s(Channel());
  ASSERT_TRUE(s.Open());
  ASSERT_FALSE(s.Append(TextMsg("Tell me a long story.", v1::CHAT_ROLE_USER).append()));
  ASSERT_TRUE(s.Write(GenerateMsg(400, true, "first")));
  bool appended = false;
  const Generation g = ReadGeneration(
      s, [&] { appended = s.Write(TextMsg("Stop. Just say hello.", v1::CHAT_ROLE_USER)); });
  ASSERT_TRUE(appended);
  EXPECT_EQ(g.done.reason(), v1::FINISH_REASON_CANCELLED);
  EXPECT_EQ(g.done.request_id(), "first");
  // The append's CacheState, then a new answer.
  auto state = s.Read();
  ASSERT_TRUE(state && state->has_cache_state()) << (state ? state->ShortDebugString() : "");
  ASSERT_TRUE(s.Write(GenerateMsg(8, true, "second")));
  const Generation next = ReadGeneration(s);
  EXPECT_EQ(next.done.request_id(), "second");
  EXPECT_FALSE(next.ids.empty());
  ASSERT_TRUE(s.Write(CloseMsg()));
  EXPECT_TRUE(s.Finish().ok());
}

TEST_F(SessionE2eTest, ResumeAfterDisconnectKeepsTheCache) {
  std::string id;
  v1::CacheState before;
  {
    RawStream s(Channel());
    auto opened = s.Open();
    ASSERT_TRUE(opened);
    id = opened->session_id();
    ASSERT_FALSE(
        s.Append(TextMsg("The quick brown fox jumps over the lazy dog.").append(), &before));
    ASSERT_TRUE(s.Write(GenerateMsg(4)));
    ASSERT_TRUE(ReadGeneration(s).ended);
    s.Cancel();  // the client vanishes without Close
    EXPECT_FALSE(s.Finish().ok());
  }
  // The server notices the cancellation asynchronously: retry briefly.
  std::optional<v1::Opened> resumed;
  for (int attempt = 0; attempt < 50 && !resumed; ++attempt) {
    RawStream probe(Channel());
    ASSERT_TRUE(probe.Write(ResumeMsg(id)));
    auto reply = probe.Read();
    ASSERT_TRUE(reply);
    if (reply->has_opened()) {
      resumed = reply->opened();
      EXPECT_TRUE(resumed->resumed());
      EXPECT_EQ(resumed->session_id(), id);
      EXPECT_EQ(resumed->cache().tokens_seen(), before.tokens_seen() + 4);
      ASSERT_TRUE(probe.Write(GenerateMsg(3)));
      EXPECT_EQ(ReadGeneration(probe).ids.size(), 3u);
      ASSERT_TRUE(probe.Write(CloseMsg()));
      EXPECT_TRUE(probe.Finish().ok());
    } else {
      EXPECT_EQ(reply->error().code(), grpc::StatusCode::FAILED_PRECONDITION);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  EXPECT_TRUE(resumed) << "session " << id << " could not be resumed";
}

TEST_F(SessionE2eTest, OnlyOneStreamDrivesASession) {
  RawStream a(Channel());
  auto opened = a.Open();
  ASSERT_TRUE(opened);
  RawStream b(Channel());
  ASSERT_TRUE(b.Write(ResumeMsg(opened->session_id())));
  const v1::Error e = b.ExpectError();
  EXPECT_EQ(e.code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(e.field(), "resume.session_id");
  EXPECT_NE(e.message().find("attached to another stream"), std::string::npos) << e.message();
  // b's stream is still usable, a's session untouched.
  auto own = b.Open();
  ASSERT_TRUE(own);
  EXPECT_NE(own->session_id(), opened->session_id());
  ASSERT_FALSE(a.Append(TextMsg("Hello").append()));
  ASSERT_TRUE(a.Write(CloseMsg()));
  ASSERT_TRUE(b.Write(CloseMsg()));
  EXPECT_TRUE(a.Finish().ok());
  EXPECT_TRUE(b.Finish().ok());
}

TEST_F(SessionE2eTest, SixteenConcurrentSessionsAgreeOnGreedyOutput) {
  constexpr int kSessions = 16;
  std::vector<Generation> results(kSessions);
  std::vector<std::thread> threads;
  for (int i = 0; i < kSessions; ++i) {
    threads.emplace_back([&, i] {
      RawStream s(Channel());
      if (!s.Open()) return;
      if (s.Append(TextMsg(kQuestion, v1::CHAT_ROLE_USER).append())) return;
      s.Write(GenerateMsg(6, true, "c" + std::to_string(i)));
      results[i] = ReadGeneration(s);
      s.Write(CloseMsg());
      EXPECT_TRUE(s.Finish().ok());
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kSessions; ++i) {
    ASSERT_TRUE(results[i].ended) << "session " << i;
    EXPECT_EQ(results[i].done.request_id(), "c" + std::to_string(i));
    EXPECT_EQ(results[i].ids, results[0].ids) << "session " << i;
  }
}

TEST_F(SessionE2eTest, UnaryCallsListGetAndClose) {
  auto stub = v1::Streamd::NewStub(Channel());
  RawStream s(Channel());
  auto opened = s.Open();
  ASSERT_TRUE(opened);
  const std::string id = opened->session_id();
  ASSERT_FALSE(s.Append(TextMsg("Hello there").append()));
  {
    grpc::ClientContext ctx;
    v1::GetSessionRequest req;
    req.set_session_id(id);
    v1::SessionInfo info;
    ASSERT_TRUE(stub->GetSession(&ctx, req, &info).ok());
    EXPECT_TRUE(info.attached());
    EXPECT_GT(info.cache().tokens_seen(), 0);
  }
  {
    grpc::ClientContext ctx;
    v1::ListSessionsResponse list;
    ASSERT_TRUE(stub->ListSessions(&ctx, {}, &list).ok());
    bool found = false;
    for (const auto& info : list.sessions()) found |= info.session_id() == id;
    EXPECT_TRUE(found);
  }
  {
    grpc::ClientContext ctx;
    v1::ModelInfo info;
    ASSERT_TRUE(stub->GetModelInfo(&ctx, {}, &info).ok());
    EXPECT_EQ(info.vocab_size(), 49152);
  }
  {  // Closing an attached session ends its stream with ABORTED.
    grpc::ClientContext ctx;
    v1::CloseSessionRequest req;
    req.set_session_id(id);
    v1::CloseSessionResponse resp;
    ASSERT_TRUE(stub->CloseSession(&ctx, req, &resp).ok());
    const grpc::Status end = s.Finish();
    EXPECT_EQ(end.error_code(), grpc::StatusCode::ABORTED);
    EXPECT_NE(end.error_message().find("closed by CloseSession"), std::string::npos);
  }
  {
    grpc::ClientContext ctx;
    v1::GetSessionRequest req;
    req.set_session_id(id);
    v1::SessionInfo info;
    const grpc::Status st = stub->GetSession(&ctx, req, &info);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_NE(st.error_message().find("session_id"), std::string::npos);
  }
}

TEST_F(SessionE2eTest, DeadlineEndsTheStreamAndTheSessionStaysResumable) {
  std::string id;
  {
    RawStream s(Channel(), std::chrono::seconds(3));
    auto opened = s.Open();
    ASSERT_TRUE(opened);
    id = opened->session_id();
    ASSERT_FALSE(s.Append(TextMsg("Once upon a time").append()));
    ASSERT_TRUE(s.Write(GenerateMsg(4000)));
    EXPECT_EQ(s.Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  for (int attempt = 0; attempt < 50; ++attempt) {
    RawStream probe(Channel());
    ASSERT_TRUE(probe.Write(ResumeMsg(id)));
    auto reply = probe.Read();
    ASSERT_TRUE(reply);
    if (reply->has_opened()) {
      ASSERT_TRUE(probe.Write(CloseMsg()));
      EXPECT_TRUE(probe.Finish().ok());
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "session " << id << " was not resumable after the deadline";
}

}  // namespace
}  // namespace streamd::e2e
