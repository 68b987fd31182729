// SessionRegistry: the server's view of sessions, which outlive the streams that drive them and,
// with a snapshot directory, the process itself. A session is attached to at most one stream at
// a time; when its stream ends it is detached and a new stream may Resume it.
//
// Where a session is (Residency): one state machine per session. Its state changes only under
// the registry's lock and then the session's (that order, always), and a session in a
// transition (offloading, loading) has exactly one driver, the thread that moved it there:
//
//   resident  --offload claimed-->  offloading  --written, blocks freed-->  offloaded
//                                    offloading  --kept (changed meanwhile, failed)-->  resident
//   offloaded --Resume or loader--> loading     --restored-->                resident
//                                    loading     --no room now-->             offloaded
//                                    loading     --snapshot unreadable-->     (gone, Resume told)
//
// An offload is claimed only for a detached session that does not generate, is resident and has
// no Resume waiting. Every other operation that meets a transition gets an answer, never a
// half-state: a Resume waits (answered when the transition ends: attached at once when the
// session stayed resident, after a load when it went to disk; UNAVAILABLE with a retry hint
// after resume_wait, the session intact); Close answers at once (its waiting Resumes get
// NOT_FOUND) and leaves the engine's copy to the transition's driver, which closes it when it
// ends; the reaper, the per-client cap and the offloads that make room for an Open pass it by.
// Life of a detached session (the reaper, at least once a second):
//   detached for offload_after -> offloaded (written, then its blocks freed) when there is a
//     snapshot directory, closed when there is none;
//   detached for idle_timeout  -> closed for good, its snapshot deleted; with a snapshot
//     directory only once its snapshot, too, has not been written or touched for that long (a
//     replica sharing the directory may have served it since).
// Pressure: an Open that does not fit the pool first offloads detached sessions, least recently
// detached first, before it waits for blocks (in the AdmissionQueue).
// Per-client cap (the reaper, woken by every Detach): a client's resident detached sessions
// reserve at most max_detached_share of the pool; the least recently detached beyond it leave
// memory (offloaded, or closed without a snapshot directory).
// Start-up (RestoreFromStore): every snapshot in the directory comes back as an offloaded
// session with its id; with restore_on_start a loader thread then reads them back into the
// engine, newest first, while they fit. A Resume of a session that is not loaded yet jumps the
// queue. Another replica's snapshot in a shared directory is found by its id on Resume.
//
// Locks: the registry mutex guards the map, the waiting Resumes and the load queue; each
// SessionRecord's mutex guards its fields. Order: registry -> session. Neither is held across
// an engine or persister call that can block or deliver events (Cancel, Close, Offload, Load),
// because the EventSink takes the session's mutex; the claimed state keeps others out instead.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/core/engine.h"
#include "engine/core/session_persister.h"
#include "engine/sessions/chat_formatter.h"

namespace streamd {

using Clock = std::chrono::steady_clock;

// Whoever drives a session (a SessionStream); told when the session is closed elsewhere.
class SessionOwner {
 public:
  virtual ~SessionOwner() = default;
  virtual void OnSessionClosed(SessionId id, const Status& why) = 0;
};

enum class Residency { kResident, kOffloading, kOffloaded, kLoading };
// "resident", "offloading", "offloaded", "loading" (logs, metrics).
const char* ResidencyName(Residency r);

// The test-only pause points inside the transitions (RegistryOptions::pause_for_test).
enum class TransitionPoint {
  kOffloadClaimed,  // offloading: nothing written yet
  kOffloadWritten,  // offloading: the snapshot is complete, the blocks are not freed yet
  kResumeLoaded,    // loading for a Resume: restored into the engine, not resident yet
  kStartupLoaded,   // loading at start (restore_on_start): restored, not resident yet
};

// One session's record: its settings, where it is, who drives it, and its conversation state
// (SessionDriver keeps the chat turn, the partial and the running generation).
struct SessionRecord {
  SessionId id;
  SessionOptions options;  // effective: defaults applied
  CacheSpec spec;          // effective cache spec
  int32_t max_blocks = 0;
  // Who opened it, for the per-client caps: "peer 127.0.0.1" (the address without its port)
  // while there is no authentication. Empty for sessions restored from disk or imported.
  std::string client;

  mutable std::mutex mu;
  std::condition_variable generation_ended;  // notified when `generating` becomes false
  // Guarded by mu:
  Residency residency = Residency::kResident;
  Clock::time_point transition_since;  // when it entered offloading or loading
  SnapshotSummary stored;              // while offloaded: what its snapshot says (for listings)
  std::weak_ptr<SessionOwner> owner;   // the attached stream
  bool attached = false;
  Clock::time_point detached_at;
  bool closed = false;
  bool has_input = false;  // any context yet (BOS and the default system turn go first)
  ChatState chat = ChatState::kNone;
  bool generating = false;
  uint64_t generation = 0;  // counts generations started; names the running one
  std::string request_id;   // of the running generation
  Status cancel_reason;     // set when it is cancelled for a reason (slow client, shutdown)
  // What runs once the running generation's GenerationDone has been delivered (SessionDriver:
  // a barge-in Append, a Truncate of it, a stream that ends after it), in order.
  std::vector<std::function<void()>> after_generation;
  // An open partial Append (Append.partial): its tokens, and the chat state before it, from
  // which its replacement is encoded.
  bool partial_open = false;
  std::vector<int32_t> partial_tokens;
  ChatState chat_before_partial = ChatState::kNone;
  bool has_input_before_partial = false;
};

struct RegistryOptions {
  // A detached session is closed for good (its snapshot deleted) after this long; 0 = never.
  std::chrono::milliseconds idle_timeout{std::chrono::hours(24 * 7)};
  // A detached session leaves the pool after this long (offloaded when there is a snapshot
  // directory, closed when there is none); 0 = never.
  std::chrono::milliseconds offload_after{std::chrono::minutes(10)};
  // How long a Resume waits for its session's transition (an offload or a load in flight)
  // before it is answered UNAVAILABLE with a retry hint (sessions.resume_wait).
  std::chrono::milliseconds resume_wait{std::chrono::seconds(10)};
  // The resident detached sessions of one client may reserve at most this share of the pool's
  // blocks (those not kept as prefill headroom); beyond it the least recently detached leave
  // memory at once (offloaded, or closed without a snapshot directory), so that a client that
  // abandons sessions cannot lock others out. 1 = no cap.
  double max_detached_share = 0.5;
  // Tests only: called on a transition's thread at each TransitionPoint, with nothing locked; a
  // test blocks there so that other operations meet the transition. Empty in the daemon.
  std::function<void(TransitionPoint, SessionId)> pause_for_test;
};

// What the registry reports (metrics, logs): called from its threads, nothing locked. Optional.
struct RegistryHooks {
  std::function<void()> on_close;
  std::function<void()> on_offload;
  std::function<void()> on_load;
  // A transition ended: `transition` "offload" (reaper, cap, room for an Open), "drop_stale"
  // (another replica's newer snapshot), "load" (a Resume's), "startup_load"; `outcome` "ok",
  // "kept" (stayed resident: changed meanwhile, a write failed), "no_room", "lost", "closed"
  // (closed meanwhile); `seconds` from claim to end.
  std::function<void(SessionId, std::string_view transition, std::string_view outcome,
                     double seconds)>
      on_transition;
  // A Resume that had to wait for a transition was answered: `outcome` "attached", "refused"
  // (an error: closed meanwhile, lost, no room), "timed_out" (UNAVAILABLE after resume_wait).
  std::function<void(SessionId, std::string_view outcome, double seconds)> on_resume_waited;
};

class SessionRegistry {
 public:
  // `persister` (nullable: memory only) must outlive the registry.
  SessionRegistry(Engine& engine, RegistryOptions options, SessionPersister* persister = nullptr);
  ~SessionRegistry();  // stops the reaper and the loader; sessions stay open in the engine
  SessionRegistry(const SessionRegistry&) = delete;
  SessionRegistry& operator=(const SessionRegistry&) = delete;

  void set_hooks(RegistryHooks hooks) { hooks_ = std::move(hooks); }
  // Starts the thread that offloads and closes detached sessions.
  void StartReaper();
  // Registers every stored snapshot as an offloaded session; with `load`, reads them back in
  // the background (newest first, while they fit). Returns how many were found.
  int32_t RestoreFromStore(bool load);

  // Opens an engine session attached to `owner`, offloading detached sessions to make room;
  // never waits for blocks (RESOURCE_EXHAUSTED: the AdmissionQueue waits and retries).
  StatusOr<std::shared_ptr<SessionRecord>> Open(const SessionOptions& options,
                                                std::weak_ptr<SessionOwner> owner,
                                                std::string client = {});
  // A fork of `parent` (Engine::Fork): a new detached, resident session of the same tenant and
  // client with the parent's settings and chat state, resumable at once. Offloads detached
  // sessions to make room once, like Open; never waits.
  StatusOr<std::shared_ptr<SessionRecord>> Fork(const std::shared_ptr<SessionRecord>& parent);
  using AttachDone = std::function<void(StatusOr<std::shared_ptr<SessionRecord>>)>;
  // Attaches `owner` to session `id`. A resident session is attached before this returns
  // (done runs inline); an offloaded one is loaded first on the loader thread, and done runs
  // there (or on the reaper's, with UNAVAILABLE, after resume_wait). NOT_FOUND for an unknown
  // id, and for a session of another tenant than `tenant` (when set): the same answer, word
  // for word; FAILED_PRECONDITION when another stream drives it.
  void Attach(SessionId id, std::weak_ptr<SessionOwner> owner, AttachDone done,
              const std::optional<std::string>& tenant = std::nullopt);
  struct Usage {
    int32_t sessions = 0;  // resident or on disk
    int32_t generating = 0;
    int64_t blocks = 0;  // reserved by its resident sessions (their bounds)
  };
  // What one tenant holds now (its quotas).
  Usage UsageOf(const std::string& tenant) const;
  // The stream is gone: the session waits for a Resume (its generation must be over). Its
  // snapshot is written at once; `written` (optional) runs when that write is over (at once
  // without a snapshot directory), on the persister's thread.
  void Detach(const std::shared_ptr<SessionRecord>& session, std::function<void()> written = {});
  // Closes the session (in the engine if resident) and forgets it, deleting its snapshot. An
  // attached owner other than `caller` is told through OnSessionClosed(id, why).
  Status Close(SessionId id, const Status& why, const SessionOwner* caller = nullptr);
  // The session's context changed (an Append ack, a GenerationDone): its snapshot is due.
  void Touched(const SessionRecord& session);
  // Offloads and closes what the timeouts and the per-client cap say; returns how many sessions
  // were acted on.
  int32_t ReapIdle(Clock::time_point now);
  // Shutdown: writes every resident session that changed; true when all were written before
  // `deadline` (always true without a snapshot directory).
  bool PersistAll(Clock::time_point deadline);
  // Adds a session just imported (restored into the engine when `resident`, else only in the
  // snapshot directory).
  std::shared_ptr<SessionRecord> AdoptImported(const SnapshotSummary& summary,
                                               const std::map<std::string, std::string>& metadata,
                                               int32_t last_token, bool resident);

  std::shared_ptr<SessionRecord> Find(SessionId id) const;
  std::vector<std::shared_ptr<SessionRecord>> All() const;
  const RegistryOptions& options() const { return options_; }
  SessionPersister* persister() const { return persister_; }

 private:
  struct LoadRequest {
    SessionId id;
    bool for_resume = false;
  };
  struct Waiter {
    std::weak_ptr<SessionOwner> owner;
    AttachDone done;
    Clock::time_point since;     // when the Resume started waiting
    Clock::time_point deadline;  // since + resume_wait
  };
  // An answer to give once the locks are released.
  struct Answer {
    AttachDone done;
    StatusOr<std::shared_ptr<SessionRecord>> result;
    Clock::time_point waited_since;  // epoch: it did not wait
  };
  using Answers = std::vector<Answer>;
  void ReaperLoop();
  void LoaderLoop();
  // Loads one offloaded session back (loader thread); answers its waiting Resumes.
  void LoadOne(const LoadRequest& request);
  // The end of a loading session's transition, `loaded` being the load's outcome (OK or
  // ALREADY_EXISTS: it is in the engine): resident, offloaded again (no room now) or gone (its
  // snapshot cannot come back); its waiting Resumes get their answers. A session closed
  // meanwhile is left to the caller (EndClosedTransition). Requires mu_ and s->mu.
  void EndLoadLocked(const std::shared_ptr<SessionRecord>& session, const LoadRequest& request,
                     const Status& loaded, Answers& answers);
  // Moves the waiting Resumes of `s` on: attached, refused, or waiting for the next transition.
  // Requires mu_ and s->mu.
  void ResolveWaitersLocked(const std::shared_ptr<SessionRecord>& session, Answers& answers);

  // resident -> offloading when `s` may leave memory now: detached, not generating, not
  // closed, no Resume waiting for it. Requires mu_ and s->mu.
  bool ClaimOffloadLocked(SessionRecord& s) const;
  // Offloads a claimed session (`why`: the transition's name for hooks): writes it and frees
  // its blocks; the persister's error otherwise (changed meanwhile, a full disk: it stays
  // resident). Nothing locked.
  Status OffloadClaimed(const std::shared_ptr<SessionRecord>& s, std::string_view why);
  // The end of an offloading session's transition: offloaded when its blocks were freed
  // (`stored`: what its snapshot says), resident again when not. Its waiting Resumes are
  // attached (resident) or handed to the loader (offloaded); a session closed meanwhile has its
  // engine copy closed. Nothing locked.
  void EndOffload(const std::shared_ptr<SessionRecord>& s, bool freed,
                  std::optional<SnapshotSummary> stored);
  // Offloads the least recently detached resident session that is not generating; false when
  // there is none or it could not be written.
  bool OffloadOneForRoom();
  // Makes every client's resident detached sessions fit max_detached_share.
  int32_t EnforceDetachedCaps();
  // A detached resident session whose snapshot another replica has since rewritten (a shared
  // directory) becomes offloaded, so that the next Resume reads the newer one.
  void DropIfStale(const std::shared_ptr<SessionRecord>& s);
  // A session idle here for idle_timeout (at `now`) whose snapshot was written or touched since
  // (by another replica sharing the directory, which served it) is not idle: its idle time
  // restarts from then, a resident copy here that is now older is dropped, and true is returned.
  bool UsedElsewhere(const std::shared_ptr<SessionRecord>& s, Clock::time_point now);
  // A registry entry for a stored snapshot (offloaded), or the one already there.
  std::shared_ptr<SessionRecord> AddOffloaded(const SnapshotSummary& summary);
  // The chat state a restored session's metadata and last context token (-1: none) say it has.
  void ApplyMetadata(SessionRecord& s, const std::map<std::string, std::string>& metadata,
                     int32_t last_token);
  // Attaches `w` to `s` when it is resident, or queues it until the transition in flight ends
  // (starting a load when the session is on disk). Requires mu_ and s->mu; the answer, when
  // there is one now, is added to `answers`.
  void AttachOrWaitLocked(const std::shared_ptr<SessionRecord>& session, Waiter w,
                          Answers& answers);
  // Closes `id` as Close does, but only while it is detached and in no transition (the reaper's
  // closes: a Resume that won the race keeps its session). False when it did not.
  bool CloseIfIdle(SessionId id, const Status& why);
  // Removes `id` from the map, closed (requires mu_); its waiting Resumes get NOT_FOUND.
  std::shared_ptr<SessionRecord> EraseClosedLocked(SessionId id, Answers& answers);
  // A session closed during its transition is closed for good now that the transition ended:
  // its snapshot deleted (and its engine copy when `in_engine`). Nothing locked.
  void EndClosedTransition(SessionId id, bool in_engine);
  // Closes an erased session's engine copy (when resident), snapshot and stream.
  Status FinishClose(const std::shared_ptr<SessionRecord>& s, const Status& why,
                     const SessionOwner* caller);
  void Give(Answers& answers);  // runs the answers (nothing locked)
  void Pause(TransitionPoint point, SessionId id) const {
    if (options_.pause_for_test) options_.pause_for_test(point, id);
  }
  void Transitioned(SessionId id, std::string_view transition, std::string_view outcome,
                    Clock::time_point since) const;

  Engine& engine_;
  const RegistryOptions options_;
  SessionPersister* const persister_;
  RegistryHooks hooks_;
  mutable std::mutex mu_;
  std::map<SessionId, std::shared_ptr<SessionRecord>> sessions_;
  std::map<SessionId, std::vector<Waiter>> waiters_;  // Resumes waiting for a transition
  std::deque<LoadRequest> loads_;                     // resume requests first
  // Sessions whose snapshot could not be restored (moved aside by the start-up scan or by a
  // load): a later Resume is told why.
  std::map<SessionId, Status> lost_;
  // Sessions closed in the middle of a transition: the transition's driver deletes their
  // snapshot when it ends (its write may land after the close). Until then a Resume must not
  // find the file and bring them back.
  std::set<SessionId> closing_;
  SessionId loading_now_;  // the session the loader is loading (its transition's driver)
  bool background_loads_paused_ = false;  // the pool was full: wait for room
  std::condition_variable reaper_cv_;
  std::condition_variable loader_cv_;
  bool stopping_ = false;
  std::thread reaper_;
  std::thread loader_;
};

// "session 7f3a... does not exist (...)": the NOT_FOUND every lookup by id answers.
Status SessionNotFound(SessionId id, const RegistryOptions& options);

// The server's facts kept in a session's snapshot (SessionState::metadata).
inline constexpr char kMetadataChat[] = "server.chat";
inline constexpr char kMetadataHasInput[] = "server.has_input";
inline Engine::MetadataUpdates ChatMetadata(ChatState chat, bool has_input) {
  return {{kMetadataChat, std::to_string(static_cast<int>(chat))},
          {kMetadataHasInput, has_input ? "1" : "0"}};
}

}  // namespace streamd
