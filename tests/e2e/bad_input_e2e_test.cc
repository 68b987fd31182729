// End-to-end: bad input is answered with the right status code and a message naming the field
// and the limit, the offending stream stays usable where the error is recoverable, and another
// session keeps streaming throughout.
#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/e2e/e2e_util.h"
#include "tests/e2e/shared_daemon_test.h"

namespace streamd::e2e {
namespace {

class BadInputE2eTest : public SharedDaemonTest {
 protected:
  // A session generating in the background for the whole test: it must not notice.
  void SetUp() override {
    SharedDaemonTest::SetUp();
    if (HasFatalFailure()) return;
    bystander_ = std::thread([this] {
      RawStream s(daemon_->Channel());
      if (!s.Open() || s.Append(TextMsg("Once upon a time").append())) return;
      while (!stop_) {
        s.Write(GenerateMsg(8));
        const Generation g = ReadGeneration(s);
        if (!g.ended || g.done.reason() != v1::FINISH_REASON_LENGTH || g.ids.size() != 8) {
          bystander_failed_ = true;
          return;
        }
        ++bystander_generations_;
      }
      s.Write(CloseMsg());
      if (!s.Finish().ok()) bystander_failed_ = true;
    });
  }
  void TearDown() override {
    // At least one full generation ran beside the bad requests.
    for (int i = 0; i < 600 && bystander_generations_ == 0 && !bystander_failed_; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    stop_ = true;
    if (bystander_.joinable()) bystander_.join();
    EXPECT_FALSE(bystander_failed_) << "the bystander session was disturbed";
    EXPECT_GT(bystander_generations_.load(), 0);
  }

  // The next message is an Error with `code` naming `field`.
  static void ExpectError(RawStream& s, grpc::StatusCode code, const std::string& field,
                          const std::string& text) {
    const v1::Error e = s.ExpectError();
    EXPECT_EQ(e.code(), code) << e.message();
    EXPECT_EQ(e.field(), field) << e.message();
    EXPECT_NE(e.message().find(text), std::string::npos) << e.message();
  }
  // The stream still works: a short generation succeeds.
  static void ExpectUsable(RawStream& s) {
    ASSERT_FALSE(s.Append(TextMsg("Hello").append()));
    ASSERT_TRUE(s.Write(GenerateMsg(2)));
    EXPECT_EQ(ReadGeneration(s).ids.size(), 2u);
  }

  std::thread bystander_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> bystander_failed_{false};
  std::atomic<int> bystander_generations_{0};
};

// A well-formed id that names no session (128 random bits: this one was never handed out).
constexpr char kUnknownId[] = "0123456789abcdef0123456789abcdef";

TEST_F(BadInputE2eTest, UnknownSessionIsNotFound) {
  RawStream s(daemon_->Channel());
  ASSERT_TRUE(s.Write(ResumeMsg(kUnknownId)));
  ExpectError(s, grpc::StatusCode::NOT_FOUND, "resume.session_id",
              std::string(kUnknownId) + " does not exist");
  ASSERT_TRUE(s.Write(TextMsg("no session yet")));
  ExpectError(s, grpc::StatusCode::FAILED_PRECONDITION, "append", "open or resume");
  ASSERT_TRUE(s.Open());
  ExpectUsable(s);
  ASSERT_TRUE(s.Write(CloseMsg()));
  EXPECT_TRUE(s.Finish().ok());

  auto stub = v1::Streamd::NewStub(daemon_->Channel());
  grpc::ClientContext ctx;
  v1::CloseSessionRequest req;
  req.set_session_id(kUnknownId);
  v1::CloseSessionResponse resp;
  EXPECT_EQ(stub->CloseSession(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

// A malformed id is INVALID_ARGUMENT naming the field, never NOT_FOUND: on the stream (which
// stays usable) and in the unary calls. Either case of hex digits is accepted.
TEST_F(BadInputE2eTest, MalformedSessionIdIsInvalidArgument) {
  RawStream s(daemon_->Channel());
  const std::vector<std::pair<std::string, std::string>> malformed = {
      {"", "it has 0 bytes"},
      {"987654321", "\"987654321\" is not a session id (32 hex digits; it has 9 bytes)"},
      {std::string(33, 'a'), "it has 33 bytes"},
      {"0123456789abcdef0123456789abcdeg", "character 31"},
      {" 123456789abcdef0123456789abcdef", "character 0"},
      {std::string(32, '0'), "all-zero"},
      // Echoed cut at 40 bytes, inside the two-byte character: the Error must stay valid UTF-8.
      {std::string(39, 'a') + "\xc3\xa9", "\\xc3...\" is not a session id"},
  };
  for (const auto& [id, text] : malformed) {
    SCOPED_TRACE("session_id \"" + id + "\"");
    ASSERT_TRUE(s.Write(ResumeMsg(id)));
    ExpectError(s, grpc::StatusCode::INVALID_ARGUMENT, "resume.session_id", text);
  }
  auto opened = s.Open();
  ASSERT_TRUE(opened);
  ExpectUsable(s);

  auto stub = v1::Streamd::NewStub(daemon_->Channel());
  const auto get = [&](const std::string& id, v1::SessionInfo* info) {
    grpc::ClientContext ctx;
    v1::GetSessionRequest req;
    req.set_session_id(id);
    return stub->GetSession(&ctx, req, info);
  };
  v1::SessionInfo info;
  grpc::Status st = get("987654321", &info);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(st.error_message().rfind("session_id \"987654321\" is not a session id", 0), 0u)
      << st.error_message();
  st = get(kUnknownId, &info);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(st.error_message().rfind("session_id: session " + std::string(kUnknownId), 0), 0u)
      << st.error_message();
  std::string upper = opened->session_id();
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  ASSERT_TRUE(get(upper, &info).ok());
  EXPECT_EQ(info.session_id(), opened->session_id());  // answered in lower case
  {
    grpc::ClientContext ctx;
    v1::CloseSessionRequest req;
    req.set_session_id(std::string(32, '0'));
    v1::CloseSessionResponse resp;
    st = stub->CloseSession(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("session_id is the all-zero id"), std::string::npos)
        << st.error_message();
  }
  ASSERT_TRUE(get(opened->session_id(), &info).ok());  // nothing was closed
  ASSERT_TRUE(s.Write(CloseMsg()));
  EXPECT_TRUE(s.Finish().ok());
}

TEST_F(BadInputE2eTest, TokensAndTextAreChecked) {
  RawStream s(daemon_->Channel());
  ASSERT_TRUE(s.Open());
  ASSERT_TRUE(s.Write(TokensMsg({1, 2, 49152})));
  ExpectError(s, grpc::StatusCode::INVALID_ARGUMENT, "append.tokens[2]", "[0, 49152)");
  ASSERT_TRUE(s.Write(TokensMsg({-5})));
  ExpectError(s, grpc::StatusCode::INVALID_ARGUMENT, "append.tokens[0]", "-5");
  ASSERT_TRUE(s.Write(TextMsg("caf\xc3(\xa9")));
  ExpectError(s, grpc::StatusCode::INVALID_ARGUMENT, "append.text", "not valid UTF-8");
  ASSERT_TRUE(s.Write(TextMsg("")));
  ExpectError(s, grpc::StatusCode::INVALID_ARGUMENT, "append", "both empty");
  // Over max_append_bytes (1 MiB) but under the 4 MiB message limit: recoverable.
  ASSERT_TRUE(s.Write(TextMsg(std::string((1 << 20) + 1, 'a'))));
  ExpectError(s, grpc::StatusCode::INVALID_ARGUMENT, "append.text", "over the limit of 1048576");
  ExpectUsable(s);
  ASSERT_TRUE(s.Write(CloseMsg()));
  EXPECT_TRUE(s.Finish().ok());
}

TEST_F(BadInputE2eTest, GenerateAndSamplingRangesAreChecked) {
  RawStream s(daemon_->Channel());
  ASSERT_TRUE(s.Open());
  ASSERT_FALSE(s.Append(TextMsg("Hello").append()));
  ASSERT_TRUE(s.Write(GenerateMsg(0)));
  ExpectError(s, grpc::StatusCode::INVALID_ARGUMENT, "generate.max_tokens", "[1, 4096]");
  ASSERT_TRUE(s.Write(GenerateMsg(5000)));
  ExpectError(s, grpc::StatusCode::INVALID_ARGUMENT, "generate.max_tokens", "[1, 4096]");
  v1::ClientMessage bad = GenerateMsg(4, false, "r9");
  bad.mutable_generate()->mutable_sampling()->set_temperature(-1.0f);
  ASSERT_TRUE(s.Write(bad));
  const v1::Error e = s.ExpectError();
  EXPECT_EQ(e.field(), "generate.sampling.temperature");
  EXPECT_EQ(e.request_id(), "r9");
  bad.mutable_generate()->mutable_sampling()->set_temperature(0.5f);
  bad.mutable_generate()->mutable_sampling()->set_top_p(0.0f);
  ASSERT_TRUE(s.Write(bad));
  ExpectError(s, grpc::StatusCode::INVALID_ARGUMENT, "generate.sampling.top_p", "(0, 1]");
  bad.mutable_generate()->mutable_sampling()->set_top_p(0.9f);
  bad.mutable_generate()->mutable_sampling()->set_top_k(100000);
  ASSERT_TRUE(s.Write(bad));
  ExpectError(s, grpc::StatusCode::INVALID_ARGUMENT, "generate.sampling.top_k", "49152");
  ExpectUsable(s);
  ASSERT_TRUE(s.Write(CloseMsg()));
  EXPECT_TRUE(s.Finish().ok());
}

TEST_F(BadInputE2eTest, SinksAndWindowOverTheLimits) {
  RawStream s(daemon_->Channel());
  v1::ClientMessage open;
  open.mutable_open()->set_cache_mode(v1::CACHE_MODE_SINK);
  open.mutable_open()->set_sinks(65);
  ASSERT_TRUE(s.Write(open));
  ExpectError(s, grpc::StatusCode::INVALID_ARGUMENT, "open.sinks", "[0, 64]");
  open.mutable_open()->set_sinks(4);
  open.mutable_open()->set_window(1 << 20);
  ASSERT_TRUE(s.Write(open));
  ExpectError(s, grpc::StatusCode::INVALID_ARGUMENT, "open.window", "is outside [1, ");
  open.mutable_open()->set_window(0);
  ASSERT_TRUE(s.Write(open));
  ExpectError(s, grpc::StatusCode::INVALID_ARGUMENT, "open.window", "is outside [1, ");
  open.mutable_open()->set_window(64);
  open.mutable_open()->mutable_sampling()->set_min_p(2.0f);
  ASSERT_TRUE(s.Write(open));
  ExpectError(s, grpc::StatusCode::INVALID_ARGUMENT, "open.sampling.min_p", "[0, 1]");
  open.mutable_open()->clear_sampling();
  auto opened = s.Open(open.open());
  ASSERT_TRUE(opened);
  EXPECT_EQ(opened->settings().window(), 64);
  ASSERT_TRUE(s.Write(OpenMsg()));
  ExpectError(s, grpc::StatusCode::FAILED_PRECONDITION, "open", "already drives session");
  ExpectUsable(s);
  ASSERT_TRUE(s.Write(CloseMsg()));
  EXPECT_TRUE(s.Finish().ok());
}

TEST_F(BadInputE2eTest, OversizedMessageEndsOnlyItsStream) {
  RawStream s(daemon_->Channel());
  ASSERT_TRUE(s.Open());
  s.Write(TextMsg(std::string(5 << 20, 'a')));  // over the 4 MiB message limit
  const grpc::Status end = s.Finish();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << end.error_message();
  // A new stream works.
  RawStream t(daemon_->Channel());
  ASSERT_TRUE(t.Open());
  ExpectUsable(t);
  ASSERT_TRUE(t.Write(CloseMsg()));
  EXPECT_TRUE(t.Finish().ok());
}

TEST_F(BadInputE2eTest, MessageThatDoesNotParseEndsTheStreamWithInvalidArgument) {
  BytesStream s(daemon_->Channel());
  ASSERT_TRUE(s.Write(kUnparsableMessage));
  const grpc::Status end = s.Finish();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << end.error_message();
  EXPECT_NE(end.error_message().find("do not parse as a streamd.v1.ClientMessage"),
            std::string::npos)
      << end.error_message();
}

TEST_F(BadInputE2eTest, MessageThatDoesNotParseLosesNoSession) {
  // A session with context, then garbage: the stream ends with INVALID_ARGUMENT, and the
  // session is detached with its context, not lost.
  BytesStream s(daemon_->Channel());
  ASSERT_TRUE(s.Write(OpenMsg()));
  std::optional<v1::ServerMessage> opened = s.Read();
  ASSERT_TRUE(opened && opened->has_opened());
  const std::string id = opened->opened().session_id();
  ASSERT_TRUE(s.Write(TextMsg("The garbage that follows must not cost this context.")));
  std::optional<v1::ServerMessage> state = s.Read();
  ASSERT_TRUE(state && state->has_cache_state());
  const int64_t seen = state->cache_state().tokens_seen();
  ASSERT_GT(seen, 0);
  ASSERT_TRUE(s.Write(kUnparsableMessage));
  EXPECT_EQ(s.Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  RawStream t(daemon_->Channel());
  std::optional<v1::ServerMessage> resumed;
  for (int attempt = 0; attempt < 50; ++attempt) {  // detached once the first stream is done
    ASSERT_TRUE(t.Write(ResumeMsg(id)));
    resumed = t.Read();
    ASSERT_TRUE(resumed);
    if (resumed->has_opened()) break;
    ASSERT_EQ(resumed->error().code(), grpc::StatusCode::FAILED_PRECONDITION)
        << resumed->error().message();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(resumed->has_opened()) << resumed->DebugString();
  EXPECT_EQ(resumed->opened().cache().tokens_seen(), seen);
  ASSERT_TRUE(t.Write(CloseMsg()));
  EXPECT_TRUE(t.Finish().ok());
}

TEST_F(BadInputE2eTest, RequestIdThatIsNotUtf8IsNamed) {
  RawStream s(daemon_->Channel());
  ASSERT_TRUE(s.Open());
  ASSERT_FALSE(s.Append(TextMsg("Hello").append()));
  // Not UTF-8: answered with an Error naming the field (not echoed: Error.request_id is a
  // string), and the stream goes on.
  ASSERT_TRUE(s.Write(GenerateMsg(4, true, std::string("r\xff\xfe", 3))));
  const v1::Error e = s.ExpectError();
  EXPECT_EQ(e.code(), grpc::StatusCode::INVALID_ARGUMENT) << e.message();
  EXPECT_EQ(e.field(), "generate.request_id") << e.message();
  EXPECT_TRUE(e.request_id().empty());
  v1::ClientMessage cancel = CancelMsg();
  cancel.mutable_cancel()->set_request_id(std::string("\xc3\x28", 2));
  ASSERT_TRUE(s.Write(cancel));
  const v1::Error c = s.ExpectError();
  EXPECT_EQ(c.code(), grpc::StatusCode::INVALID_ARGUMENT) << c.message();
  EXPECT_EQ(c.field(), "cancel.request_id") << c.message();
  ExpectUsable(s);
  ASSERT_TRUE(s.Write(CloseMsg()));
  EXPECT_TRUE(s.Finish().ok());
}

TEST_F(BadInputE2eTest, SessionIdThatIsNotUtf8IsInvalidArgument) {
  std::unique_ptr<v1::Streamd::Stub> stub = v1::Streamd::NewStub(daemon_->Channel());
  grpc::ClientContext context;
  v1::GetSessionRequest request;
  request.set_session_id(std::string(32, '\xff'));
  v1::SessionInfo info;
  const grpc::Status status = stub->GetSession(&context, request, &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("session_id"), std::string::npos);
  RawStream s(daemon_->Channel());
  ASSERT_TRUE(s.Write(ResumeMsg(std::string("\xe2\x82", 2))));
  const v1::Error e = s.ExpectError();
  EXPECT_EQ(e.code(), grpc::StatusCode::INVALID_ARGUMENT) << e.message();
  EXPECT_EQ(e.field(), "resume.session_id") << e.message();
}

}  // namespace
}  // namespace streamd::e2e
