#include "server/session_registry.h"

#include <algorithm>
#include <utility>

namespace streamd::server {
namespace {

// A snapshot holds no open partial Append (the engine keeps it in memory only): the session that
// comes back from disk has it as final input. The stream's bookkeeping must agree, or the next
// Append would be encoded as the partial's replacement (from the chat state before it) while
// the engine appends it after the partial.
void ForgetPartial(ServerSession& s) {
  s.partial_open = false;
  s.partial_tokens.clear();
}

std::string Seconds(std::chrono::milliseconds d) { return std::to_string(d.count() / 1000); }

// Longer than any one step (a full prefill chunk on a slow CPU); only ever waited for on the
// admission thread, after an offload.
constexpr std::chrono::milliseconds kFreedBlocksWait{2000};

ChatState ParseChatState(const std::string& text) {
  if (text.size() == 1 && text[0] >= '0' && text[0] <= '3') {
    return static_cast<ChatState>(text[0] - '0');
  }
  return ChatState::kNone;  // unknown or absent: raw context, no open turn
}

// What a Resume of a session whose snapshot was refused (moved aside) is told, now and later.
Status CouldNotRestore(SessionId id, const Status& why) {
  return DataLossError("resume.session_id: session " + id.ToString() +
                       " could not be restored from its snapshot: " + why.message());
}

}  // namespace

Status SessionNotFound(SessionId id, const RegistryOptions& options) {
  return NotFoundError("session " + id.ToString() +
                       " does not exist (never opened, closed, or detached for longer than the "
                       "idle timeout of " +
                       Seconds(options.idle_timeout) + " s)");
}

SessionRegistry::SessionRegistry(Engine& engine, RegistryOptions options,
                                 SessionPersister* persister)
    : engine_(engine), options_(options), persister_(persister) {
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
  // Resumes still waiting for a load get an answer.
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

void SessionRegistry::ApplyMetadata(ServerSession& s,
                                    const std::map<std::string, std::string>& metadata,
                                    int32_t last_token) {
  auto chat = metadata.find(kMetadataChat);
  auto has_input = metadata.find(kMetadataHasInput);
  ChatState state = chat == metadata.end() ? ChatState::kNone : ParseChatState(chat->second);
  // A snapshot taken between a generation's end and the save of its chat state: the
  // assistant turn the model closed (its end-of-turn token is the context's last) is closed.
  if (state == ChatState::kAssistantOpen && last_token >= 0 &&
      engine_.tokenizer().IsEndOfGeneration(last_token)) {
    ChatFormatter::OnGenerationEnd(true, &state);
  }
  std::lock_guard<std::mutex> lock(s.mu);
  s.chat = state;
  s.has_input = has_input != metadata.end() && has_input->second == "1";
}

std::shared_ptr<ServerSession> SessionRegistry::AddOffloaded(const SnapshotSummary& summary) {
  auto s = std::make_shared<ServerSession>();
  s->id = summary.id;
  s->options.tenant = summary.tenant;
  s->options.mode = summary.mode;
  s->options.sinks = summary.sinks;
  s->options.window = summary.window;
  s->options.sampling = summary.sampling;
  s->spec = SessionCache::Effective(
      {summary.mode, summary.sinks, summary.window, engine_.config().max_chunk},
      engine_.model().config().context_length);
  s->max_blocks = SessionCache::BoundBlocks(s->spec, engine_.config().block_size);
  s->residency = Residency::kOffloaded;
  s->stored = summary;
  // Retention counts from when it was last saved (as good as its detach time, after a restart).
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const int64_t saved_ago_ms = std::max<int64_t>(0, now_ms - summary.saved_unix_ms);
  s->detached_at = Clock::now() - std::chrono::milliseconds(saved_ago_ms);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.emplace(summary.id, s).first;
  return it->second;
}

int32_t SessionRegistry::RestoreFromStore(bool load) {
  if (persister_ == nullptr) return 0;
  std::vector<std::pair<SessionId, Status>> refused;
  const std::vector<SnapshotSummary> stored = persister_->Scan(&refused);  // newest first
  {
    // Refused by the scan (a damaged header, another model or format version): a Resume of
    // one must say so, as for a snapshot refused when it is loaded, not "does not exist".
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, why] : refused) lost_[id] = CouldNotRestore(id, why);
  }
  for (const SnapshotSummary& summary : stored) {
    AddOffloaded(summary);
    if (load) {
      std::lock_guard<std::mutex> lock(mu_);
      loads_.push_back({summary.id, false});
    }
  }
  loader_cv_.notify_all();
  return static_cast<int32_t>(stored.size());
}

StatusOr<std::shared_ptr<ServerSession>> SessionRegistry::Open(const SessionOptions& options,
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
  auto s = std::make_shared<ServerSession>();
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

StatusOr<std::shared_ptr<ServerSession>> SessionRegistry::Fork(
    const std::shared_ptr<ServerSession>& parent) {
  StatusOr<SessionId> id = engine_.Fork(parent->id);
  if (!id.ok() && id.status().code() == StatusCode::kResourceExhausted && OffloadOneForRoom()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the offload's step ends
    id = engine_.Fork(parent->id);
  }
  if (!id.ok()) return id.status();
  auto s = std::make_shared<ServerSession>();
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
  reaper_cv_.notify_all();  // the per-client cap counts it
  return s;
}

StatusOr<std::shared_ptr<ServerSession>> SessionRegistry::AttachResident(
    const std::shared_ptr<ServerSession>& s, std::weak_ptr<SessionOwner> owner) {
  std::lock_guard<std::mutex> session_lock(s->mu);
  if (s->closed) return SessionNotFound(s->id, options_);
  if (s->attached) {
    return FailedPreconditionError(
        "resume.session_id: session " + s->id.ToString() +
        " is attached to another stream; one stream drives a session at a time (end that "
        "stream first)");
  }
  s->owner = std::move(owner);
  s->attached = true;
  return s;
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
  std::shared_ptr<ServerSession> s = Find(id);
  if (s == nullptr && persister_ != nullptr) {
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
  if (s == nullptr) {
    std::unique_lock<std::mutex> lock(mu_);
    auto lost = lost_.find(id);
    // Whose lost session it was is not known: only callers who see every tenant learn of it.
    const Status why = lost != lost_.end() && !tenant ? lost->second : SessionNotFound(id, options_);
    lock.unlock();
    return done(why);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::lock_guard<std::mutex> session_lock(s->mu);
    if (s->closed) {
      // fall through to the answer below, outside the locks
    } else if (s->residency != Residency::kResident) {
      if (s->attached) {
        // cannot happen for a non-resident session; answered below as for a resident one
      } else {
        waiters_[id].push_back({std::move(owner), std::move(done),
                                Clock::now() + options_.resume_wait});
        if (s->residency == Residency::kOffloaded) {
          s->residency = Residency::kLoading;
          loads_.push_front({id, true});
        } else {
          // Already being loaded (start-up): move its request to the front.
          auto it = std::find_if(loads_.begin(), loads_.end(),
                                 [&](const LoadRequest& r) { return r.id == id; });
          if (it != loads_.end()) {
            loads_.erase(it);
            loads_.push_front({id, true});
          }
        }
        loader_cv_.notify_all();
        return;
      }
    }
  }
  done(AttachResident(s, std::move(owner)));
}

void SessionRegistry::DropIfStale(const std::shared_ptr<ServerSession>& s) {
  {
    std::lock_guard<std::mutex> session_lock(s->mu);
    if (s->residency != Residency::kResident || s->attached || s->closed) return;
  }
  // Another replica sharing the directory wrote this session after we last wrote or read it:
  // its file is the session now, our resident copy an old one.
  const std::optional<SnapshotSummary> summary = persister_->NewerElsewhere(s->id);
  if (!summary) return;
  {
    std::lock_guard<std::mutex> session_lock(s->mu);
    if (s->residency != Residency::kResident || s->attached || s->closed) return;
    s->residency = Residency::kOffloaded;
    s->stored = *summary;
    ForgetPartial(*s);
  }
  (void)engine_.Close(s->id);
}

bool SessionRegistry::UsedElsewhere(const std::shared_ptr<ServerSession>& s,
                                    Clock::time_point now) {
  if (persister_ == nullptr) return false;
  // Gone (closed elsewhere, or never written): nothing says it was used since.
  const StatusOr<int64_t> modified = persister_->store().ModifiedUnixMs(s->id);
  if (!modified.ok()) return false;
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const Clock::time_point used =
      Clock::now() - std::chrono::milliseconds(std::max<int64_t>(0, now_ms - *modified));
  if (now - used >= options_.idle_timeout) return false;
  {
    std::lock_guard<std::mutex> session_lock(s->mu);
    s->detached_at = std::max(s->detached_at, used);
  }
  DropIfStale(s);
  return true;
}

void SessionRegistry::Detach(const std::shared_ptr<ServerSession>& session,
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

void SessionRegistry::Touched(const ServerSession& session) {
  if (persister_ != nullptr) persister_->Touch(session.id);
}

Status SessionRegistry::Close(SessionId id, const Status& why, const SessionOwner* caller) {
  std::shared_ptr<ServerSession> s;
  std::shared_ptr<SessionOwner> owner;
  Residency residency;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return SessionNotFound(id, options_);
    s = it->second;
    sessions_.erase(it);
    std::lock_guard<std::mutex> session_lock(s->mu);
    s->closed = true;
    residency = s->residency;
    if (s->attached) owner = s->owner.lock();
  }
  // Cancels a running generation (its Done reaches the attached stream) and frees the blocks.
  // A session being loaded is closed by the loader once its load ends (it sees `closed`).
  Status closed = OkStatus();
  if (residency == Residency::kResident) closed = engine_.Close(id);
  if (persister_ != nullptr) persister_->Forget(id);
  if (hooks_.on_close) hooks_.on_close();
  if (owner != nullptr && owner.get() != caller) owner->OnSessionClosed(id, why);
  return closed;
}

bool SessionRegistry::OffloadOneForRoom() {
  if (persister_ == nullptr) return false;
  while (true) {
    std::shared_ptr<ServerSession> victim;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, s] : sessions_) {
        std::lock_guard<std::mutex> session_lock(s->mu);
        if (s->attached || s->closed || s->generating || s->residency != Residency::kResident) {
          continue;
        }
        if (victim == nullptr || s->detached_at < victim->detached_at) victim = s;
      }
    }
    if (victim == nullptr) return false;
    const Status offloaded = OffloadResident(victim);
    if (offloaded.ok()) return true;
    // Written but changed meanwhile, or resumed: try the next one. A failed write (full disk)
    // makes room for nobody: stop.
    if (offloaded.code() != StatusCode::kFailedPrecondition) return false;
    std::lock_guard<std::mutex> session_lock(victim->mu);
    if (!victim->attached) return false;  // it did not move on: do not spin on it
  }
}

void SessionRegistry::LoaderLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (loads_.empty()) {
      loader_cv_.wait(lock);
      continue;
    }
    const LoadRequest request = loads_.front();
    loads_.pop_front();
    if (!request.for_resume && background_loads_paused_) continue;  // stays offloaded
    lock.unlock();
    LoadOne(request);
    lock.lock();
  }
}

void SessionRegistry::LoadOne(const LoadRequest& request) {
  const SessionId id = request.id;
  std::shared_ptr<ServerSession> s = Find(id);
  const auto answer = [&](const StatusOr<std::shared_ptr<ServerSession>>& result) {
    std::vector<Waiter> waiting;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = waiters_.find(id);
      if (it != waiters_.end()) {
        waiting = std::move(it->second);
        waiters_.erase(it);
      }
    }
    for (Waiter& w : waiting) {
      w.done(result.ok() ? AttachResident(*result, std::move(w.owner))
                         : StatusOr<std::shared_ptr<ServerSession>>(result.status()));
    }
  };
  if (s == nullptr) return answer(SessionNotFound(id, options_));
  bool closed = false;
  bool resident = false;
  {
    std::lock_guard<std::mutex> session_lock(s->mu);
    closed = s->closed;
    resident = s->residency == Residency::kResident;
    if (!closed && !resident) s->residency = Residency::kLoading;
  }
  // Answered outside the session's lock: answer() takes the registry's (order: registry ->
  // session) and then each waiter's AttachResident() takes the session's again (TSan found
  // the inversion against Attach()).
  if (closed) return answer(SessionNotFound(id, options_));
  if (resident) return answer(s);
  StatusOr<SessionPersister::Restored> loaded = persister_->Load(id);
  while (!loaded.ok() && loaded.status().code() == StatusCode::kResourceExhausted &&
         request.for_resume && OffloadOneForRoom()) {
    loaded = persister_->Load(id);
  }
  const bool already = !loaded.ok() && loaded.status().code() == StatusCode::kAlreadyExists;
  if (loaded.ok() || already) {
    if (loaded.ok()) {
      ApplyMetadata(*s, loaded->metadata, loaded->last_token);
      if (hooks_.on_load) hooks_.on_load();
    }
    bool closed_meanwhile;
    {
      std::lock_guard<std::mutex> session_lock(s->mu);
      s->residency = Residency::kResident;
      closed_meanwhile = s->closed;
    }
    if (closed_meanwhile) {
      (void)engine_.Close(id);  // Close found it loading and left the engine to us
      return answer(SessionNotFound(id, options_));
    }
    return answer(s);
  }
  const Status& why = loaded.status();
  if (why.code() == StatusCode::kResourceExhausted || why.code() == StatusCode::kUnavailable) {
    {
      std::lock_guard<std::mutex> session_lock(s->mu);
      s->residency = Residency::kOffloaded;  // still on disk, for a later Resume
    }
    if (!request.for_resume) {
      std::lock_guard<std::mutex> lock(mu_);
      background_loads_paused_ = true;  // the pool is full: the rest wait for a Resume
    }
    return answer(Status(why.code(), "resume.session_id: session " + id.ToString() +
                                         " is on disk and the KV pool has no room for it now (" +
                                         why.message() + "); retry later"));
  }
  // The snapshot cannot come back (moved aside as corrupt, another model, gone): the session
  // is lost to this daemon; say why, now and to later Resumes.
  const Status lost =
      why.code() == StatusCode::kNotFound
          ? NotFoundError("resume.session_id: session " + id.ToString() +
                          " could not be restored from its snapshot: " + why.message())
          : CouldNotRestore(id, why);
  {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.erase(id);
    if (lost.code() == StatusCode::kDataLoss) lost_[id] = lost;
    std::lock_guard<std::mutex> session_lock(s->mu);
    s->closed = true;
  }
  answer(lost);
}

int32_t SessionRegistry::ReapIdle(Clock::time_point now) {
  std::vector<SessionId> to_close, to_offload;
  std::vector<Waiter> expired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, s] : sessions_) {
      std::lock_guard<std::mutex> session_lock(s->mu);
      if (s->attached || s->generating || s->residency == Residency::kLoading) continue;
      const auto idle = now - s->detached_at;
      if (options_.idle_timeout.count() > 0 && idle >= options_.idle_timeout) {
        to_close.push_back(id);
      } else if (s->residency == Residency::kResident && options_.offload_after.count() > 0 &&
                 idle >= options_.offload_after) {
        to_offload.push_back(id);
      }
    }
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      auto& list = it->second;
      for (auto w = list.begin(); w != list.end();) {
        if (w->deadline <= now) {
          expired.push_back(std::move(*w));
          w = list.erase(w);
        } else {
          ++w;
        }
      }
      it = list.empty() ? waiters_.erase(it) : std::next(it);
    }
  }
  for (Waiter& w : expired) {
    w.done(UnavailableError("resume.session_id: the session is still being restored from its "
                            "snapshot after " +
                            std::to_string(options_.resume_wait.count()) +
                            " ms; retry in a few seconds"));
  }
  int32_t acted = 0;
  for (SessionId id : to_offload) {
    // A Resume may have won the race; both paths re-check under the session's lock.
    std::shared_ptr<ServerSession> s = Find(id);
    if (s == nullptr) continue;
    {
      std::lock_guard<std::mutex> session_lock(s->mu);
      if (s->attached || s->residency != Residency::kResident) continue;
    }
    if (persister_ == nullptr) {
      acted += Close(id, CancelledError("idle for sessions.offload_after")).ok();
      continue;
    }
    // When not: it changed meanwhile, or the write failed (full disk, read-only directory):
    // it keeps serving from memory, and the persister has counted and logged the failure.
    acted += OffloadResident(s).ok();
  }
  for (SessionId id : to_close) {
    std::shared_ptr<ServerSession> s = Find(id);
    if (s == nullptr) continue;
    {
      std::lock_guard<std::mutex> session_lock(s->mu);
      if (s->attached) continue;
    }
    if (UsedElsewhere(s, now)) continue;
    acted += Close(id, CancelledError("idle timeout")).ok();
  }
  return acted + EnforceDetachedCaps();
}

Status SessionRegistry::OffloadResident(const std::shared_ptr<ServerSession>& s) {
  const Status offloaded = persister_->Offload(s->id);
  if (!offloaded.ok()) return offloaded;
  auto summary = persister_->Summary(s->id);
  {
    std::lock_guard<std::mutex> session_lock(s->mu);
    s->residency = Residency::kOffloaded;
    if (summary.ok()) s->stored = *summary;
    ForgetPartial(*s);
  }
  if (hooks_.on_offload) hooks_.on_offload();
  return OkStatus();
}

int32_t SessionRegistry::EnforceDetachedCaps() {
  if (options_.max_detached_share >= 1.0) return 0;
  const EngineStats stats = engine_.Stats();
  const auto cap = static_cast<int64_t>(options_.max_detached_share *
                                        std::max(0, stats.blocks_total - stats.blocks_headroom));
  struct Detached {
    Clock::time_point since;
    std::shared_ptr<ServerSession> session;
  };
  std::map<std::string, int64_t> held;  // blocks reserved by each client's detached sessions
  std::map<std::string, std::vector<Detached>> movable;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, s] : sessions_) {
      std::lock_guard<std::mutex> session_lock(s->mu);
      if (s->client.empty() || s->attached || s->closed || s->residency != Residency::kResident) {
        continue;
      }
      held[s->client] += s->max_blocks;
      if (!s->generating) movable[s->client].push_back({s->detached_at, s});
    }
  }
  int32_t acted = 0;
  for (auto& [client, list] : movable) {
    std::sort(list.begin(), list.end(),
              [](const Detached& a, const Detached& b) { return a.since < b.since; });
    for (const Detached& d : list) {
      if (held[client] <= cap) break;
      {
        std::lock_guard<std::mutex> session_lock(d.session->mu);  // resumed meanwhile?
        if (d.session->attached || d.session->residency != Residency::kResident) continue;
      }
      const Status moved =
          persister_ != nullptr
              ? OffloadResident(d.session)
              : Close(d.session->id,
                      CancelledError("its client's detached sessions held more than "
                                     "sessions.max_detached_share of the KV pool"));
      if (moved.ok()) {
        held[client] -= d.session->max_blocks;
        ++acted;
      }
    }
  }
  return acted;
}

void SessionRegistry::ReaperLoop() {
  // Wakes at least every second, or a tenth of the shortest timeout when that is shorter.
  std::chrono::milliseconds shortest{std::chrono::seconds(1)};
  for (std::chrono::milliseconds t : {options_.idle_timeout, options_.offload_after}) {
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

std::shared_ptr<ServerSession> SessionRegistry::AdoptImported(
    const SnapshotSummary& summary, const std::map<std::string, std::string>& metadata,
    int32_t last_token, bool resident) {
  std::shared_ptr<ServerSession> s = AddOffloaded(summary);
  ApplyMetadata(*s, metadata, last_token);
  std::lock_guard<std::mutex> session_lock(s->mu);
  s->residency = resident ? Residency::kResident : Residency::kOffloaded;
  s->detached_at = Clock::now();
  return s;
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
