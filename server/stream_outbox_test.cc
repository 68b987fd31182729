#include "server/stream_outbox.h"

#include <gtest/gtest.h>

#include <vector>

namespace streamd::server {
namespace {

// Records writes; the test completes them by hand.
class FakeWriter : public StreamOutbox::Writer {
 public:
  void StartWrite(const v1::ServerMessage* m) override { writes.push_back(*m); }
  void Finish(const grpc::Status& s) override {
    finished = true;
    status = s;
  }
  std::vector<v1::ServerMessage> writes;
  bool finished = false;
  grpc::Status status;
};

v1::ServerMessage Control() {
  v1::ServerMessage m;
  m.mutable_cache_state()->set_tokens_seen(1);
  return m;
}

TEST(StreamOutboxTest, OneWriteInFlightAndCoalescing) {
  FakeWriter w;
  StreamOutbox box(&w, 100);
  EXPECT_EQ(box.PushToken("r", 1, "a", 0), StreamOutbox::PushResult::kQueued);
  ASSERT_EQ(w.writes.size(), 1u);  // written at once
  box.PushToken("r", 2, "b", 1);
  box.PushToken("r", 3, "c", 2);
  EXPECT_EQ(w.writes.size(), 1u);  // one write in flight
  EXPECT_EQ(box.queued_tokens(), 2);
  box.OnWriteDone(true);
  ASSERT_EQ(w.writes.size(), 2u);
  const v1::TokenDelta& d = w.writes[1].token_delta();
  EXPECT_EQ(d.token_ids_size(), 2);
  EXPECT_EQ(d.text(), "bc");
  EXPECT_EQ(d.index(), 1);
  EXPECT_EQ(box.queued_tokens(), 0);
}

TEST(StreamOutboxTest, TokensOfAnotherRequestOrAfterControlAreNotMerged) {
  FakeWriter w;
  StreamOutbox box(&w, 100);
  box.Push(Control());
  box.PushToken("a", 1, "x", 0);
  box.Push(Control());
  box.PushToken("a", 2, "y", 1);
  box.PushToken("b", 3, "z", 0);
  for (int i = 0; i < 5; ++i) box.OnWriteDone(true);
  EXPECT_EQ(w.writes.size(), 5u);
}

TEST(StreamOutboxTest, ControlMessagesPastTheBoundEndTheCall) {
  FakeWriter w;
  StreamOutbox box(&w, 100);
  ASSERT_TRUE(box.Push(Control()));  // in flight, never completed: the client does not read
  for (size_t i = 0; i < StreamOutbox::kMaxQueuedMessages; ++i) ASSERT_TRUE(box.Push(Control()));
  EXPECT_FALSE(box.Push(Control()));
  EXPECT_TRUE(box.closed());
  EXPECT_FALSE(w.finished);  // not while a write is in flight
  box.OnWriteDone(true);
  ASSERT_TRUE(w.finished);
  EXPECT_EQ(w.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(w.status.error_message().find("1024 messages were queued unread"), std::string::npos);
  EXPECT_EQ(w.writes.size(), 1u);  // the queue was dropped, not written
}

TEST(StreamOutboxTest, FullWhenTheClientDoesNotRead) {
  FakeWriter w;
  StreamOutbox box(&w, 3);
  box.PushToken("r", 0, "", 0);  // in flight, never completed
  for (int i = 1; i <= 3; ++i)
    EXPECT_EQ(box.PushToken("r", i, "", i), StreamOutbox::PushResult::kQueued);
  EXPECT_EQ(box.PushToken("r", 4, "", 4), StreamOutbox::PushResult::kFull);
  EXPECT_TRUE(box.Push(Control()));  // control messages still pass
}

TEST(StreamOutboxTest, FinishAfterTheQueueIsWritten) {
  FakeWriter w;
  StreamOutbox box(&w, 10);
  box.Push(Control());
  box.Push(Control());
  box.Finish(grpc::Status::OK);
  EXPECT_FALSE(w.finished);
  EXPECT_FALSE(box.Push(Control()));  // dropped after Finish
  box.OnWriteDone(true);
  EXPECT_FALSE(w.finished);
  box.OnWriteDone(true);
  EXPECT_TRUE(w.finished);
  EXPECT_EQ(w.writes.size(), 2u);
}

TEST(StreamOutboxTest, AbortDropsTheQueueAndFailedWriteFinishes) {
  FakeWriter w;
  StreamOutbox box(&w, 10);
  box.Push(Control());
  box.Push(Control());
  box.Abort(grpc::Status(grpc::StatusCode::CANCELLED, "gone"));
  EXPECT_FALSE(w.finished);  // the write in flight completes first
  box.OnWriteDone(false);
  EXPECT_TRUE(w.finished);
  EXPECT_EQ(w.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(w.writes.size(), 1u);

  FakeWriter w2;
  StreamOutbox box2(&w2, 10);
  box2.Push(Control());
  box2.Push(Control());
  box2.OnWriteDone(false);  // the client vanished
  EXPECT_TRUE(w2.finished);
  EXPECT_EQ(w2.status.error_code(), grpc::StatusCode::CANCELLED);
}

TEST(StreamOutboxTest, NothingAfterDetach) {
  FakeWriter w;
  StreamOutbox box(&w, 10);
  box.Detach();
  EXPECT_EQ(box.PushToken("r", 1, "", 0), StreamOutbox::PushResult::kClosed);
  EXPECT_FALSE(box.Push(Control()));
  EXPECT_TRUE(w.writes.empty());
}

}  // namespace
}  // namespace streamd::server
