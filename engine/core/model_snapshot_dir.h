// Which directory holds one model's snapshots when several models share sessions.snapshot_dir.
//
// Layout (docs/SESSIONS.md, "Where snapshots live"):
//
//   <snapshot_dir>/                       shared by every model and replica on the host
//     <fingerprint[0:16]>/<id>.snap       one model's sessions (ModelFingerprint, 16 hex digits)
//     <fingerprint[0:16]>/rejected/       that model's refused files
//     <id>.snap                           the flat layout of streamd before per-model
//                                         directories: migrated, see below
//
// so a daemon lists, loads, refuses and deletes only files of its own model: starting a second
// model on the default directory never touches the first one's sessions. Replicas of the same
// model share one subdirectory, as they shared the flat directory before.
//
// Migration of the flat layout, at every start (cheap: one 1 KiB read per flat file):
//   - a flat snapshot of this model moves into the model's directory (link then unlink, so a
//     copy already there is never clobbered; when both exist, the higher revision stays and the
//     other goes into the model's rejected/, never deleted);
//   - a flat snapshot of another model, and a flat file whose header cannot be read (damaged, or
//     a newer format), stay where they are, untouched: they are not this model's to judge.
// Several replicas may migrate the same directory at once: each move is atomic, and a file one
// replica moved is simply gone for the other.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/snapshot_store.h"
#include "engine/snapshot/snapshot_format.h"
#include "engine/util/status.h"

namespace streamd {

// Hex digits of the fingerprint that name a model's directory: 64 bits, so two models on one
// host never share one by accident (and if they did, each snapshot's full fingerprint is still
// checked before it is used).
inline constexpr size_t kModelDirFingerprintDigits = 16;

// The name of the model's directory under the snapshot directory (its first 16 hex digits).
std::string ModelSnapshotDirName(std::string_view model_fingerprint);

// What opening the model's store found in the flat layout.
struct ModelDirMigration {
  std::string dir;           // <root>/<name>: where this model's snapshots live
  int32_t moved = 0;         // this model's flat snapshots moved into dir
  int32_t superseded = 0;    // flat copies older than the one in dir, moved to dir/rejected/
  int32_t other_models = 0;  // flat snapshots of other models, left where they are
  std::vector<std::string> unreadable;  // "<file>: <why>" for flat files left unread, in place
  std::vector<std::string> failed;      // "<file>: <why>" for moves that failed (left in place)
};

// Opens (creating it 0700 if needed) the store of the model `context` describes under `root`,
// migrating this model's flat snapshots into it (above). Errors name the directory; a failed
// move of one file is reported in `migration->failed` and does not fail the start.
StatusOr<std::unique_ptr<SnapshotStore>> OpenModelSnapshotStore(const std::string& root,
                                                                const SnapshotContext& context,
                                                                ModelDirMigration* migration);

}  // namespace streamd
