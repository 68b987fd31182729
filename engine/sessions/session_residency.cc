// SessionRegistry: the residency transitions of a session (session_registry.h has the state
// machine): offload (reaper, per-client cap, room for an Open), a stale copy dropped for another
// replica's newer snapshot, load (a Resume's, or restore at start), and sessions that come from
// disk (the start-up scan, an import).
#include <algorithm>
#include <utility>

#include "engine/sessions/session_registry.h"

namespace streamd {
namespace {

// A snapshot holds no open partial Append (the engine keeps it in memory only): the session that
// comes back from disk has it as final input. The stream's bookkeeping must agree, or the next
// Append would be encoded as the partial's replacement (from the chat state before it) while
// the engine appends it after the partial.
void ForgetPartial(SessionRecord& s) {
  s.partial_open = false;
  s.partial_tokens.clear();
}

ChatState ParseChatState(const std::string& text) {
  if (text.size() == 1 && text[0] >= '0' && text[0] <= '4') {
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

const char* ResidencyName(Residency r) {
  switch (r) {
    case Residency::kResident:
      return "resident";
    case Residency::kOffloading:
      return "offloading";
    case Residency::kOffloaded:
      return "offloaded";
    case Residency::kLoading:
      return "loading";
  }
  return "unknown";
}

void SessionRegistry::Transitioned(SessionId id, std::string_view transition,
                                   std::string_view outcome, Clock::time_point since) const {
  if (hooks_.on_transition) {
    hooks_.on_transition(id, transition, outcome,
                         std::chrono::duration<double>(Clock::now() - since).count());
  }
}

void SessionRegistry::ResolveWaitersLocked(const std::shared_ptr<SessionRecord>& session,
                                           Answers& answers) {
  auto it = waiters_.find(session->id);
  if (it == waiters_.end()) return;
  std::vector<Waiter> waiting = std::move(it->second);
  waiters_.erase(it);
  for (Waiter& w : waiting) AttachOrWaitLocked(session, std::move(w), answers);
}

// ---- Offload ------------------------------------------------------------------------------

bool SessionRegistry::ClaimOffloadLocked(SessionRecord& s) const {
  if (s.attached || s.generating || s.closed || s.residency != Residency::kResident) return false;
  if (waiters_.count(s.id) > 0) return false;
  s.residency = Residency::kOffloading;
  s.transition_since = Clock::now();
  return true;
}

Status SessionRegistry::OffloadClaimed(const std::shared_ptr<SessionRecord>& s,
                                       std::string_view why) {
  Clock::time_point since;
  {
    std::lock_guard<std::mutex> session_lock(s->mu);
    since = s->transition_since;
  }
  Pause(TransitionPoint::kOffloadClaimed, s->id);
  const Status offloaded =
      persister_->Offload(s->id, [&] { Pause(TransitionPoint::kOffloadWritten, s->id); });
  std::optional<SnapshotSummary> stored;
  if (offloaded.ok()) {
    if (auto summary = persister_->Summary(s->id); summary.ok()) stored = *std::move(summary);
  }
  EndOffload(s, offloaded.ok(), std::move(stored));
  if (offloaded.ok() && hooks_.on_offload) hooks_.on_offload();
  bool closed;
  {
    std::lock_guard<std::mutex> session_lock(s->mu);
    closed = s->closed;
  }
  Transitioned(s->id, why, closed ? "closed" : offloaded.ok() ? "ok" : "kept", since);
  return offloaded;
}

void SessionRegistry::EndOffload(const std::shared_ptr<SessionRecord>& s, bool freed,
                                 std::optional<SnapshotSummary> stored) {
  Answers answers;
  bool closed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::lock_guard<std::mutex> session_lock(s->mu);
    s->residency = freed ? Residency::kOffloaded : Residency::kResident;
    if (freed) {
      if (stored) s->stored = *std::move(stored);
      ForgetPartial(*s);
    }
    closed = s->closed;
    // Closed meanwhile: Close answered its Resumes. Else they are attached now (it stayed
    // resident) or wait for the load that the first of them starts.
    if (!closed) ResolveWaitersLocked(s, answers);
  }
  if (closed) EndClosedTransition(s->id, /*in_engine=*/!freed);
  Give(answers);
}

void SessionRegistry::EndClosedTransition(SessionId id, bool in_engine) {
  if (in_engine) (void)engine_.Close(id);
  // After the write the transition may have made: the file goes for good. Forget makes the
  // persister refuse the id at once, so the registry can stop refusing it itself.
  if (persister_ != nullptr) persister_->Forget(id);
  std::lock_guard<std::mutex> lock(mu_);
  closing_.erase(id);
}

bool SessionRegistry::OffloadOneForRoom() {
  if (persister_ == nullptr) return false;
  while (true) {
    std::shared_ptr<SessionRecord> victim;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, s] : sessions_) {
        std::lock_guard<std::mutex> session_lock(s->mu);
        if (s->attached || s->closed || s->generating || s->residency != Residency::kResident ||
            waiters_.count(id) > 0) {
          continue;
        }
        if (victim == nullptr || s->detached_at < victim->detached_at) victim = s;
      }
      if (victim == nullptr) return false;
      std::lock_guard<std::mutex> session_lock(victim->mu);
      if (!ClaimOffloadLocked(*victim)) return false;
    }
    const Status offloaded = OffloadClaimed(victim, "offload");
    if (offloaded.ok()) return true;
    // Changed meanwhile, or resumed while it was written: try the next one. A failed write
    // (full disk) makes room for nobody: stop.
    if (offloaded.code() != StatusCode::kFailedPrecondition) return false;
    std::lock_guard<std::mutex> session_lock(victim->mu);
    if (!victim->attached) return false;  // it did not move on: do not spin on it
  }
}

int32_t SessionRegistry::EnforceDetachedCaps() {
  if (options_.max_detached_share >= 1.0) return 0;
  const EngineStats stats = engine_.Stats();
  const auto cap = static_cast<int64_t>(options_.max_detached_share *
                                        std::max(0, stats.blocks_total - stats.blocks_headroom));
  struct Detached {
    Clock::time_point since;
    std::shared_ptr<SessionRecord> session;
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
      bool moved = false;
      if (persister_ != nullptr) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          std::lock_guard<std::mutex> session_lock(d.session->mu);  // resumed meanwhile?
          if (!ClaimOffloadLocked(*d.session)) continue;
        }
        moved = OffloadClaimed(d.session, "offload").ok();
      } else {
        moved = CloseIfIdle(d.session->id,
                            CancelledError("its client's detached sessions held more than "
                                           "sessions.max_detached_share of the KV pool"));
      }
      if (moved) {
        held[client] -= d.session->max_blocks;
        ++acted;
      }
    }
  }
  return acted;
}

void SessionRegistry::DropIfStale(const std::shared_ptr<SessionRecord>& s) {
  {
    std::lock_guard<std::mutex> session_lock(s->mu);
    if (s->residency != Residency::kResident || s->attached || s->closed) return;
  }
  // Another replica sharing the directory wrote this session after we last wrote or read it:
  // its file is the session now, our resident copy an old one.
  std::optional<SnapshotSummary> summary = persister_->NewerElsewhere(s->id);
  if (!summary) return;
  Clock::time_point since;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::lock_guard<std::mutex> session_lock(s->mu);
    if (!ClaimOffloadLocked(*s)) return;
    since = s->transition_since;
  }
  (void)engine_.Close(s->id);
  EndOffload(s, /*freed=*/true, std::move(summary));
  Transitioned(s->id, "drop_stale", "ok", since);
}

bool SessionRegistry::UsedElsewhere(const std::shared_ptr<SessionRecord>& s,
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

// ---- Load ---------------------------------------------------------------------------------

void SessionRegistry::LoaderLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (loads_.empty()) {
      loader_cv_.wait(lock);
      continue;
    }
    const LoadRequest request = loads_.front();
    loads_.pop_front();
    if (!request.for_resume && background_loads_paused_) continue;  // stays on disk
    loading_now_ = request.id;
    lock.unlock();
    LoadOne(request);
    lock.lock();
    loading_now_ = SessionId{};
  }
}

void SessionRegistry::LoadOne(const LoadRequest& request) {
  const SessionId id = request.id;
  std::shared_ptr<SessionRecord> s;
  bool closing = false;  // closed while this load was queued: its file is left to us
  Clock::time_point since;
  Answers early;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = sessions_.find(id); it != sessions_.end()) s = it->second;
    closing = closing_.count(id) > 0;
    if (s != nullptr) {
      std::lock_guard<std::mutex> session_lock(s->mu);
      if (s->closed || s->residency == Residency::kOffloading) {
        // Closed (Close answered its Resumes), or offloading (the offload's end starts the
        // load its Resumes need): nothing to load.
      } else if (s->residency == Residency::kResident) {
        ResolveWaitersLocked(s, early);  // a background request behind a Resume's
      } else {
        if (s->residency == Residency::kOffloaded) s->transition_since = Clock::now();
        s->residency = Residency::kLoading;
        since = s->transition_since;
      }
    }
  }
  if (since == Clock::time_point{}) {
    if (closing) EndClosedTransition(id, /*in_engine=*/false);
    return Give(early);
  }
  StatusOr<SessionPersister::Restored> loaded = persister_->Load(id);
  while (!loaded.ok() && loaded.status().code() == StatusCode::kResourceExhausted &&
         request.for_resume && OffloadOneForRoom()) {
    loaded = persister_->Load(id);
  }
  const bool in_engine = loaded.ok() || loaded.status().code() == StatusCode::kAlreadyExists;
  if (loaded.ok()) {
    ApplyMetadata(*s, loaded->metadata, loaded->last_token);
    if (hooks_.on_load) hooks_.on_load();
  }
  if (in_engine) {
    Pause(request.for_resume ? TransitionPoint::kResumeLoaded : TransitionPoint::kStartupLoaded,
          id);
  }
  Answers answers;
  bool closed = false;
  std::string_view outcome;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::lock_guard<std::mutex> session_lock(s->mu);
    closed = s->closed;
    EndLoadLocked(s, request, in_engine ? OkStatus() : loaded.status(), answers);
    outcome = closed                                  ? "closed"
              : s->residency == Residency::kResident  ? "ok"
              : s->residency == Residency::kOffloaded ? "no_room"
                                                      : "lost";
  }
  // Close found it loading and left its engine copy and its file to us.
  if (closed) EndClosedTransition(id, in_engine);
  Transitioned(id, request.for_resume ? "load" : "startup_load", outcome, since);
  Give(answers);
}

void SessionRegistry::EndLoadLocked(const std::shared_ptr<SessionRecord>& session,
                                    const LoadRequest& request, const Status& loaded,
                                    Answers& answers) {
  SessionRecord& s = *session;
  const SessionId id = s.id;
  if (s.closed) {  // Close answered its Resumes; the caller ends the close
    s.residency = loaded.ok() ? Residency::kResident : Residency::kOffloaded;
    return;
  }
  if (loaded.ok()) {
    s.residency = Residency::kResident;
    ResolveWaitersLocked(session, answers);
    return;
  }
  // Still on disk, for a later Resume: the pool has no room now (or the backend is down).
  const StatusCode code = loaded.code();
  Status answer;
  if (code == StatusCode::kResourceExhausted || code == StatusCode::kUnavailable) {
    s.residency = Residency::kOffloaded;
    if (!request.for_resume) background_loads_paused_ = true;  // the rest wait for a Resume
    answer = Status(code, "resume.session_id: session " + id.ToString() +
                              " is on disk and the KV pool has no room for it now (" +
                              loaded.message() + "); retry later");
  } else {
    // The snapshot cannot come back (moved aside as corrupt, another model, gone): the session
    // is lost to this daemon; say why, now and to later Resumes.
    answer = code == StatusCode::kNotFound
                 ? NotFoundError("resume.session_id: session " + id.ToString() +
                                 " could not be restored from its snapshot: " + loaded.message())
                 : CouldNotRestore(id, loaded);
    if (auto it = sessions_.find(id); it != sessions_.end() && it->second == session) {
      sessions_.erase(it);
    }
    if (answer.code() == StatusCode::kDataLoss) lost_[id] = answer;
    s.closed = true;
    s.residency = Residency::kOffloaded;
  }
  if (auto it = waiters_.find(id); it != waiters_.end()) {
    for (Waiter& w : it->second) answers.push_back({std::move(w.done), answer, w.since});
    waiters_.erase(it);
  }
}

// ---- Sessions that come from disk ---------------------------------------------------------

void SessionRegistry::ApplyMetadata(SessionRecord& s,
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

std::shared_ptr<SessionRecord> SessionRegistry::AddOffloaded(const SnapshotSummary& summary) {
  auto s = std::make_shared<SessionRecord>();
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

std::shared_ptr<SessionRecord> SessionRegistry::AdoptImported(
    const SnapshotSummary& summary, const std::map<std::string, std::string>& metadata,
    int32_t last_token, bool resident) {
  std::shared_ptr<SessionRecord> s = AddOffloaded(summary);
  ApplyMetadata(*s, metadata, last_token);
  std::lock_guard<std::mutex> session_lock(s->mu);
  s->residency = resident ? Residency::kResident : Residency::kOffloaded;
  s->detached_at = Clock::now();
  return s;
}

}  // namespace streamd
