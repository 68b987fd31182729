// AdmissionQueue: Opens that wait for KV blocks, off the gRPC reactions. An Open that fits is
// admitted at once (on the queue's thread; the reaction has already returned); one that does
// not waits here, first come first served, until blocks are freed (a session closed or
// offloaded: Notify) or its sessions.admission_timeout passes. The queue is bounded
// (limits.max_waiting_opens): beyond it an Open is refused at once with RESOURCE_EXHAUSTED.
//
// First come first served is strict: while the oldest waiting Open does not fit, a smaller one
// behind it does not jump ahead, so a large session is never starved by a stream of small ones.
// An Open whose stream went away meanwhile is dropped without opening anything.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/sessions/session_registry.h"

namespace streamd {

class AdmissionQueue {
 public:
  using Done = std::function<void(StatusOr<std::shared_ptr<SessionRecord>>)>;

  AdmissionQueue(SessionRegistry& registry, int32_t max_waiting);
  // Waiting Opens are answered UNAVAILABLE.
  ~AdmissionQueue();
  AdmissionQueue(const AdmissionQueue&) = delete;
  AdmissionQueue& operator=(const AdmissionQueue&) = delete;

  // Never blocks. `done` runs on the queue's thread (or inline, when the queue is full or
  // stopping) with the attached session or why there is none.
  // `client` as for SessionRegistry::Open.
  void Submit(SessionOptions options, std::weak_ptr<SessionOwner> owner, std::string client,
              Done done);
  // Checked just before each Open is tried (Opens are tried one at a time): a refusal answers
  // the Open at once. Set before the first Submit.
  using Check = std::function<Status(const SessionOptions&)>;
  void set_check(Check check) { check_ = std::move(check); }
  // Blocks may have been freed: retry the oldest waiting Open now.
  void Notify();
  // Opens waiting for KV blocks now: once the oldest has been tried and did not fit, every Open
  // in the queue (streamd_sessions{state="queued"}, readiness). An Open on its way through,
  // tried for the first time, is not counted.
  int32_t waiting() const;

 private:
  struct Request {
    SessionOptions options;
    std::weak_ptr<SessionOwner> owner;
    std::string client;
    Done done;
    Clock::time_point deadline;
    Status last_refusal;  // why its last attempt did not fit (the engine says how full)
  };
  void Loop();
  // Answers (outside the lock) every request whose deadline passed or whose stream is gone.
  void ExpireLocked(Clock::time_point now, std::vector<std::pair<Request, Status>>* out);

  SessionRegistry& registry_;
  const int32_t max_waiting_;
  Check check_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> queue_;
  bool retry_now_ = false;  // Notify() since the last attempt
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace streamd
