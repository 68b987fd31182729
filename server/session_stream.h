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

#include <memory>
#include <functional>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "server/service_context.h"
#include "server/stream_outbox.h"

namespace streamd::server {

class SessionStream : public SessionOwner, public std::enable_shared_from_this<SessionStream> {
 public:
  // The reactor: writes and finishes (StreamOutbox::Writer) and starts the next read.
  class Transport : public StreamOutbox::Writer {
   public:
    virtual void ReadNext() = 0;
  };

  // `caller`: who opened the stream (its tenant owns the sessions it opens, and it can resume
  // only those); `client`: who is on the other end, for the per-client caps (SessionRegistry).
  SessionStream(ServiceContext& ctx, Transport* transport, Caller caller, std::string client);

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
  void OnSessionClosed(SessionId id, const Status& why) override;

 private:
  Next HandleOpen(const v1::Open& open);
  Next HandleResume(const v1::Resume& resume);
  Next HandleAppend(const v1::Append& append);
  // The rest of an Append once no generation runs (at once, or after the barge-in's
  // GenerationDone).
  void AppendNow(const std::shared_ptr<SessionRecord>& s, const v1::Append& append);
  void HandleGenerate(const v1::Generate& generate);
  void HandleCancel(const v1::Cancel& cancel);
  // Rollback (session_rollback_handlers.cc): Truncate, Fork, and the partial Append replaced by
  // the next one.
  // Truncate and Fork wait for the engine (a cancelled generation's last step, a fork's copy of
  // the parent's bookkeeping): they run on the task thread and read on from there.
  Next HandleTruncate(const v1::Truncate& truncate);
  void TruncateNow(const std::shared_ptr<SessionRecord>& s, const v1::Truncate& truncate);
  Next HandleFork(const v1::Fork& fork);
  // What an Append's tokens are encoded from. The replacement of an open partial is encoded as
  // if the partial had never been sent: from the chat state before it.
  struct AppendBase {
    ChatState chat = ChatState::kNone;
    bool first_input = false;       // the session's first input (BOS, template start)
    bool replaces_partial = false;  // an open partial is replaced
  };
  AppendBase AppendBaseOf(SessionRecord& s) const;
  // True when `a` encodes to exactly the open partial's tokens (its final version): a
  // generation started on the partial goes on, as the engine changes nothing.
  bool RepeatsOpenPartial(SessionRecord& s, const v1::Append& a) const;
  // After the engine took an Append's `tokens` (encoded from `base`, leaving `chat`): the
  // session's chat state, and which partial is open now.
  void RecordAppend(SessionRecord& s, bool partial, const AppendBase& base,
                    std::vector<int32_t> tokens, ChatState chat);
  // The tokens an Append adds, encoded from `*chat` (updated) with `first_input`.
  StatusOr<std::vector<int32_t>> TokensOf(const v1::Append& append, bool first_input,
                                          ChatState* chat) const;
  void HandleClose();

  std::shared_ptr<SessionRecord> session() const;
  // RESOURCE_EXHAUSTED naming the tenant's quota (auth.keys_file) when it is used up; the
  // message starts with `what` (the request: "open" or "fork").
  Status CheckSessionQuota(const SessionOptions& options, std::string_view what = "open") const;
  Status CheckGenerationQuota() const;
  // tokens_per_second: `what` is refused while the tenant's bucket is below zero; Charge takes
  // tokens from it.
  Status CheckTokenQuota(const std::string& what) const;
  void ChargeTokens(int64_t tokens) const;
  // Binds a freshly attached session, unless the stream ended meanwhile.
  void Bind(const std::shared_ptr<SessionRecord>& s, bool resumed);
  void SendError(const Status& status, std::string_view request_id = {});
  void SendCacheState(SessionId id);
  // Keeps the chat state in the session's snapshot (engine metadata) and marks the session
  // changed, so its snapshot is written within sessions.snapshot_interval. Never from an
  // EventSink (it calls the engine).
  void SaveSessionState(SessionRecord& s);
  // Cancels the session's generation (noting `why` for its GenerationDone when not OK) and
  // waits for the GenerationDone. Only off the reactions (shutdown).
  void StopGeneration(SessionRecord& s, const Status& why);
  // Cancels the session's generation, if one runs (noting `why` for its GenerationDone when not
  // OK), and returns true: `then` runs on the task thread once the GenerationDone has been
  // handled. False, doing nothing, when no generation runs. Never blocks.
  bool DeferUntilStopped(const std::shared_ptr<SessionRecord>& s, const Status& why,
                         std::function<void()> then);
  // The answer to an Open or Resume: binds the session or reports why not, then reads on.
  void Bound(StatusOr<std::shared_ptr<SessionRecord>> s, bool resumed);
  // Starts the next read after a handler that returned kLater.
  void ReadNext();
  // The EventSink of every generation started here.
  void OnEvent(const std::shared_ptr<SessionRecord>& s, GenerationEvent&& event);
  // On the task thread, after a GenerationDone that produced `output_tokens`.
  void AfterGeneration(SessionId id, int64_t output_tokens);
  // Ends after the running generation, or now when none runs.
  void EndWhenIdle(const grpc::Status& status);
  // Lets go of the session (cancelling its generation) so that it can be resumed; `then`, when
  // given, runs once the detached session's snapshot is written (at once without a session).
  void Release(std::function<void()> then = {});
  // Release(), then finish the call with `status` once the session's snapshot is written and
  // the queue is written.
  void End(const grpc::Status& status);

  ServiceContext& ctx_;
  const Caller caller_;
  const std::string client_;
  StreamOutbox outbox_;
  std::mutex transport_mu_;   // guards transport_ (null once the reactor is gone)
  Transport* transport_;
  mutable std::mutex mu_;  // before any SessionRecord::mu
  std::shared_ptr<SessionRecord> session_;
  bool released_ = false;
  bool binding_ = false;  // an Open or Resume is on its way (admission, a load from disk)
  Clock::time_point unbound_since_ = Clock::now();  // server.open_timeout counts from here
  std::optional<grpc::Status> end_after_generation_;
  // What runs once the running generation's GenerationDone has been handled (AfterStopping).
  std::vector<std::function<void()>> after_generation_;
};

}  // namespace streamd::server
