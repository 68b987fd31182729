// SessionStream: the protocol of one Session stream, between its gRPC reactor (which only moves
// messages) and the engine. One per stream; shared with the engine's EventSinks and the
// service, so it may outlive its reactor (everything it writes afterwards is dropped).
//
// Stream states:
//   unbound   - no session yet: Open or Resume attach one; anything else is an Error. A stream
//               that stays unbound for server.open_timeout (since it started, or since its
//               last failed Open or Resume) ends with DEADLINE_EXCEEDED.
//   bound     - drives one session: Append, Generate, Cancel, Close.
//   ending    - Close, client half-close, shutdown, the session closed elsewhere: reads stop,
//               queued messages are written, then the call finishes. A half-close or shutdown
//               waits for the running generation to end first, and the call finishes only once
//               the detached session's snapshot is written: a client that resumes it at once on
//               another replica sharing the snapshot directory finds it there as it left it.
//   released  - the client cancelled, the deadline passed, or the call is done: the session's
//               generation is cancelled and the session is detached (resumable).
// Generation: at most one per session. An Append while one runs cancels it first (barge-in)
// and goes on after its GenerationDone, so the context is never changed under a generation.
//
// Nothing here blocks a gRPC reaction: an Open waiting for admission (AdmissionQueue), a Resume
// waiting for a load, a barge-in waiting for the GenerationDone of what it cancelled complete
// on other threads, and the stream reads its next message only then, so messages are still
// handled one at a time and in order. A message that does not parse ends the stream with
// INVALID_ARGUMENT.
//
// Slow-client policy: a stream whose client does not read holds at most
// limits.max_queued_tokens undelivered tokens (StreamOutbox). At that bound the generation is
// cancelled; its GenerationDone says CANCELLED with error RESOURCE_EXHAUSTED "client too
// slow". Tokens sampled after the bound are in the context but are not sent. Other sessions
// are unaffected: nothing here ever blocks the scheduler thread.
//
// A session outlives its stream: when a stream ends without Close, the session is detached and
// can be resumed (Resume{session_id}) until it has been detached for the idle timeout.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "server/service_context.h"
#include "server/stream_outbox.h"

namespace streamd::server {

using Clock = std::chrono::steady_clock;

class SessionStream : public std::enable_shared_from_this<SessionStream> {
 public:
  // The reactor: writes and finishes (StreamOutbox::Writer) and starts the next read.
  class Transport : public StreamOutbox::Writer {
   public:
    virtual void ReadNext() = 0;
  };

  // `caller`: who opened the stream, as the engine takes it (its tenant owns the sessions it
  // opens, it can resume only those, its limits apply; its client is who is on the other end,
  // for the per-client caps).
  SessionStream(ServiceContext& ctx, Transport* transport, api::Caller caller);

  // What the reactor does after OnMessage: read the next message now, read no more, or nothing
  // (the stream starts the next read itself once the message is handled). Messages are handled
  // one at a time and in order; a handler that must wait (an Open for admission, a barge-in for
  // the generation it stops) returns kLater instead of blocking the reaction.
  enum class Next { kRead, kStop, kLater };
  Next OnMessage(const v1::ClientMessage& message);
  // A message that does not parse as a ClientMessage: the stream ends with INVALID_ARGUMENT.
  void OnMalformedMessage(size_t bytes);
  // The stream has not been bound to a session within server.open_timeout of its start: it
  // ends with DEADLINE_EXCEEDED. Called by the service's watchdog; true when it ended.
  bool EndIfUnbound(Clock::time_point now);
  void OnHalfClose();  // the client called WritesDone
  void OnCancel();     // client cancellation or deadline
  void OnWriteDone(bool ok) { outbox_.OnWriteDone(ok); }
  void OnDone();  // the reactor is gone

  // Service events (shutdown, CloseSession).
  void Drain();                              // end after the running generation
  void CancelGeneration(const Status& why);  // the grace period is over
  void OnSessionClosed(const Status& why);   // CloseSession, from elsewhere

 private:
  // Binding (session_binding.cc): Open and Resume answer from the admission queue's or the
  // loader's thread.
  Next HandleOpen(const v1::Open& open);
  Next HandleResume(const v1::Resume& resume);
  Next HandleAppend(const v1::Append& append);
  void HandleGenerate(const v1::Generate& generate);
  void HandleCancel(const v1::Cancel& cancel);
  // Rollback (session_rollback_handlers.cc): Truncate and Fork wait for the engine (a cancelled
  // generation's last step, a fork's copy of the parent's bookkeeping): the driver answers on
  // its task thread, and the stream reads on from there.
  Next HandleTruncate(const v1::Truncate& truncate);
  Next HandleFork(const v1::Fork& fork);
  void HandleClose();

  std::shared_ptr<api::Session> session() const;
  // Binds a freshly attached session, unless the stream ended meanwhile.
  void Bind(std::shared_ptr<api::Session> s, bool resumed);
  void SendError(const Status& status, std::string_view request_id = {});
  void SendCacheState(const api::Session& s);
  // The answer to an Open or Resume: binds the session or reports why not, then reads on.
  void Bound(StatusOr<std::unique_ptr<api::Session>> s, bool resumed);
  // Starts the next read after a handler that returned kLater.
  void ReadNext();
  // The observer of every generation started here.
  api::GenerationObserver Observer(const std::shared_ptr<api::Session>& s);
  // Tells this stream when its session is closed from elsewhere.
  api::OnClosedElsewhere ClosedElsewhere();
  // Ends after the running generation, or now when none runs.
  void EndWhenIdle(const grpc::Status& status);
  // Lets go of the session (cancelling its generation) so that it can be resumed; `then`, when
  // given, runs once the detached session's snapshot is written (at once without a session).
  void Release(std::function<void()> then = {});
  // Release(), then finish the call with `status` once the session's snapshot is written and
  // the queue is written.
  void End(const grpc::Status& status);

  ServiceContext& ctx_;
  const api::Caller caller_;
  StreamOutbox outbox_;
  std::mutex transport_mu_;  // guards transport_ (null once the reactor is gone)
  Transport* transport_;
  mutable std::mutex mu_;
  std::shared_ptr<api::Session> session_;
  // An Open waiting for admission: held so that the engine keeps it (api::Engine::Open).
  std::shared_ptr<void> pending_open_;
  bool released_ = false;
  bool binding_ = false;  // an Open or Resume is on its way (admission, a load from disk)
  Clock::time_point unbound_since_ = Clock::now();  // server.open_timeout counts from here
  // Set when the stream ends once the running generation is over (EndWhenIdle).
  std::optional<grpc::Status> end_after_generation_;
  Clock::time_point last_token_;  // of the running generation (inter-token latency)
};

}  // namespace streamd::server
