// SessionRegistry: sessions, their streams and their lifetimes (open, fork, attach, detach,
// close, the reaper). The residency transitions (offload, load, restore at start) are in
// session_residency.cc.
#include "engine/sessions/session_registry.h"

#include <algorithm>
#include <utility>

namespace streamd {
namespace {

std::string Seconds(std::chrono::milliseconds d) { return std::to_string(d.count() / 1000); }

// Longer than any one step (a full prefill chunk on a slow CPU); only ever waited for on the
// admission thread, after an offload.
constexpr std::chrono::milliseconds kFreedBlocksWait{2000};

}  // namespace

Status SessionNotFound(SessionId id, const RegistryOptions& options) {
  return NotFoundError("session " + id.ToString() +
                       " does not exist (never opened, closed, or detached for longer than the "
                       "idle timeout of " +
                       Seconds(options.idle_timeout) + " s)");
}

SessionRegistry::SessionRegistry(Engine& engine, RegistryOptions options,
                                 SessionPersister* persister)
    : engine_(engine), options_(std::move(options)), persister_(persister) {
  if (persister_ != nullptr) loader_ = std::thread([this] { LoaderLoop(); });
}

SessionRegistry::~SessionRegistry() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  reaper_cv_.notify_all();
  loader_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  if (loader_.joinable()) loader_.join();
  // Resumes still waiting for a transition get an answer.
  std::map<SessionId, std::vector<Waiter>> waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting.swap(waiters_);
  }
  for (auto& [id, list] : waiting) {
    for (Waiter& w : list) w.done(UnavailableError("streamd is shutting down"));
  }
}

void SessionRegistry::StartReaper() {
  reaper_ = std::thread([this] { ReaperLoop(); });
}

void SessionRegistry::Give(Answers& answers) {
  for (Answer& a : answers) {
    if (a.waited_since != Clock::time_point{} && hooks_.on_resume_waited) {
      hooks_.on_resume_waited(a.result.ok() ? (*a.result)->id : SessionId{},
                              a.result.ok() ? "attached" : "refused",
                              std::chrono::duration<double>(Clock::now() - a.waited_since).count());
    }
    a.done(std::move(a.result));
  }
  answers.clear();
}

StatusOr<std::shared_ptr<SessionRecord>> SessionRegistry::Open(const SessionOptions& options,
                                                               std::weak_ptr<SessionOwner> owner,
                                                               std::string client) {
  // At once if it fits; else make room by offloading detached sessions. Never waits: an Open
  // that still does not fit waits in the AdmissionQueue, which retries.
  SessionOptions now = options;
  now.admission_timeout = std::chrono::milliseconds(0);
  StatusOr<SessionId> id = engine_.Open(now);
  while (!id.ok() && id.status().code() == StatusCode::kResourceExhausted && OffloadOneForRoom()) {
    // The offloaded session's blocks return to the pool when the step that may be running ends
    // (closes wait for it): wait that long for them before offloading another one.
    SessionOptions after_offload = options;
    after_offload.admission_timeout = kFreedBlocksWait;
    id = engine_.Open(after_offload);
  }
  if (!id.ok()) return id.status();
  auto info = engine_.Get(*id);
  if (!info.ok()) return info.status();
  auto s = std::make_shared<SessionRecord>();
  s->id = *id;
  s->options = options;
  s->spec = info->cache;
  s->max_blocks = info->max_blocks;
  s->client = std::move(client);
  s->owner = std::move(owner);
  s->attached = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.emplace(*id, s);
  }
  if (persister_ != nullptr) persister_->Touch(*id);  // a restart finds even an empty session
  return s;
}

StatusOr<std::shared_ptr<SessionRecord>> SessionRegistry::Fork(
    const std::shared_ptr<SessionRecord>& parent) {
  StatusOr<SessionId> id = engine_.Fork(parent->id);
  if (!id.ok() && id.status().code() == StatusCode::kResourceExhausted && OffloadOneForRoom()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the offload's step ends
    id = engine_.Fork(parent->id);
  }
  if (!id.ok()) return id.status();
  auto s = std::make_shared<SessionRecord>();
  s->id = *id;
  s->options = parent->options;
  s->spec = parent->spec;
  s->max_blocks = parent->max_blocks;
  s->client = parent->client;
  {
    std::lock_guard<std::mutex> parent_lock(parent->mu);
    s->has_input = parent->has_input;
    s->chat = parent->chat;
    s->partial_open = parent->partial_open;
    s->partial_tokens = parent->partial_tokens;
    s->chat_before_partial = parent->chat_before_partial;
    s->has_input_before_partial = parent->has_input_before_partial;
  }
  s->detached_at = Clock::now();  // detached from the start: it waits for its Resume
  {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.emplace(*id, s);
  }
  if (persister_ != nullptr) persister_->Touch(*id);  // written like any new session
  reaper_cv_.notify_all();                            // the per-client cap counts it
  return s;
}

void SessionRegistry::AttachOrWaitLocked(const std::shared_ptr<SessionRecord>& session, Waiter w,
                                         Answers& answers) {
  SessionRecord& s = *session;
  const bool waited = w.since != Clock::time_point{};  // it comes from waiters_
  const auto answer = [&](StatusOr<std::shared_ptr<SessionRecord>> result) {
    answers.push_back(
        {std::move(w.done), std::move(result), waited ? w.since : Clock::time_point{}});
  };
  if (s.closed) return answer(SessionNotFound(s.id, options_));
  if (s.attached) {
    return answer(FailedPreconditionError(
        "resume.session_id: session " + s.id.ToString() +
        " is attached to another stream; one stream drives a session at a time (end that "
        "stream first)"));
  }
  if (s.residency == Residency::kResident) {
    s.owner = std::move(w.owner);
    s.attached = true;
    return answer(session);
  }
  // In a transition, or on disk: wait for it to end. A Resume waits at most resume_wait (the
  // reaper answers it then), whatever it waits for.
  if (w.since == Clock::time_point{}) {
    w.since = Clock::now();
    w.deadline = w.since + options_.resume_wait;
  }
  waiters_[s.id].push_back(std::move(w));
  if (s.residency == Residency::kOffloaded) {
    s.residency = Residency::kLoading;
    s.transition_since = Clock::now();
    loads_.push_front({s.id, true});
    loader_cv_.notify_all();
  } else if (s.residency == Residency::kLoading) {
    // Queued for a background load (start-up): a Resume's load goes first.
    auto it = std::find_if(loads_.begin(), loads_.end(),
                           [&](const LoadRequest& r) { return r.id == s.id; });
    if (it != loads_.end()) {
      loads_.erase(it);
      loads_.push_front({s.id, true});
    }
  }
  // kOffloading: the offload's end attaches it (kept resident) or hands it to the loader.
}

SessionRegistry::Usage SessionRegistry::UsageOf(const std::string& tenant) const {
  Usage u;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, s] : sessions_) {
    if (s->options.tenant != tenant) continue;
    std::lock_guard<std::mutex> session_lock(s->mu);
    u.sessions += !s->closed;
    u.generating += s->generating;
    if (!s->closed && s->residency != Residency::kOffloaded) u.blocks += s->max_blocks;
  }
  return u;
}

void SessionRegistry::Attach(SessionId id, std::weak_ptr<SessionOwner> owner, AttachDone done,
                             const std::optional<std::string>& tenant) {
  std::shared_ptr<SessionRecord> s;
  bool closing = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = sessions_.find(id); it != sessions_.end()) s = it->second;
    closing = closing_.count(id) > 0;
  }
  if (s == nullptr && persister_ != nullptr && !closing) {
    // A snapshot in the directory this registry has not seen: written by another replica
    // that shares it (a drained or failed one), or found since the start-up scan.
    auto summary = persister_->Summary(id);
    if (summary.ok() && summary->id == id &&
        summary->model_fingerprint == persister_->context().model_fingerprint) {
      s = AddOffloaded(*summary);
    }
  }
  // Another tenant's session does not exist for this caller.
  if (s != nullptr && tenant && s->options.tenant != *tenant) s = nullptr;
  if (s != nullptr && persister_ != nullptr) DropIfStale(s);
  Answers answers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (s == nullptr) {
      auto lost = lost_.find(id);
      // Whose lost session it was is not known: only callers who see every tenant learn of it.
      const Status why =
          lost != lost_.end() && !tenant ? lost->second : SessionNotFound(id, options_);
      answers.push_back({std::move(done), why, {}});
    } else {
      std::lock_guard<std::mutex> session_lock(s->mu);
      AttachOrWaitLocked(s, {std::move(owner), std::move(done), {}, {}}, answers);
    }
  }
  Give(answers);
}

void SessionRegistry::Detach(const std::shared_ptr<SessionRecord>& session,
                             std::function<void()> written) {
  {
    std::lock_guard<std::mutex> lock(session->mu);
    session->attached = false;
    session->owner.reset();
    session->detached_at = Clock::now();
  }
  reaper_cv_.notify_all();
  if (persister_ != nullptr) {
    persister_->Urgent(session->id, std::move(written));
  } else if (written) {
    written();
  }
}

void SessionRegistry::Touched(const SessionRecord& session) {
  if (persister_ != nullptr) persister_->Touch(session.id);
}

std::shared_ptr<SessionRecord> SessionRegistry::EraseClosedLocked(SessionId id, Answers& answers) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return nullptr;
  std::shared_ptr<SessionRecord> s = it->second;
  sessions_.erase(it);
  {
    std::lock_guard<std::mutex> session_lock(s->mu);
    s->closed = true;
    if (s->residency == Residency::kLoading && loading_now_ != id) {
      // Its load has not started: nothing to wait for, it is on disk only.
      std::erase_if(loads_, [&](const LoadRequest& r) { return r.id == id; });
      s->residency = Residency::kOffloaded;
    }
    if (s->residency == Residency::kOffloading || s->residency == Residency::kLoading) {
      closing_.insert(id);
    }
  }
  // Resumes waiting for its transition are answered now, not when the transition ends.
  if (auto w = waiters_.find(id); w != waiters_.end()) {
    for (Waiter& waiter : w->second) {
      answers.push_back({std::move(waiter.done), SessionNotFound(id, options_), waiter.since});
    }
    waiters_.erase(w);
  }
  return s;
}

Status SessionRegistry::FinishClose(const std::shared_ptr<SessionRecord>& s, const Status& why,
                                    const SessionOwner* caller) {
  Residency residency;
  std::shared_ptr<SessionOwner> owner;
  {
    std::lock_guard<std::mutex> session_lock(s->mu);
    residency = s->residency;
    if (s->attached) owner = s->owner.lock();
  }
  // Cancels a running generation (its Done reaches the attached stream) and frees the blocks.
  // A session in a transition is closed in the engine, and its snapshot deleted, by the
  // transition's driver when it ends (it sees `closed`).
  Status closed = OkStatus();
  if (residency == Residency::kResident) closed = engine_.Close(s->id);
  const bool in_transition =
      residency == Residency::kOffloading || residency == Residency::kLoading;
  if (persister_ != nullptr && !in_transition) persister_->Forget(s->id);
  if (hooks_.on_close) hooks_.on_close();
  if (owner != nullptr && owner.get() != caller) owner->OnSessionClosed(s->id, why);
  return closed;
}

Status SessionRegistry::Close(SessionId id, const Status& why, const SessionOwner* caller) {
  Answers answers;
  std::shared_ptr<SessionRecord> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = EraseClosedLocked(id, answers);
  }
  Give(answers);
  if (s == nullptr) return SessionNotFound(id, options_);
  return FinishClose(s, why, caller);
}

bool SessionRegistry::CloseIfIdle(SessionId id, const Status& why) {
  Answers answers;
  std::shared_ptr<SessionRecord> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end() || waiters_.count(id) > 0) return false;
    {
      std::lock_guard<std::mutex> session_lock(it->second->mu);
      const SessionRecord& t = *it->second;
      const bool settled =
          t.residency == Residency::kResident || t.residency == Residency::kOffloaded;
      if (t.attached || t.generating || t.closed || !settled) return false;
    }
    s = EraseClosedLocked(id, answers);
  }
  Give(answers);
  return FinishClose(s, why, nullptr).ok();
}

int32_t SessionRegistry::ReapIdle(Clock::time_point now) {
  struct ToClose {
    SessionId id;
    bool idle_timeout;  // else offload_after without a snapshot directory
  };
  std::vector<ToClose> to_close;
  std::vector<std::shared_ptr<SessionRecord>> to_offload;
  std::vector<std::pair<SessionId, Waiter>> expired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, s] : sessions_) {
      std::lock_guard<std::mutex> session_lock(s->mu);
      if (s->attached || s->generating || s->closed) continue;
      const auto idle = now - s->detached_at;
      if (options_.idle_timeout.count() > 0 && idle >= options_.idle_timeout) {
        to_close.push_back({id, true});
      } else if (options_.offload_after.count() > 0 && idle >= options_.offload_after) {
        if (persister_ == nullptr) {
          if (s->residency == Residency::kResident) to_close.push_back({id, false});
        } else if (ClaimOffloadLocked(*s)) {
          to_offload.push_back(s);
        }
      }
    }
    // Waits are bounded in real time, whatever `now` the idle checks are asked about.
    const Clock::time_point real_now = Clock::now();
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      auto& list = it->second;
      for (auto w = list.begin(); w != list.end();) {
        if (w->deadline <= real_now) {
          expired.emplace_back(it->first, std::move(*w));
          w = list.erase(w);
        } else {
          ++w;
        }
      }
      it = list.empty() ? waiters_.erase(it) : std::next(it);
    }
  }
  // The transition goes on; only the wait ends. The session stays whole for the next Resume.
  for (auto& [id, w] : expired) {
    if (hooks_.on_resume_waited) {
      hooks_.on_resume_waited(id, "timed_out",
                              std::chrono::duration<double>(Clock::now() - w.since).count());
    }
    w.done(
        UnavailableError("resume.session_id: the session is still being moved between memory "
                         "and its snapshot after " +
                         std::to_string(options_.resume_wait.count()) +
                         " ms (sessions.resume_wait); retry in a few seconds"));
  }
  int32_t acted = 0;
  for (const std::shared_ptr<SessionRecord>& s : to_offload) {
    // When not: it changed meanwhile, or the write failed (full disk, read-only directory):
    // it keeps serving from memory, and the persister has counted and logged the failure.
    acted += OffloadClaimed(s, "offload").ok();
  }
  for (const ToClose& c : to_close) {
    std::shared_ptr<SessionRecord> s = Find(c.id);
    if (s == nullptr) continue;
    if (c.idle_timeout && UsedElsewhere(s, now)) continue;
    acted += CloseIfIdle(
        c.id, CancelledError(c.idle_timeout ? "idle timeout" : "idle for sessions.offload_after"));
  }
  return acted + EnforceDetachedCaps();
}

void SessionRegistry::ReaperLoop() {
  // Wakes at least every second, or a tenth of the shortest timeout when that is shorter; a
  // waiting Resume's resume_wait is among them, so its UNAVAILABLE is at most that late.
  std::chrono::milliseconds shortest{std::chrono::seconds(1)};
  for (std::chrono::milliseconds t :
       {options_.idle_timeout, options_.offload_after, options_.resume_wait}) {
    if (t.count() > 0) shortest = std::min(shortest, t);
  }
  const auto period = std::clamp<std::chrono::milliseconds>(
      shortest / 10, std::chrono::milliseconds(10), std::chrono::seconds(1));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    reaper_cv_.wait_for(lock, period);
    if (stopping_) return;
    lock.unlock();
    ReapIdle(Clock::now());
    lock.lock();
  }
}

bool SessionRegistry::PersistAll(Clock::time_point deadline) {
  if (persister_ == nullptr) return true;
  persister_->UrgentAll();
  return persister_->WaitIdle(deadline);
}

std::shared_ptr<SessionRecord> SessionRegistry::Find(SessionId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<SessionRecord>> SessionRegistry::All() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<SessionRecord>> out;
  for (const auto& [id, s] : sessions_) out.push_back(s);
  return out;
}

}  // namespace streamd
