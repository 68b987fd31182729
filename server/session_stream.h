// SessionStream: the protocol of one Session stream, between its gRPC reactor (which only moves
// messages) and the engine. One per stream; shared with the engine's EventSinks and the
// service, so it may outlive its reactor (everything it writes afterwards is dropped).
//
// Stream states:
//   unbound   - no session yet: Open or Resume attach one; anything else is an Error.
//   bound     - drives one session: Append, Generate, Cancel, Close.
//   ending    - Close, client half-close, shutdown, the session closed elsewhere: reads stop,
//               queued messages are written, then the call finishes. A half-close or shutdown
//               waits for the running generation to end first.
//   released  - the client cancelled, the deadline passed, or the call is done: the session's
//               generation is cancelled and the session is detached (resumable).
// Generation: at most one per session. An Append while one runs cancels it first (barge-in)
// and waits for its GenerationDone, so the context is never changed under a generation.
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

#include <memory>
#include <mutex>
#include <optional>
#include <string_view>

#include "server/service_context.h"
#include "server/stream_outbox.h"

namespace streamd::server {

class SessionStream : public SessionOwner, public std::enable_shared_from_this<SessionStream> {
 public:
  SessionStream(ServiceContext& ctx, StreamOutbox::Writer* writer);

  // Reactor events. OnMessage returns false when the stream must read no more.
  bool OnMessage(const v1::ClientMessage& message);
  void OnHalfClose();  // the client called WritesDone
  void OnCancel();     // client cancellation or deadline
  void OnWriteDone(bool ok) { outbox_.OnWriteDone(ok); }
  void OnDone();  // the reactor is gone

  // Service events (shutdown, CloseSession).
  void Drain();                              // end after the running generation
  void CancelGeneration(const Status& why);  // the grace period is over
  void OnSessionClosed(SessionId id, const Status& why) override;

 private:
  void HandleOpen(const v1::Open& open);
  void HandleResume(const v1::Resume& resume);
  void HandleAppend(const v1::Append& append);
  void HandleGenerate(const v1::Generate& generate);
  void HandleCancel(const v1::Cancel& cancel);
  void HandleClose();

  std::shared_ptr<ServerSession> session() const;
  // Binds a freshly attached session, unless the stream ended meanwhile.
  void Bind(const std::shared_ptr<ServerSession>& s, bool resumed);
  void SendError(const Status& status, std::string_view request_id = {});
  void SendCacheState(SessionId id);
  // Keeps the chat state in the session's snapshot (engine metadata) and marks the session
  // changed, so its snapshot is written within sessions.snapshot_interval. Never from an
  // EventSink (it calls the engine).
  void SaveSessionState(ServerSession& s);
  // Cancels the session's generation (noting `why` for its GenerationDone when not OK) and
  // waits for the GenerationDone.
  void StopGeneration(ServerSession& s, const Status& why);
  // The EventSink of every generation started here.
  void OnEvent(const std::shared_ptr<ServerSession>& s, GenerationEvent&& event);
  void AfterGeneration(SessionId id);  // on the task thread, after a GenerationDone
  // Ends after the running generation, or now when none runs.
  void EndWhenIdle(const grpc::Status& status);
  // Lets go of the session (cancelling its generation) so that it can be resumed.
  void Release();
  // Release(), then finish the call with `status` once the queue is written.
  void End(const grpc::Status& status);

  ServiceContext& ctx_;
  StreamOutbox outbox_;
  mutable std::mutex mu_;  // before any ServerSession::mu
  std::shared_ptr<ServerSession> session_;
  bool released_ = false;
  bool resuming_ = false;  // a Resume waits for its session to be read back from disk
  std::optional<grpc::Status> end_after_generation_;
};

}  // namespace streamd::server
