// A session as a whole, for the calls that read or move one without driving it: its description
// (listings, GetSession), its owner, and its snapshot bytes out of one daemon and into another
// (ExportSession, ImportSession). The transports only carry the bytes and the values.
//
// Export makes the snapshot whole first (SessionPersister::Export, or a capture when there is no
// snapshot directory); FAILED_PRECONDITION while the session generates. Import checks the bytes
// like a stored snapshot and creates the session here with the same id: written to the snapshot
// directory and loaded into the pool when it fits, else left on disk as offloaded. Without a
// snapshot directory an import must fit the pool at once. These block (capture, encoding, file
// I/O): callers run them off their network threads.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/core/engine.h"
#include "engine/sessions/session_registry.h"

namespace streamd {

// What GetSession and ListSessions say about one session.
struct SessionView {
  SessionId id;
  CacheSpec spec;
  SamplingParams sampling;
  int32_t max_blocks = 0;
  // The engine's counters when resident (or on its way out); its snapshot's, counted as the
  // engine counts a resident session, with no blocks held, when on disk.
  SessionInfo cache;
  bool generating = false;
  bool offloaded = false;
  bool attached = false;
  double idle_s = 0;  // detached for this long
};

StatusOr<SessionView> DescribeSession(const SessionRegistry& registry, const Engine& engine,
                                      SessionId id);

// The tenant a session belongs to, from the registry or (a session only on disk, perhaps written
// by another replica) its snapshot; nullopt when neither knows it.
std::optional<std::string> TenantOf(const SessionRegistry& registry, SessionId id);

// The session's snapshot. A session `can_see` refuses (another tenant's) is NOT_FOUND, word for
// word as one that does not exist. `snapshots` (nullable) stamps a capture without a snapshot
// directory.
StatusOr<std::vector<uint8_t>> ExportSessionSnapshot(
    const SessionRegistry& registry, Engine& engine, const SnapshotContext* snapshots, SessionId id,
    const std::function<bool(const std::string& tenant)>& can_see);

struct ImportedSession {
  SessionId id;
  bool resident = false;  // in the pool now; else on disk, offloaded
};
StatusOr<ImportedSession> ImportSessionSnapshot(SessionRegistry& registry, Engine& engine,
                                                const SnapshotContext* snapshots,
                                                std::span<const uint8_t> bytes);

}  // namespace streamd
