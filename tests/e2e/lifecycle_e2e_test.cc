// End-to-end: the daemon's life cycle, each test with its own `streamd serve`: graceful
// shutdown (SIGTERM: health NOT_SERVING, running generations finish or are cancelled after the
// grace period, exit 0), a malformed config, the idle timeout, a client too slow to read, a
// restart (session ids are never handed out twice).
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/e2e/daemon_process.h"
#include "tests/e2e/durability_util.h"
#include "tests/e2e/e2e_util.h"

namespace streamd::e2e {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

std::vector<std::string> With(std::vector<std::string> extra) {
  std::vector<std::string> flags = kSharedServerFlags;
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

// The health status, or UNKNOWN when the call fails.
HealthCheckResponse::ServingStatus Health(grpc::health::v1::Health::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  HealthCheckResponse response;
  if (!stub.Check(&ctx, HealthCheckRequest(), &response).ok()) return HealthCheckResponse::UNKNOWN;
  return response.status();
}

TEST(LifecycleE2eTest, SigtermLetsTheRunningGenerationFinish) {
  // A grace period far beyond what the generation needs, even on a loaded 2-core machine. The
  // generation is long enough (hundreds of milliseconds at least) for the drain to be seen: the
  // daemon is gone as soon as it ends, and 8 tokens once ended before a health check got there.
  constexpr int kTokens = 128;
  auto d = DaemonProcess::Start(With({"--server.shutdown_grace=300s"}));
  ASSERT_NE(d, nullptr);
  // Connected before the SIGTERM, so that the checks during the drain need no new connection.
  auto health = grpc::health::v1::Health::NewStub(d->Channel());
  EXPECT_EQ(Health(*health), HealthCheckResponse::SERVING);
  RawStream s(d->Channel());
  ASSERT_TRUE(s.Open());
  ASSERT_FALSE(s.Append(TextMsg("Once upon a time").append()));
  ASSERT_TRUE(s.Write(GenerateMsg(kTokens)));
  HealthCheckResponse::ServingStatus during = HealthCheckResponse::UNKNOWN;
  const Generation g = ReadGeneration(s, [&] {
    d->Terminate();
    // Draining: health says NOT_SERVING; a new session is refused.
    for (int i = 0; i < 100 && during != HealthCheckResponse::NOT_SERVING; ++i) {
      during = Health(*health);
      if (during != HealthCheckResponse::NOT_SERVING) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  });
  EXPECT_EQ(during, HealthCheckResponse::NOT_SERVING);
  ASSERT_TRUE(g.ended);
  EXPECT_EQ(g.done.reason(), v1::FINISH_REASON_LENGTH);  // finished within the grace period
  EXPECT_EQ(g.ids.size(), static_cast<size_t>(kTokens));
  const grpc::Status end = s.Finish();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(end.error_message().find("shutting down"), std::string::npos);
  EXPECT_EQ(d->Wait(std::chrono::seconds(360)), 0) << d->Stderr();
}

TEST(LifecycleE2eTest, SigtermCancelsGenerationsAfterTheGracePeriod) {
  auto d = DaemonProcess::Start(With({"--server.shutdown_grace=1s"}));
  ASSERT_NE(d, nullptr);
  RawStream s(d->Channel());
  ASSERT_TRUE(s.Open());
  ASSERT_FALSE(s.Append(TextMsg("Once upon a time").append()));
  ASSERT_TRUE(s.Write(GenerateMsg(4000)));
  const Generation g = ReadGeneration(s, [&] { d->Terminate(); });
  ASSERT_TRUE(g.ended);
  EXPECT_EQ(g.done.reason(), v1::FINISH_REASON_CANCELLED);
  EXPECT_EQ(g.done.error().code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(g.done.error().message().find("grace period of 1.0 s"), std::string::npos)
      << g.done.error().message();
  EXPECT_EQ(s.Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(d->Wait(std::chrono::seconds(60)), 0) << d->Stderr();
}

// A daemon that dies says where: the failure signal handler prints the stack of the thread the
// signal hit, then the process ends (here by a SIGSEGV from outside, as a wild pointer would).
TEST(LifecycleE2eTest, ADaemonThatCrashesPrintsWhereBeforeItEnds) {
  auto d = DaemonProcess::Start();
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(::kill(d->pid(), SIGSEGV), 0);
  EXPECT_EQ(d->Wait(std::chrono::seconds(30)), -1);  // ended by the signal, not an exit code
  EXPECT_EQ(d->pid(), -1) << "the daemon did not end after SIGSEGV";
  const std::string log = d->Stderr();
  EXPECT_NE(log.find("*** SIGSEGV received at time="), std::string::npos) << log;
  EXPECT_NE(log.find("    @ "), std::string::npos) << "no stack frames: " << log;
}

TEST(LifecycleE2eTest, MalformedConfigIsRejectedWithTheKey) {
  const TempDir tmp;
  const std::string path = tmp.path() + "/streamd_bad.yaml";
  {
    std::ofstream out(path);
    out << "server:\n  listen_address: [unclosed\n";
  }
  RunResult r = RunStreamd({"serve", "--config", path});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("config"), std::string::npos) << r.err;
  {
    std::ofstream out(path);
    out << "sessions:\n  default_window: 0\n";
  }
  r = RunStreamd({"serve", "--config", path});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("sessions.default_window"), std::string::npos) << r.err;
  r = RunStreamd({"serve", "--engine.thread=4"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("engine.thread"), std::string::npos) << r.err;
  r = RunStreamd({"serve", "--config", "/nonexistent/streamd.yaml"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/streamd.yaml"), std::string::npos) << r.err;
  std::remove(path.c_str());
}

TEST(LifecycleE2eTest, DetachedSessionsAreClosedAfterTheIdleTimeout) {
  auto d = DaemonProcess::Start(With({"--sessions.idle_timeout=1s"}));
  ASSERT_NE(d, nullptr);
  std::string id;
  {
    RawStream s(d->Channel());
    auto opened = s.Open();
    ASSERT_TRUE(opened);
    id = opened->session_id();
    s.WritesDone();  // half-close: the stream ends, the session is detached
    EXPECT_TRUE(s.Finish().ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  RawStream r(d->Channel());
  ASSERT_TRUE(r.Write(ResumeMsg(id)));
  const v1::Error e = r.ExpectError();
  EXPECT_EQ(e.code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(e.message().find("idle timeout of 1 s"), std::string::npos) << e.message();
  r.WritesDone();
  EXPECT_TRUE(r.Finish().ok());
  d->Terminate();
  EXPECT_EQ(d->Wait(std::chrono::seconds(60)), 0);
}

TEST(LifecycleE2eTest, AClientThatStopsReadingIsCutOffAlone) {
  auto d = DaemonProcess::Start(With({"--sessions.max_queued_tokens=8"}));
  ASSERT_NE(d, nullptr);
  // A tiny HTTP/2 window, so the server's writes stall as soon as this client stops reading.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  RawStream slow(d->Channel(args));
  auto opened = slow.Open();
  ASSERT_TRUE(opened);
  ASSERT_FALSE(slow.Append(TextMsg("Once upon a time").append()));
  v1::ClientMessage generate = GenerateMsg(4000);
  ASSERT_TRUE(slow.Write(generate));
  // Meanwhile a normal session keeps pace.
  RawStream fast(d->Channel());
  ASSERT_TRUE(fast.Open());
  ASSERT_FALSE(fast.Append(TextMsg("Hello").append()));
  ASSERT_TRUE(fast.Write(GenerateMsg(16)));
  const Generation f = ReadGeneration(fast);
  EXPECT_EQ(f.ids.size(), 16u);
  // The slow generation can only end by being cut off (4000 tokens take minutes here).
  auto stub = v1::Streamd::NewStub(d->Channel());
  bool generating = true;
  for (int i = 0; i < 1200 && generating; ++i) {
    grpc::ClientContext ctx;
    v1::GetSessionRequest req;
    req.set_session_id(opened->session_id());
    v1::SessionInfo info;
    ASSERT_TRUE(stub->GetSession(&ctx, req, &info).ok());
    generating = info.generating();
    if (generating) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_FALSE(generating) << "the slow client was never cut off";
  // Now read the slow stream: what was queued, then the end of the generation.
  const Generation g = ReadGeneration(slow);
  ASSERT_TRUE(g.ended);
  EXPECT_EQ(g.done.reason(), v1::FINISH_REASON_CANCELLED);
  EXPECT_EQ(g.done.error().code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(g.done.error().message().find("client too slow"), std::string::npos);
  EXPECT_LT(g.done.usage().output_tokens(), 4000);
  // The session itself is fine.
  ASSERT_TRUE(slow.Write(GenerateMsg(2)));
  EXPECT_EQ(ReadGeneration(slow).ids.size(), 2u);
  slow.Write(CloseMsg());
  fast.Write(CloseMsg());
  EXPECT_TRUE(slow.Finish().ok());
  EXPECT_TRUE(fast.Finish().ok());
  d->Terminate();
  EXPECT_EQ(d->Wait(std::chrono::seconds(60)), 0);
}

// n ordinary token ids (no specials), so contexts of different lengths are easy to make.
std::vector<int32_t> OrdinaryTokens(int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(1000 + i);
  return ids;
}

// A daemon restarted on the same port hands out none of its predecessor's ids, and a Resume of
// an old id never attaches to another session. Today the old sessions are gone with the old
// process (NOT_FOUND); once sessions are restored from snapshots a Resume may succeed, but only
// as the same id with that session's own context. Every session gets a context length of its
// own, so an attach to the wrong one would show.
TEST(LifecycleE2eTest, ARestartedDaemonNeverReusesOrAttachesAnEarlierId) {
  constexpr int kSessions = 5;
  std::map<std::string, int64_t> before;  // id -> tokens_seen, in the first process
  int port = 0;
  {
    auto first = DaemonProcess::Start(With({}));
    ASSERT_NE(first, nullptr);
    port = first->port();
    for (int i = 0; i < kSessions; ++i) {
      RawStream s(first->Channel());
      auto opened = s.Open();
      ASSERT_TRUE(opened);
      ASSERT_TRUE(IsSessionId(opened->session_id())) << opened->session_id();
      v1::CacheState state;
      ASSERT_FALSE(s.Append(TokensMsg(OrdinaryTokens(3 + i)).append(), &state));
      before[opened->session_id()] = state.tokens_seen();
      s.WritesDone();  // the session stays open, detached, resumable
      EXPECT_TRUE(s.Finish().ok());
    }
    ASSERT_EQ(before.size(), static_cast<size_t>(kSessions)) << "the first process repeated an id";
    first->Terminate();
    ASSERT_EQ(first->Wait(std::chrono::seconds(60)), 0) << first->Stderr();
  }

  auto second =
      DaemonProcess::Start(With({"--server.listen_address=127.0.0.1:" + std::to_string(port)}));
  ASSERT_NE(second, nullptr);
  ASSERT_EQ(second->port(), port);
  // New sessions, each attached to a stream of its own, with contexts unlike any old one's.
  std::map<std::string, int64_t> after;
  std::vector<std::unique_ptr<RawStream>> streams;
  for (int i = 0; i < kSessions; ++i) {
    streams.push_back(std::make_unique<RawStream>(second->Channel()));
    auto opened = streams.back()->Open();
    ASSERT_TRUE(opened);
    ASSERT_TRUE(IsSessionId(opened->session_id())) << opened->session_id();
    EXPECT_EQ(before.count(opened->session_id()), 0u)
        << "id " << opened->session_id() << " was handed out before the restart";
    v1::CacheState state;
    ASSERT_FALSE(streams.back()->Append(TokensMsg(OrdinaryTokens(20 + i)).append(), &state));
    after[opened->session_id()] = state.tokens_seen();
  }
  ASSERT_EQ(after.size(), static_cast<size_t>(kSessions)) << "the second process repeated an id";

  for (const auto& [id, seen] : before) {
    SCOPED_TRACE("resume of " + id);
    RawStream r(second->Channel());
    ASSERT_TRUE(r.Write(ResumeMsg(id)));
    auto reply = r.Read();
    ASSERT_TRUE(reply);
    if (reply->has_opened()) {  // a restored session: the same one, never another
      EXPECT_EQ(reply->opened().session_id(), id);
      EXPECT_EQ(after.count(reply->opened().session_id()), 0u);
      EXPECT_EQ(reply->opened().cache().tokens_seen(), seen);
    } else {
      // NOT_FOUND, not FAILED_PRECONDITION: no new (attached) session answers to the old id.
      ASSERT_TRUE(reply->has_error()) << reply->ShortDebugString();
      EXPECT_EQ(reply->error().code(), grpc::StatusCode::NOT_FOUND) << reply->error().message();
      EXPECT_EQ(reply->error().field(), "resume.session_id");
    }
    r.WritesDone();
    EXPECT_TRUE(r.Finish().ok());
  }
  // The new sessions are untouched: attached to their own streams, their contexts unchanged.
  auto stub = v1::Streamd::NewStub(second->Channel());
  grpc::ClientContext ctx;
  v1::ListSessionsResponse list;
  ASSERT_TRUE(stub->ListSessions(&ctx, {}, &list).ok());
  int found = 0;
  for (const v1::SessionInfo& info : list.sessions()) {
    if (auto it = after.find(info.session_id()); it != after.end()) {
      ++found;
      EXPECT_TRUE(info.attached()) << info.session_id();
      EXPECT_EQ(info.cache().tokens_seen(), it->second) << info.session_id();
    } else {
      EXPECT_EQ(before.count(info.session_id()), 1u) << "unknown session " << info.session_id();
    }
  }
  EXPECT_EQ(found, kSessions);
  for (auto& s : streams) {
    ASSERT_TRUE(s->Write(CloseMsg()));
    EXPECT_TRUE(s->Finish().ok());
  }
  second->Terminate();
  EXPECT_EQ(second->Wait(std::chrono::seconds(60)), 0) << second->Stderr();
}

}  // namespace
}  // namespace streamd::e2e
