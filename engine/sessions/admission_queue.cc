#include "engine/sessions/admission_queue.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace streamd {
namespace {

// How often the oldest waiting Open is retried without a Notify: blocks can also be freed by
// the engine itself (a session closed by its idle timeout goes through the registry, which
// notifies; this is the safety net).
constexpr std::chrono::milliseconds kRetryPeriod{50};

bool Exhausted(const Status& s) { return s.code() == StatusCode::kResourceExhausted; }

}  // namespace

AdmissionQueue::AdmissionQueue(SessionRegistry& registry, int32_t max_waiting)
    : registry_(registry), max_waiting_(max_waiting), thread_([this] { Loop(); }) {}

AdmissionQueue::~AdmissionQueue() {
  std::deque<Request> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  left.swap(queue_);
  for (Request& r : left) r.done(UnavailableError("open: streamd is shutting down"));
}

void AdmissionQueue::Submit(SessionOptions options, std::weak_ptr<SessionOwner> owner,
                            std::string client, Done done) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) {
    lock.unlock();
    return done(UnavailableError("open: streamd is shutting down"));
  }
  if (static_cast<int32_t>(queue_.size()) >= max_waiting_) {
    lock.unlock();
    return done(ResourceExhaustedError(
        "open: " + std::to_string(max_waiting_) +
        " Opens are already waiting for KV blocks (limits.max_waiting_opens); retry later"));
  }
  const Clock::time_point deadline = Clock::now() + options.admission_timeout;
  queue_.push_back(
      {std::move(options), std::move(owner), std::move(client), std::move(done), deadline});
  retry_now_ = true;
  lock.unlock();
  cv_.notify_all();
}

int32_t AdmissionQueue::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  // FIFO: while the oldest has not been refused yet, nobody has waited (every Open passes
  // through the queue on its way in, for an instant).
  if (queue_.empty() || queue_.front().last_refusal.ok()) return 0;
  return static_cast<int32_t>(queue_.size());
}

void AdmissionQueue::Notify() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    retry_now_ = true;
  }
  cv_.notify_all();
}

void AdmissionQueue::ExpireLocked(Clock::time_point now,
                                  std::vector<std::pair<Request, Status>>* out) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->owner.expired()) {
      out->emplace_back(std::move(*it), CancelledError("open: the stream ended while waiting"));
    } else if (it->deadline <= now) {
      const std::string waited = "sessions.admission_timeout (" +
                                 std::to_string(it->options.admission_timeout.count()) + " ms)";
      Status why = it->last_refusal.ok()
                       ? ResourceExhaustedError(
                             "open: earlier Opens were still waiting for KV "
                             "blocks when this one's " +
                             waited + " passed")
                       : Status(it->last_refusal.code(),
                                "open: " + it->last_refusal.message() + "; waited " + waited);
      out->emplace_back(std::move(*it), std::move(why));
    } else {
      ++it;
      continue;
    }
    it = queue_.erase(it);
  }
}

void AdmissionQueue::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (queue_.empty()) {
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      continue;
    }
    std::vector<std::pair<Request, Status>> answered;
    if (!queue_.front().owner.expired()) {
      retry_now_ = false;
      // The oldest Open, tried without waiting (the registry offloads detached sessions to make
      // room first). It stays in the queue meanwhile, so that the bound counts it; only this
      // thread removes requests, so it is still the front one afterwards.
      const SessionOptions options = queue_.front().options;
      std::weak_ptr<SessionOwner> owner = queue_.front().owner;
      const std::string client = queue_.front().client;
      lock.unlock();
      const Status allowed = check_ ? check_(options) : OkStatus();
      StatusOr<std::shared_ptr<SessionRecord>> s =
          allowed.ok() ? registry_.Open(options, owner, client) : allowed;
      lock.lock();
      if (s.ok() || !allowed.ok() || !Exhausted(s.status()) || stopping_) {
        // Admitted, or refused for good (a quota, invalid options, shutdown): answered.
        Request r = std::move(queue_.front());
        queue_.pop_front();
        lock.unlock();
        r.done(std::move(s));
        lock.lock();
        continue;
      }
      queue_.front().last_refusal = s.status();
    }
    // The oldest does not fit (or its stream is gone): answer what expired, then wait until
    // blocks are freed, the next retry, or the earliest deadline.
    ExpireLocked(Clock::now(), &answered);
    if (!answered.empty()) {
      lock.unlock();
      for (auto& [r, why] : answered) r.done(why);
      lock.lock();
      continue;
    }
    Clock::time_point wake = Clock::now() + kRetryPeriod;
    for (const Request& r : queue_) wake = std::min(wake, r.deadline);
    cv_.wait_until(lock, wake, [&] { return stopping_ || retry_now_; });
  }
}

}  // namespace streamd
