#include "server/session_registry.h"

#include <algorithm>
#include <utility>

namespace streamd::server {

Status SessionNotFound(SessionId id, std::chrono::milliseconds idle_timeout) {
  return NotFoundError("session " + id.ToString() +
                       " does not exist (never opened, closed, or detached for longer than the "
                       "idle timeout of " +
                       std::to_string(idle_timeout.count() / 1000) + " s)");
}

SessionRegistry::SessionRegistry(Engine& engine, std::chrono::milliseconds idle_timeout)
    : engine_(engine), idle_timeout_(idle_timeout) {}

SessionRegistry::~SessionRegistry() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  reaper_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
}

void SessionRegistry::StartReaper() {
  if (idle_timeout_.count() <= 0) return;  // 0 = sessions never time out
  reaper_ = std::thread([this] { ReaperLoop(); });
}

StatusOr<std::shared_ptr<ServerSession>> SessionRegistry::Open(const SessionOptions& options,
                                                               std::weak_ptr<SessionOwner> owner) {
  STREAMD_ASSIGN_OR_RETURN(const SessionId id, engine_.Open(options));
  auto info = engine_.Get(id);
  if (!info.ok()) return info.status();
  auto s = std::make_shared<ServerSession>();
  s->id = id;
  s->options = options;
  s->spec = info->cache;
  s->max_blocks = info->max_blocks;
  s->owner = std::move(owner);
  s->attached = true;
  std::lock_guard<std::mutex> lock(mu_);
  sessions_.emplace(id, s);
  return s;
}

StatusOr<std::shared_ptr<ServerSession>> SessionRegistry::Attach(
    SessionId id, std::weak_ptr<SessionOwner> owner) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return SessionNotFound(id, idle_timeout_);
  std::shared_ptr<ServerSession> s = it->second;
  std::lock_guard<std::mutex> session_lock(s->mu);
  if (s->closed) return SessionNotFound(id, idle_timeout_);
  if (s->attached) {
    return FailedPreconditionError(
        "resume.session_id: session " + id.ToString() +
        " is attached to another stream; one stream drives a session at a time (end that "
        "stream first)");
  }
  s->owner = std::move(owner);
  s->attached = true;
  return s;
}

void SessionRegistry::Detach(const std::shared_ptr<ServerSession>& session) {
  {
    std::lock_guard<std::mutex> lock(session->mu);
    session->attached = false;
    session->owner.reset();
    session->detached_at = Clock::now();
  }
  reaper_cv_.notify_all();
}

Status SessionRegistry::Close(SessionId id, const Status& why, const SessionOwner* caller) {
  std::shared_ptr<ServerSession> s;
  std::shared_ptr<SessionOwner> owner;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return SessionNotFound(id, idle_timeout_);
    s = it->second;
    sessions_.erase(it);
    std::lock_guard<std::mutex> session_lock(s->mu);
    s->closed = true;
    if (s->attached) owner = s->owner.lock();
  }
  // Cancels a running generation (its Done reaches the attached stream) and frees the blocks.
  const Status closed = engine_.Close(id);
  if (on_close_) on_close_();
  if (owner != nullptr && owner.get() != caller) owner->OnSessionClosed(id, why);
  return closed;
}

int32_t SessionRegistry::ReapIdle(Clock::time_point now) {
  if (idle_timeout_.count() <= 0) return 0;
  std::vector<SessionId> idle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, s] : sessions_) {
      std::lock_guard<std::mutex> session_lock(s->mu);
      if (!s->attached && now - s->detached_at >= idle_timeout_) idle.push_back(id);
    }
  }
  int32_t closed = 0;
  for (SessionId id : idle) {
    // A Resume may have won the race; Close of an attached session would cut its stream.
    std::shared_ptr<ServerSession> s = Find(id);
    if (s == nullptr) continue;
    {
      std::lock_guard<std::mutex> session_lock(s->mu);
      if (s->attached) continue;
    }
    closed += Close(id, CancelledError("idle timeout")).ok();
  }
  return closed;
}

void SessionRegistry::ReaperLoop() {
  // Wakes at least every second, or a tenth of the timeout when that is shorter.
  const auto period = std::clamp<std::chrono::milliseconds>(
      idle_timeout_ / 10, std::chrono::milliseconds(10), std::chrono::seconds(1));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    reaper_cv_.wait_for(lock, period);
    if (stopping_) return;
    lock.unlock();
    ReapIdle(Clock::now());
    lock.lock();
  }
}

std::shared_ptr<ServerSession> SessionRegistry::Find(SessionId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<ServerSession>> SessionRegistry::All() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<ServerSession>> out;
  for (const auto& [id, s] : sessions_) out.push_back(s);
  return out;
}

}  // namespace streamd::server
