// End-to-end: the transport holds against clients that misbehave. A stream that never opens a
// session is ended; Opens waiting for a full pool hold up nobody else's messages (the
// reactions never wait); sessions abandoned by a client do not lock the next one out.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/daemon_process.h"
#include "tests/e2e/e2e_util.h"

namespace streamd::e2e {
namespace {

using std::chrono::steady_clock;
using namespace std::chrono_literals;

// A KV pool that holds the prefill headroom and about one session of kWindow tokens; a second
// such session does not fit (each test checks that it relies on this).
constexpr char kOneSessionPool[] = "--engine.kv_pool=20MiB";
// About four of them.
constexpr char kFourSessionPool[] = "--engine.kv_pool=40MiB";
constexpr char kWindow[] = "--sessions.default_window=252";

// A channel with its own connection (channels with equal arguments share one), so that many
// streams are not bounded by server.max_streams_per_connection.
std::shared_ptr<grpc::Channel> OwnConnection(const DaemonProcess& d, int n) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("streamd.test.connection", n);
  return d.Channel(args);
}

// True when an Open on a new stream is not answered within `wait` (it waits for blocks).
bool OpenWaits(const DaemonProcess& d, std::chrono::seconds wait) {
  RawStream probe(d.Channel(), wait);
  probe.Write(OpenMsg());
  const std::optional<v1::ServerMessage> m = probe.Read();
  return !m && probe.Finish().error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

std::vector<int32_t> Tokens(int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(100 + (i * 37) % 5000);
  return ids;
}

TEST(TransportE2eTest, StreamWithoutASessionIsEndedAfterOpenTimeout) {
  auto d = DaemonProcess::Start({"--server.open_timeout=1s"});
  ASSERT_NE(d, nullptr);
  RawStream opened(d->Channel(), 60s);
  ASSERT_TRUE(opened.Open());
  RawStream idle(d->Channel(), 60s);  // sends nothing at all
  const auto start = steady_clock::now();
  const grpc::Status end = idle.Finish();
  // Ended by the server (its message), long before the client's own deadline.
  EXPECT_EQ(end.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << end.error_message();
  EXPECT_NE(end.error_message().find("server.open_timeout"), std::string::npos)
      << end.error_message();
  EXPECT_LT(steady_clock::now() - start, 30s);
  // A stream with a session is not affected, however long it has been quiet.
  EXPECT_FALSE(opened.Append(TextMsg("Still here.").append()));
  ASSERT_TRUE(opened.Write(CloseMsg()));
  EXPECT_TRUE(opened.Finish().ok());
}

TEST(TransportE2eTest, OpensWaitingForAFullPoolDoNotHoldUpABargeIn) {
  auto d = DaemonProcess::Start({kOneSessionPool, kWindow, "--sessions.admission_timeout=5m",
                                 "--sessions.max_detached_share=1"});
  ASSERT_NE(d, nullptr);
  RawStream a(d->Channel(), 300s);
  ASSERT_TRUE(a.Open());
  ASSERT_FALSE(a.Append(TextMsg("Once upon a time, in a land far away,").append()));
  ASSERT_TRUE(OpenWaits(*d, 3s)) << "the pool must be full for this test";

  // 200 Opens that wait, on 4 connections.
  constexpr int kWaiting = 200;
  std::vector<std::unique_ptr<RawStream>> waiting;
  for (int i = 0; i < kWaiting; ++i) {
    waiting.push_back(std::make_unique<RawStream>(OwnConnection(*d, i % 4), 300s));
    ASSERT_TRUE(waiting.back()->Write(OpenMsg()));
  }
  std::this_thread::sleep_for(2s);  // they have all arrived and wait

  // A long generation, and a barge-in as soon as it streams: its GenerationDone and the
  // Append's CacheState come back promptly, whatever the waiting Opens do.
  ASSERT_TRUE(a.Write(GenerateMsg(2000)));
  steady_clock::time_point barged;
  const Generation g = ReadGeneration(a, [&] {
    barged = steady_clock::now();
    a.Write(TextMsg(" Stop, and listen."));
  });
  ASSERT_TRUE(g.ended);
  EXPECT_EQ(g.done.reason(), v1::FINISH_REASON_CANCELLED);
  std::optional<v1::ServerMessage> appended = a.Read();
  ASSERT_TRUE(appended && appended->has_cache_state()) << (appended ? appended->DebugString() : "");
  const auto answered = steady_clock::now() - barged;
  EXPECT_LT(answered, 5s) << "a barge-in took " << std::chrono::duration<double>(answered).count()
                          << " s";

  // Room again: the waiting Opens are still served, first come first served, and those whose
  // streams went away are dropped: with all but one cancelled, that one is admitted.
  ASSERT_TRUE(a.Write(CloseMsg()));
  EXPECT_TRUE(a.Finish().ok());
  for (int i = 1; i < kWaiting; ++i) waiting[i]->Cancel();
  std::optional<v1::ServerMessage> opened = waiting[0]->Read();
  ASSERT_TRUE(opened && opened->has_opened()) << (opened ? opened->DebugString() : "no answer");
  ASSERT_TRUE(waiting[0]->Write(CloseMsg()));
  EXPECT_TRUE(waiting[0]->Finish().ok());
  for (int i = 1; i < kWaiting; ++i) waiting[i]->Finish();
}

// The script of the issue: streams that each open a session, give it context, then send a
// message that does not parse. Each ends with INVALID_ARGUMENT (never a silent OK), and an
// honest client's Open is still admitted: the abandoned sessions leave memory (written out with
// a snapshot directory; beyond the client's detached share without one).
void AbandonedSessionsDoNotLockOthersOut(const std::vector<std::string>& flags) {
  auto d = DaemonProcess::Start(flags);
  ASSERT_NE(d, nullptr);
  constexpr int kAbandoned = 12;  // three pools' worth
  for (int i = 0; i < kAbandoned; ++i) {
    BytesStream s(d->Channel(), 60s);
    ASSERT_TRUE(s.Write(OpenMsg()));
    std::optional<v1::ServerMessage> m = s.Read();
    ASSERT_TRUE(m && m->has_opened())
        << "abandoned session " << i << ": " << (m ? m->DebugString() : "no answer");
    ASSERT_TRUE(s.Write(TokensMsg(Tokens(256))));
    m = s.Read();
    ASSERT_TRUE(m && m->has_cache_state()) << (m ? m->DebugString() : "no answer");
    ASSERT_TRUE(s.Write(kUnparsableMessage));
    const grpc::Status end = s.Finish();
    ASSERT_EQ(end.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << end.error_message();
  }
  RawStream honest(d->Channel(), 60s);
  ASSERT_TRUE(honest.Open());
  EXPECT_FALSE(honest.Append(TextMsg("An honest client gets its session.").append()));
  ASSERT_TRUE(honest.Write(CloseMsg()));
  EXPECT_TRUE(honest.Finish().ok());
}

TEST(TransportE2eTest, AbandonedSessionsDoNotLockOthersOutWithSnapshots) {
  AbandonedSessionsDoNotLockOthersOut(
      {kFourSessionPool, kWindow, "--sessions.admission_timeout=20s"});
}

TEST(TransportE2eTest, AbandonedSessionsDoNotLockOthersOutInMemory) {
  AbandonedSessionsDoNotLockOthersOut(
      {kFourSessionPool, kWindow, "--sessions.admission_timeout=20s", "--sessions.snapshot_dir="});
}

}  // namespace
}  // namespace streamd::e2e
