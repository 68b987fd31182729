// TaskRunner: one worker thread for work that must not run where it is noticed, chiefly engine
// calls triggered from an EventSink (which runs on the scheduler thread and must neither block
// nor call into the engine): cancelling a slow client's generation, reporting the cache state
// after a generation ends. Tasks run in the order they were posted.
//
// Bounded by what clients hold, not by what they send (issue 14's "bounded task queues"): each
// task belongs to a session, and a session has at most a few queued at once: one per
// generation end (a session runs one generation at a time), one slow-client cancel per
// generation, and the Truncate or Fork its stream is waiting on (a stream reads its next
// message only once the last one is handled). So the queue stays under a small multiple of
// sessions.max_sessions. The io runner (export and import) is bounded by limits.max_transfers.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace streamd {

class TaskRunner {
 public:
  TaskRunner() : thread_([this] { Loop(); }) {}
  // Runs the tasks already posted, then stops.
  ~TaskRunner() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  TaskRunner(const TaskRunner&) = delete;
  TaskRunner& operator=(const TaskRunner&) = delete;

  // Notifies under the lock: once the worker can take the task, Post no longer touches the
  // runner, so whoever waits for the task's effect may destroy the runner right after it.
  void Post(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    cv_.notify_one();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and everything ran
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace streamd
