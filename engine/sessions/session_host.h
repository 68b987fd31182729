// SessionHost: api::EngineHost (engine/api/engine_host.h) over an Engine. It builds and owns the
// parts that keep sessions: the SessionPersister (this model's snapshot directory), the
// SessionRegistry, the ChatFormatter, the SessionDriver and its task thread, the AdmissionQueue,
// the TokenBudget and the session service over them; it turns their hooks into the api's plain
// ones and their state into HostStats for metrics scrapes. A daemon's transports see only the
// api::EngineHost; tests build one over an engine of their own.
#pragma once

#include <memory>
#include <vector>

#include "engine/api/engine_host.h"
#include "engine/core/engine.h"
#include "engine/snapshot/snapshot_format.h"
#include "engine/tokenizer/chat_template.h"

namespace streamd {

struct SessionHostParts {
  Engine& engine;
  const tokenizer::ChatTemplate& chat;
  // What snapshots are stamped with and checked against; required with a snapshot_dir.
  const SnapshotContext* snapshots = nullptr;
  // What `engine` and `chat` live in when the host keeps them (destroyed last); null: the caller
  // keeps them alive for as long as the host.
  std::shared_ptr<void> owner;
  std::vector<api::HostNote> notes;  // the load's, first in info().notes
};

// The host over `parts` (hooks.on_step is the engine's step observer, set when it was created,
// and not used here). With options.snapshot_dir, this model's directory in it is opened (its
// flat snapshots migrated: info().notes say what was found); errors name the directory.
StatusOr<std::unique_ptr<api::EngineHost>> MakeSessionHost(SessionHostParts parts,
                                                           const api::HostOptions& options,
                                                           api::HostHooks hooks);

// The engine's config of the api's settings (the step observer calls hooks.on_step).
EngineConfig ToEngineConfig(const api::EngineSettings& s, const api::HostHooks& hooks);

}  // namespace streamd
