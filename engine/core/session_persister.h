// SessionPersister: when sessions are written to the snapshot store, and how they come back.
//
// Writes (one writer thread, never the scheduler's):
//   Touch(id)   after an Append ack or a GenerationDone: the session is written within
//               `interval` of its last write (many touches coalesce into one write);
//   Urgent(id)  on detach and for every session on SIGTERM drain: written next, ahead of
//               touched ones; WaitIdle waits for the queue to empty (drain). With `written`,
//               that runs once the write is over (done, failed, or not needed): a stream ends
//               only after its session's snapshot is on disk, so that a Resume reaching another
//               replica that shares the directory reads the session as this one left it.
// A write captures the session (Engine::Capture: ~1 ms in which that session alone sits out
// the steps), encodes it and writes it atomically (SnapshotStore). Sessions whose revision is
// the one last written are not written again; a session that generates when its turn comes is
// skipped (its GenerationDone touches it again). A failed write (full disk, read-only
// directory) is counted and logged through the hooks, and retried with backoff (1 s, doubling up
// to 30 s); the session keeps serving from memory. Offload honours the same backoff: while it
// runs, an offload is refused without writing (UNAVAILABLE).
//
// Offload(id), Load(id), Export(id) and Import(bytes) run on their caller's thread (the
// registry's reaper and loader threads, or an RPC's worker), never on a gRPC reaction.
// A snapshot that cannot be read back (corrupt, truncated, another format version) is moved
// into rejected/ (never deleted), reported through on_rejected, and every other snapshot still
// loads. A snapshot of another model is refused the same way but left where it is: the store is
// this model's directory (model_snapshot_dir.h), and a file of another model found there was put
// there by hand; moving it would take it from the daemon it belongs to.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/core/engine.h"
#include "engine/core/snapshot_store.h"
#include "engine/snapshot/snapshot_format.h"

namespace streamd {

struct PersisterOptions {
  // At most one write per session per interval (sessions.snapshot_interval).
  std::chrono::milliseconds interval{2000};
  // First retry after a failed write; doubles up to 30 s.
  std::chrono::milliseconds retry_after{1000};
};

// Called on the persister's threads (or the caller's, for the synchronous calls). Optional.
struct PersisterHooks {
  std::function<void(SessionId, int64_t bytes, double seconds)> on_written;
  std::function<void(SessionId, const Status&)> on_write_failed;
  std::function<void(SessionId, int64_t bytes, double seconds)> on_loaded;
  // A file was refused: where it was moved aside, and why; `moved_to` is empty when it was left
  // where it is (another model's snapshot, or a move that failed).
  std::function<void(const std::string& file, const std::string& moved_to, const Status&)>
      on_rejected;
};

class SessionPersister {
 public:
  SessionPersister(Engine& engine, std::unique_ptr<SnapshotStore> store, SnapshotContext context,
                   PersisterOptions options, PersisterHooks hooks);
  ~SessionPersister();  // stops the writer; queued writes are dropped (WaitIdle first to drain)
  SessionPersister(const SessionPersister&) = delete;
  SessionPersister& operator=(const SessionPersister&) = delete;

  void Touch(SessionId id);
  // `written` (optional) runs on the writer thread after the write this call queues has been
  // attempted, whatever its outcome; on the caller's thread when the persister is stopping.
  void Urgent(SessionId id, std::function<void()> written = {});
  // Urgent for every session the engine holds.
  void UrgentAll();
  // True when every queued write finished before `deadline`.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);
  // The session is closed for good: queued writes are dropped and its snapshot deleted.
  void Forget(SessionId id);

  // Writes the session if it changed since its last write, then closes it in the engine unless
  // it changed meanwhile (FAILED_PRECONDITION: it stays resident). FAILED_PRECONDITION while it
  // generates; the write's error when the write fails (it stays resident), and UNAVAILABLE
  // without a write while the backoff after a failed one runs. Once closed, its snapshot is
  // read into the page cache in the background (SnapshotStore::WarmUp) for its Resume.
  // `after_write` (optional) runs on the caller's thread between the write and the close: the
  // snapshot is complete and its blocks are not freed yet (the registry's test pause point).
  Status Offload(SessionId id, const std::function<void()>& after_write = {});
  // What a restored session brings back for its owner (the server's chat state).
  struct Restored {
    SessionOptions options;
    std::map<std::string, std::string> metadata;
    int32_t last_token = -1;  // the context's last token (pending, else cached), -1 when empty
    int64_t bytes = 0;
  };
  // Reads the snapshot of `id`, checks it and restores it into the engine. NOT_FOUND without
  // a snapshot; a snapshot that cannot be read back, or that this engine cannot take (limits
  // lowered since), is moved aside and its error returned (another model's: only returned, the
  // file stays where it is); RESOURCE_EXHAUSTED
  // when it does not fit the pool now and ALREADY_EXISTS when it is resident (it stays on disk).
  StatusOr<Restored> Load(SessionId id);
  // Summaries of every snapshot in the store, newest first; unreadable files are moved aside,
  // and when `refused` is given, each one's session id (from its file name) and why is added
  // there, so that a later Resume of it can be told.
  std::vector<SnapshotSummary> Scan(std::vector<std::pair<SessionId, Status>>* refused = nullptr);
  // The summary of one stored snapshot (NOT_FOUND without one, and for a session Forget was
  // called for whose file is not deleted yet).
  StatusOr<SnapshotSummary> Summary(SessionId id) const;
  // Snapshot bytes of a session: captured from the engine when resident (written to the store
  // too), else read from the store.
  StatusOr<std::vector<uint8_t>> Export(SessionId id);
  // Creates the session of a snapshot made by another daemon (same id): checked like a stored
  // one, written to the store, then restored into the engine if it fits (else it stays
  // offloaded, on disk). ALREADY_EXISTS for an id in use here (resident or stored). The file
  // of a session closed a moment ago is not in use: Import waits (at most kForgetWait) for its
  // removal instead of refusing.
  struct Imported {
    SnapshotSummary summary;
    Restored restored;
    bool resident = false;
  };
  StatusOr<Imported> Import(std::span<const uint8_t> bytes);

  // The revision of the session as last written or loaded (0 when never).
  uint64_t stored_revision(SessionId id) const;
  // The stored snapshot of `id` when another writer (a replica sharing the directory) has
  // written it since we last wrote or read it; nullopt when it is ours (or absent). Waits for a
  // write of ours in flight, which would otherwise look like someone else's for an instant.
  std::optional<SnapshotSummary> NewerElsewhere(SessionId id) const;
  const SnapshotContext& context() const { return context_; }
  SnapshotStore& store() { return *store_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    bool stored = false;             // written to or loaded from the store
    uint64_t stored_revision = 0;    // ... at this revision
    Clock::time_point last_write{};  // for the interval
    Clock::time_point due{};         // when queued: write at or after this
    bool queued = false;
    bool urgent = false;
    bool forget = false;  // delete its snapshot (the session closed)
    std::chrono::milliseconds backoff{0};
    Clock::time_point retry_at{};                   // after a failed write: no offload before this
    std::vector<std::function<void()>> on_written;  // Urgent's callbacks for the queued write
  };
  using QueueKey = std::pair<Clock::time_point, SessionId>;  // due (urgent: the epoch), id

  // The store holds `id` at `revision` now (written by us when `written`: the interval counts
  // from now). Requires mu_.
  Entry& NoteStoredLocked(SessionId id, uint64_t revision, bool written);
  void Loop();
  // Captures and writes one session (on the writer or the caller's thread, under write_mu_).
  Status WriteNow(SessionId id, bool* skipped);
  void Schedule(SessionId id, bool urgent, std::function<void()> written = {});
  // A write of `e` failed: the next attempt waits for the doubled backoff (requires mu_).
  void NoteFailedWrite(Entry& e);
  // Decodes snapshot bytes; refusals of a stored file move it aside (`file` non-empty).
  StatusOr<SessionState> Decode(std::span<const uint8_t> bytes, const std::string& file);
  // Reports a refused file; moves it into rejected/ when `move`.
  Status RejectFile(const std::string& file, const Status& why, bool move = true);
  // The bytes are a snapshot whose header reads, of another model: never moved aside.
  bool OfAnotherModel(std::span<const uint8_t> bytes) const;

  Engine& engine_;
  std::unique_ptr<SnapshotStore> store_;
  const SnapshotContext context_;
  const PersisterOptions options_;
  const PersisterHooks hooks_;

  mutable std::mutex write_mu_;  // one store write or delete of sessions at a time
  // Reused by every write (guarded by write_mu_) and every load (load_mu_): a session's K/V
  // are megabytes, and fresh buffers would fault in and zero-fill every page, each time.
  SessionState scratch_;
  PageAlignedBuffer encoded_;  // written with direct I/O (SnapshotStore::Write)
  std::mutex load_mu_;
  std::vector<uint8_t> read_buffer_;
  mutable std::mutex mu_;
  std::condition_variable cv_;            // the writer waits for due work
  std::condition_variable idle_cv_;       // WaitIdle waits for an empty queue
  std::condition_variable forgotten_cv_;  // Import waits for a closed session's file removal
  std::map<SessionId, Entry> entries_;
  std::set<QueueKey> queue_;  // queued entries by due time
  int64_t in_progress_ = 0;   // writes the writer thread is doing now
  bool stopping_ = false;
  std::thread writer_;
};

}  // namespace streamd
