#include "engine/core/session_persister.h"

#include <algorithm>
#include <utility>

namespace streamd {
namespace {

constexpr std::chrono::milliseconds kMaxBackoff{30'000};
// How long an Import waits for the removal of a just-closed session's file (one file delete,
// behind at most one write in flight).
constexpr std::chrono::seconds kForgetWait{5};

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int32_t LastToken(const SessionState& s) {
  if (!s.pending.empty()) return s.pending.back();
  return s.cached_tokens.empty() ? -1 : s.cached_tokens.back();
}

// Errors that say "not now" rather than "broken": no retry, no error hook.
bool IsNotNow(const Status& s) {
  return s.code() == StatusCode::kNotFound || s.code() == StatusCode::kFailedPrecondition ||
         s.code() == StatusCode::kUnavailable;
}

}  // namespace

SessionPersister::Entry& SessionPersister::NoteStoredLocked(SessionId id, uint64_t revision,
                                                            bool written) {
  Entry& e = entries_[id];
  e.stored = true;
  e.stored_revision = revision;
  if (written) e.last_write = Clock::now();
  return e;
}

SessionPersister::SessionPersister(Engine& engine, std::unique_ptr<SnapshotStore> store,
                                   SnapshotContext context, PersisterOptions options,
                                   PersisterHooks hooks)
    : engine_(engine),
      store_(std::move(store)),
      context_(std::move(context)),
      options_(options),
      hooks_(std::move(hooks)) {
  writer_ = std::thread([this] { Loop(); });
}

SessionPersister::~SessionPersister() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  writer_.join();
  // Writes dropped unwritten: whoever waits for one is told all the same.
  for (auto& [id, e] : entries_) {
    for (auto& f : e.on_written) f();
  }
}

void SessionPersister::Schedule(SessionId id, bool urgent, std::function<void()> written) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_ || entries_[id].forget) {
      lock.unlock();
      if (written) written();
      return;
    }
    Entry& e = entries_[id];
    if (written) e.on_written.push_back(std::move(written));
    // A session never written is due at once: last_write is then the steady clock's epoch (the
    // boot), so epoch + interval would hold a first write back until an hour after boot with
    // snapshot_interval = 1h.
    const Clock::time_point now = Clock::now();
    const Clock::time_point due = urgent ? Clock::time_point{}
                                  : e.last_write == Clock::time_point{}
                                      ? now
                                      : std::max(now, e.last_write + options_.interval);
    if (e.queued) {
      if (!urgent || e.urgent) return;  // already queued, as early as this asks
      queue_.erase({e.due, id});
    }
    e.queued = true;
    e.urgent = urgent;
    e.due = due;
    queue_.insert({due, id});
  }
  cv_.notify_all();
}

void SessionPersister::Touch(SessionId id) { Schedule(id, false); }
void SessionPersister::Urgent(SessionId id, std::function<void()> written) {
  Schedule(id, true, std::move(written));
}

void SessionPersister::UrgentAll() {
  for (const SessionInfo& info : engine_.List()) Urgent(info.id);
}

void SessionPersister::Forget(SessionId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    Entry& e = entries_[id];
    if (e.queued) queue_.erase({e.due, id});
    e.forget = true;
    e.queued = true;
    e.urgent = true;
    e.due = Clock::time_point{};
    queue_.insert({e.due, id});
  }
  cv_.notify_all();
}

bool SessionPersister::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_until(lock, deadline, [&] { return queue_.empty() && in_progress_ == 0; });
}

uint64_t SessionPersister::stored_revision(SessionId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  return it == entries_.end() ? 0 : it->second.stored_revision;
}

void SessionPersister::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (queue_.empty()) {
      idle_cv_.notify_all();
      cv_.wait(lock);
      continue;
    }
    const auto [due, id] = *queue_.begin();
    if (due > Clock::now()) {
      cv_.wait_until(lock, due);
      continue;
    }
    queue_.erase(queue_.begin());
    Entry& e = entries_[id];
    e.queued = false;
    e.urgent = false;
    const bool forget = e.forget;
    // Urgent's callbacks wait for this write; those that come while it runs, for the next one.
    std::vector<std::function<void()>> written = std::move(e.on_written);
    e.on_written.clear();
    ++in_progress_;
    lock.unlock();
    Status s;
    if (forget) {
      std::lock_guard<std::mutex> io(write_mu_);
      s = store_->Remove(id);
    } else {
      bool skipped = false;
      s = WriteNow(id, &skipped);
    }
    for (auto& f : written) f();
    lock.lock();
    --in_progress_;
    auto it = entries_.find(id);
    if (forget) {
      if (it != entries_.end() && it->second.forget && !it->second.queued) entries_.erase(it);
      forgotten_cv_.notify_all();
      if (!s.ok() && hooks_.on_write_failed) {
        lock.unlock();
        hooks_.on_write_failed(id, s);
        lock.lock();
      }
      continue;
    }
    if (it == entries_.end()) continue;
    Entry& after = it->second;
    if (s.ok() || IsNotNow(s)) {
      after.backoff = std::chrono::milliseconds{0};
      if (s.code() == StatusCode::kNotFound && !after.stored && !after.queued) {
        entries_.erase(it);  // closed before it was ever written
      }
      continue;
    }
    // A failed write: retried with backoff while the session keeps serving from memory.
    NoteFailedWrite(after);
    if (!after.queued && !after.forget) {
      after.queued = true;
      after.due = after.retry_at;
      queue_.insert({after.due, id});
    }
  }
}

void SessionPersister::NoteFailedWrite(Entry& e) {
  e.backoff = e.backoff.count() == 0 ? options_.retry_after : std::min(e.backoff * 2, kMaxBackoff);
  e.retry_at = Clock::now() + e.backoff;
}

Status SessionPersister::WriteNow(SessionId id, bool* skipped) {
  std::lock_guard<std::mutex> io(write_mu_);
  *skipped = false;
  STREAMD_ASSIGN_OR_RETURN(const SessionInfo info, engine_.Get(id));
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(id);
    if (it != entries_.end() && it->second.forget) return NotFoundError("session closed");
    *skipped =
        it != entries_.end() && it->second.stored && it->second.stored_revision == info.revision;
  }
  if (*skipped) {
    // Unchanged since its last write: the file only learns that the session was used now, so
    // that another replica sharing the directory does not end it as idle (a file that is gone,
    // the session closed elsewhere, stays gone).
    (void)store_->Touch(id);
    return OkStatus();
  }
  const Clock::time_point start = Clock::now();
  // The K/V are gathered from the pool straight into the snapshot's KV section.
  STREAMD_RETURN_IF_ERROR(engine_.CaptureInto(id, &scratch_, [this](const SessionState& meta) {
    const size_t size = EncodedSnapshotSizeForKv(meta, context_);
    encoded_.Reserve(size);  // grows once, then is reused
    return static_cast<void*>(encoded_.data() + SnapshotKvOffset(meta, context_));
  }));
  const SessionState& state = scratch_;
  STREAMD_ASSIGN_OR_RETURN(
      const size_t encoded,
      EncodeSnapshotAroundKv(state, context_, {encoded_.data(), encoded_.capacity()}));
  const std::span<const uint8_t> bytes(encoded_.data(), encoded);
  const Status written = store_->Write(id, encoded_, encoded);
  if (!written.ok()) {
    if (hooks_.on_write_failed) hooks_.on_write_failed(id, written);
    return written;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = NoteStoredLocked(id, state.revision, /*written=*/true);
    e.backoff = std::chrono::milliseconds{0};
    e.retry_at = {};
  }
  // Taken mid-prefill: written again once the K/V have caught up, so a restore need not run
  // that prefill again.
  if (state.pending.size() > 1) Touch(id);
  if (hooks_.on_written) {
    hooks_.on_written(id, static_cast<int64_t>(bytes.size()), SecondsSince(start));
  }
  return OkStatus();
}

Status SessionPersister::Offload(SessionId id, const std::function<void()>& after_write) {
  STREAMD_ASSIGN_OR_RETURN(const SessionInfo info, engine_.Get(id));
  if (info.generating) {
    return FailedPreconditionError("session " + id.ToString() + " is generating");
  }
  {
    // The reaper asks again at every pass (up to 100 a second): after a failed write (a full
    // disk, a read-only directory) that would write and log the whole snapshot each time,
    // bypassing the writer's backoff. Wait for it instead.
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(id);
    if (it != entries_.end() && Clock::now() < it->second.retry_at) {
      return UnavailableError("session " + id.ToString() +
                              ": its last snapshot write failed; not retried before " +
                              std::to_string(it->second.backoff.count()) + " ms after it");
    }
  }
  bool skipped = false;
  const Status written = WriteNow(id, &skipped);
  if (!written.ok()) {
    if (!IsNotNow(written)) {
      std::lock_guard<std::mutex> lock(mu_);
      NoteFailedWrite(entries_[id]);
    }
    return written;
  }
  if (after_write) after_write();
  STREAMD_RETURN_IF_ERROR(engine_.CloseIfUnchanged(id, stored_revision(id)));
  // Written around the page cache: read it back in now, off the Resume's path.
  (void)store_->WarmUp(id);
  return OkStatus();
}

bool SessionPersister::OfAnotherModel(std::span<const uint8_t> bytes) const {
  StatusOr<SnapshotSummary> summary = ReadSnapshotSummary(bytes);
  return summary.ok() && summary->model_fingerprint != context_.model_fingerprint;
}

Status SessionPersister::RejectFile(const std::string& file, const Status& why, bool move) {
  if (!move) {
    // Another model's snapshot: refused here, but that model's daemon may still want it.
    if (hooks_.on_rejected) hooks_.on_rejected(file, std::string(), why);
    return OkStatus();
  }
  auto moved = store_->Reject(file, std::string(StatusCodeName(why.code())) + " " + why.message());
  if (hooks_.on_rejected) hooks_.on_rejected(file, moved.ok() ? *moved : std::string(), why);
  return moved.ok() ? OkStatus() : moved.status();
}

StatusOr<SessionState> SessionPersister::Decode(std::span<const uint8_t> bytes,
                                                const std::string& file) {
  StatusOr<SessionState> state = DecodeSnapshot(bytes, context_);
  if (!state.ok() && !file.empty()) {
    (void)RejectFile(file, state.status(), /*move=*/!OfAnotherModel(bytes));
  }
  return state;
}

StatusOr<SessionPersister::Restored> SessionPersister::Load(SessionId id) {
  const Clock::time_point start = Clock::now();
  std::lock_guard<std::mutex> load_lock(load_mu_);
  STREAMD_ASSIGN_OR_RETURN(const size_t size, store_->ReadInto(id, &read_buffer_));
  const std::span<const uint8_t> bytes(read_buffer_.data(), size);
  const std::string file = id.ToString() + ".snap";
  // The K/V stay in the read buffer: restore copies them from there into the pool.
  KvView kv;
  StatusOr<SessionState> decoded = DecodeSnapshot(bytes, context_, &kv);
  if (!decoded.ok()) {
    (void)RejectFile(file, decoded.status(), /*move=*/!OfAnotherModel(bytes));
    return decoded.status();
  }
  SessionState& state = *decoded;
  if (state.id != id) {
    const Status wrong =
        DataLossError("the snapshot in " + file + " is of session " + state.id.ToString());
    (void)RejectFile(file, wrong);
    return wrong;
  }
  const Status restored = engine_.Restore(state, kv);
  if (restored.code() == StatusCode::kInvalidArgument) {
    // A sound snapshot this engine cannot take (its limits were lowered since): set aside.
    (void)RejectFile(file, restored);
    return restored;
  }
  STREAMD_RETURN_IF_ERROR(restored);
  {
    std::lock_guard<std::mutex> lock(mu_);
    NoteStoredLocked(id, state.revision, /*written=*/false);
  }
  if (hooks_.on_loaded) hooks_.on_loaded(id, static_cast<int64_t>(size), SecondsSince(start));
  Restored out;
  out.options.tenant = state.tenant;
  out.options.mode = state.mode;
  out.options.sinks = state.sinks;
  out.options.window = state.window;
  out.options.sampling = state.sampling;
  out.metadata = std::move(state.metadata);
  out.last_token = LastToken(state);
  out.bytes = static_cast<int64_t>(size);
  return out;
}

std::optional<SnapshotSummary> SessionPersister::NewerElsewhere(SessionId id) const {
  std::lock_guard<std::mutex> io(write_mu_);  // our write in flight lands and is noted first
  auto summary = Summary(id);
  if (!summary.ok() || summary->revision <= stored_revision(id)) return std::nullopt;
  return *std::move(summary);
}

StatusOr<SnapshotSummary> SessionPersister::Summary(SessionId id) const {
  {
    // Closed, its file not deleted yet: it must not be found (a Resume would bring it back).
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(id);
    if (it != entries_.end() && it->second.forget) {
      return NotFoundError("session " + id.ToString() + " was closed");
    }
  }
  STREAMD_ASSIGN_OR_RETURN(const std::vector<uint8_t> prefix,
                           store_->ReadPrefix(id, kSnapshotSummaryPrefixBytes));
  return ReadSnapshotSummary(prefix);
}

std::vector<SnapshotSummary> SessionPersister::Scan(
    std::vector<std::pair<SessionId, Status>>* refused) {
  std::vector<SnapshotSummary> out;
  auto listed = store_->List();
  if (!listed.ok()) {
    if (hooks_.on_write_failed) hooks_.on_write_failed(SessionId{}, listed.status());
    return out;
  }
  for (const StoredSnapshot& file : *listed) {
    StatusOr<SnapshotSummary> summary = Summary(file.id);
    Status why = summary.status();
    bool move = true;
    if (summary.ok() && summary->id != file.id) {
      why = DataLossError("the snapshot in " + file.file + " is of session " +
                          summary->id.ToString());
    } else if (summary.ok() && summary->model_fingerprint != context_.model_fingerprint) {
      // In this model's directory only by hand (a copy, or a directory shared by mistake):
      // named, refused and left where it is, never moved from under the model it belongs to.
      why = FailedPreconditionError("snapshot of another model: \"" + summary->model_name +
                                    "\" (fingerprint " + summary->model_fingerprint +
                                    "), this daemon serves \"" + context_.model_name + "\" (" +
                                    context_.model_fingerprint + ")");
      move = false;
    }
    if (!why.ok()) {
      (void)RejectFile(file.file, why, move);
      if (refused != nullptr) refused->emplace_back(file.id, why);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      NoteStoredLocked(file.id, summary->revision, /*written=*/false);
    }
    out.push_back(*std::move(summary));
  }
  std::sort(out.begin(), out.end(), [](const SnapshotSummary& a, const SnapshotSummary& b) {
    return a.saved_unix_ms > b.saved_unix_ms;
  });
  return out;
}

StatusOr<std::vector<uint8_t>> SessionPersister::Export(SessionId id) {
  // From the engine when it is there; an offload may free it between the two calls, and then
  // its snapshot, complete before the close, is the session.
  StatusOr<SessionState> captured =
      engine_.Get(id).ok() ? engine_.Capture(id) : StatusOr<SessionState>(NotFoundError(""));
  if (!captured.ok() && captured.status().code() != StatusCode::kNotFound) {
    return captured.status();
  }
  if (captured.ok()) {
    const SessionState& state = *captured;
    std::vector<uint8_t> bytes = EncodeSnapshot(state, context_);
    std::lock_guard<std::mutex> io(write_mu_);
    if (store_->Write(id, bytes).ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      NoteStoredLocked(id, state.revision, /*written=*/true);
    }
    return bytes;
  }
  STREAMD_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, store_->Read(id));
  STREAMD_RETURN_IF_ERROR(Decode(bytes, id.ToString() + ".snap").status());
  return bytes;
}

StatusOr<SessionPersister::Imported> SessionPersister::Import(std::span<const uint8_t> bytes) {
  STREAMD_ASSIGN_OR_RETURN(SessionState state, Decode(bytes, ""));
  STREAMD_ASSIGN_OR_RETURN(SnapshotSummary summary, ReadSnapshotSummary(bytes));
  const SessionId id = state.id;
  {
    // A session closed just before (Forget) keeps its file until the writer thread removes it;
    // importing its snapshot back is allowed, so wait for that removal rather than refuse.
    // The removal decided on, it must also run before this write, or it would delete the
    // imported file.
    std::unique_lock<std::mutex> lock(mu_);
    forgotten_cv_.wait_for(lock, kForgetWait, [&] {
      auto it = entries_.find(id);
      return stopping_ || it == entries_.end() || !it->second.forget;
    });
  }
  if (engine_.Get(id).ok() || store_->ReadPrefix(id, 1).ok()) {
    return AlreadyExistsError("import: session " + id.ToString() + " already exists here");
  }
  {
    std::lock_guard<std::mutex> io(write_mu_);
    STREAMD_RETURN_IF_ERROR(store_->Write(id, bytes));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    NoteStoredLocked(id, state.revision, /*written=*/false).forget = false;
  }
  Imported out;
  out.summary = std::move(summary);
  out.restored.options.tenant = state.tenant;
  out.restored.options.mode = state.mode;
  out.restored.options.sinks = state.sinks;
  out.restored.options.window = state.window;
  out.restored.options.sampling = state.sampling;
  out.restored.metadata = state.metadata;
  out.restored.last_token = LastToken(state);
  out.restored.bytes = static_cast<int64_t>(bytes.size());
  const Status restored = engine_.Restore(state);
  if (restored.ok()) {
    out.resident = true;
  } else if (restored.code() != StatusCode::kResourceExhausted) {
    std::lock_guard<std::mutex> io(write_mu_);
    (void)store_->Remove(id);  // refused here: nothing of it stays
    return restored;
  }
  return out;
}

}  // namespace streamd
