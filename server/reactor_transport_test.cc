// ReactorTransport against a stand-in reactor: the two rules that keep a self-deleting gRPC
// reactor safe (no read after Finish; nothing of the transport touched once Finish is called).
#include "server/reactor_transport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <thread>

namespace streamd::server {
namespace {

// Records what the transport asks of the reactor. `on_finish` runs inside Finish, where gRPC
// may run OnDone (and delete everything) on another thread.
struct FakeReactor {
  void StartRead(grpc::ByteBuffer* /*in*/) { ++reads; }
  void StartWrite(const grpc::ByteBuffer* /*out*/) { ++writes; }
  void Finish(const grpc::Status& status) {
    ++finishes;
    code = status.error_code();
    // Moved out first: on_finish may delete this reactor, and the function it is stored in.
    const std::function<void()> then = std::move(on_finish);
    if (then) then();
  }
  int reads = 0;
  int writes = 0;
  int finishes = 0;
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  std::function<void()> on_finish;
};

TEST(ReactorTransportTest, ReadsStartOnlyUntilTheCallIsFinished) {
  FakeReactor reactor;
  grpc::ByteBuffer in;
  ReactorTransport<FakeReactor> transport(&reactor, nullptr, &in);
  transport.ReadNext();
  transport.ReadNext();
  EXPECT_EQ(reactor.reads, 2);
  transport.Finish(grpc::Status(grpc::StatusCode::ABORTED, "closed"));
  transport.ReadNext();
  EXPECT_EQ(reactor.reads, 2);
  EXPECT_EQ(reactor.finishes, 1);
  EXPECT_EQ(reactor.code, grpc::StatusCode::ABORTED);
}

TEST(ReactorTransportTest, WritesReachTheReactorSerialized) {
  FakeReactor reactor;
  grpc::ByteBuffer in;
  ReactorTransport<FakeReactor> transport(&reactor, nullptr, &in);
  v1::ServerMessage message;
  message.mutable_opened()->set_session_id("s");  // no context: no metadata to add
  transport.StartWrite(&message);
  transport.StartWrite(&message);
  EXPECT_EQ(reactor.writes, 2);
}

// The reactor's Finish is where gRPC may delete the reactor from another thread. The transport
// must hold none of its locks there: here, another thread's ReadNext during Finish must get
// through (and start no read). With the lock held across Finish it waits forever; the bound is
// only to fail instead of hanging.
TEST(ReactorTransportTest, FinishHoldsNoLockWhileTheReactorMayBeDeleted) {
  FakeReactor reactor;
  grpc::ByteBuffer in;
  ReactorTransport<FakeReactor> transport(&reactor, nullptr, &in);
  bool other_thread_got_through = false;
  std::future<void> other;
  reactor.on_finish = [&] {
    other = std::async(std::launch::async, [&] { transport.ReadNext(); });
    other_thread_got_through =
        other.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  };
  transport.Finish(grpc::Status::OK);
  EXPECT_TRUE(other_thread_got_through) << "ReactorTransport::Finish held its mutex while the "
                                           "reactor's Finish ran";
  other.wait();  // (with the bug: released once Finish returns)
  EXPECT_EQ(reactor.reads, 0);
}

// What gRPC may do: the reactor (owning the transport) is deleted inside Finish. Under TSan
// (which intercepts mutex calls) and ASan, a later touch of the transport, its mutex included,
// is a use-after-free report.
TEST(ReactorTransportTest, TheReactorMayDeleteItselfInFinish) {
  struct Owner {
    FakeReactor reactor;
    grpc::ByteBuffer in;
    ReactorTransport<FakeReactor> transport{&reactor, nullptr, &in};
  };
  auto* owner = new Owner;
  bool deleted = false;
  owner->reactor.on_finish = [&] {
    delete owner;
    deleted = true;
  };
  owner->transport.Finish(grpc::Status::OK);
  EXPECT_TRUE(deleted);
}

}  // namespace
}  // namespace streamd::server
