// SessionRegistry: the server's view of engine sessions, which outlive the streams that drive
// them. A session is attached to at most one stream at a time; when its stream ends it becomes
// detached, and a new stream may Resume it until it has been detached for idle_timeout, when
// the reaper closes it and its KV blocks return to the pool.
//
// Locks: the registry mutex guards the map; each ServerSession's mutex guards its fields.
// Order: registry -> session. Neither is held across an engine call that can deliver events
// (Cancel, Close), because the EventSink takes the session's mutex.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/serving/engine.h"
#include "server/chat_formatter.h"

namespace streamd::server {

using Clock = std::chrono::steady_clock;

// Whoever drives a session (a SessionStream); told when the session is closed elsewhere.
class SessionOwner {
 public:
  virtual ~SessionOwner() = default;
  virtual void OnSessionClosed(SessionId id, const Status& why) = 0;
};

// Server-side state of one engine session.
struct ServerSession {
  SessionId id;
  SessionOptions options;  // effective: defaults applied
  CacheSpec spec;          // effective cache spec
  int32_t max_blocks = 0;

  std::mutex mu;
  std::condition_variable generation_ended;  // notified when `generating` becomes false
  // Guarded by mu:
  std::weak_ptr<SessionOwner> owner;  // the attached stream
  bool attached = false;
  Clock::time_point detached_at;
  Clock::time_point last_token;  // of the running generation (inter-token latency)
  bool closed = false;
  bool has_input = false;  // any context yet (BOS and the default system turn go first)
  ChatState chat = ChatState::kNone;
  bool generating = false;
  uint64_t generation = 0;  // counts generations started; names the running one
  std::string request_id;   // of the running generation
  Status cancel_reason;     // set when the server cancels it (slow client, shutdown)
};

class SessionRegistry {
 public:
  SessionRegistry(Engine& engine, std::chrono::milliseconds idle_timeout);
  ~SessionRegistry();  // stops the reaper; sessions stay open in the engine
  SessionRegistry(const SessionRegistry&) = delete;
  SessionRegistry& operator=(const SessionRegistry&) = delete;

  // Starts the thread that closes sessions detached for longer than the idle timeout.
  void StartReaper();

  // Opens an engine session attached to `owner`.
  StatusOr<std::shared_ptr<ServerSession>> Open(const SessionOptions& options,
                                                std::weak_ptr<SessionOwner> owner);
  // NOT_FOUND for an unknown id, FAILED_PRECONDITION when another stream drives it.
  StatusOr<std::shared_ptr<ServerSession>> Attach(SessionId id, std::weak_ptr<SessionOwner> owner);
  // The stream is gone: the session waits for a Resume (its generation must be over).
  void Detach(const std::shared_ptr<ServerSession>& session);
  // Closes the session in the engine and forgets it. An attached owner other than `caller`
  // is told through OnSessionClosed(id, why). NOT_FOUND for an unknown id.
  Status Close(SessionId id, const Status& why, const SessionOwner* caller = nullptr);
  // Closes every session detached since before now - idle_timeout; returns how many.
  int32_t ReapIdle(Clock::time_point now);

  std::shared_ptr<ServerSession> Find(SessionId id) const;
  std::vector<std::shared_ptr<ServerSession>> All() const;
  std::chrono::milliseconds idle_timeout() const { return idle_timeout_; }
  // Called after each session is closed (metrics). Set before any session is opened.
  void set_on_close(std::function<void()> on_close) { on_close_ = std::move(on_close); }

 private:
  void ReaperLoop();

  Engine& engine_;
  const std::chrono::milliseconds idle_timeout_;
  mutable std::mutex mu_;
  std::map<SessionId, std::shared_ptr<ServerSession>> sessions_;
  std::condition_variable reaper_cv_;
  bool stopping_ = false;
  std::function<void()> on_close_;
  std::thread reaper_;
};

// "session 3f9c...f713 does not exist (...)": the NOT_FOUND every lookup by id answers. Ids
// from the wire are parsed first (SessionId::Parse: INVALID_ARGUMENT naming the field).
Status SessionNotFound(SessionId id, std::chrono::milliseconds idle_timeout);

}  // namespace streamd::server
