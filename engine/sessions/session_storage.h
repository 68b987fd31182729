// Where a daemon keeps its sessions on disk: this model's directory under sessions.snapshot_dir
// (engine/core/model_snapshot_dir.h: models sharing the directory never touch each other's
// sessions), written and read by a SessionPersister.
#pragma once

#include <memory>
#include <string>

#include "engine/core/model_snapshot_dir.h"
#include "engine/core/session_persister.h"

namespace streamd {

// Opens (creating it if needed) this model's snapshot directory under `root`, migrating the
// model's flat snapshots into it (`migration` says what it found), and the persister writing
// there. Errors name the directory.
StatusOr<std::unique_ptr<SessionPersister>> OpenSessionStorage(
    Engine& engine, const std::string& root, const SnapshotContext& context,
    PersisterOptions options, PersisterHooks hooks, ModelDirMigration* migration);

}  // namespace streamd
