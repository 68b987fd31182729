#include "engine/core/model_snapshot_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "engine/util/atomic_file.h"

namespace streamd {
namespace {

StatusOr<SnapshotSummary> SummaryIn(const SnapshotStore& store, SessionId id) {
  STREAMD_ASSIGN_OR_RETURN(const std::vector<uint8_t> prefix,
                           store.ReadPrefix(id, kSnapshotSummaryPrefixBytes));
  return ReadSnapshotSummary(prefix);
}

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

enum class Move { kMoved, kSuperseded, kGone };

// Moves the flat snapshot `from` (session `id` at `revision`, of this model) into `store`.
StatusOr<Move> MoveIn(const std::string& from, const std::string& file, SessionId id,
                      uint64_t revision, SnapshotStore& store) {
  const std::string to = store.PathOf(id);
  // link() refuses to replace: a copy a replica wrote into the model's directory meanwhile is
  // never clobbered by an older flat one.
  if (::link(from.c_str(), to.c_str()) == 0) {
    if (::unlink(from.c_str()) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, "cannot remove the flat copy (now also in the model directory)",
                         from);
    }
    return Move::kMoved;
  }
  const int err = errno;
  if (err == ENOENT) return Move::kGone;  // another replica moved it first
  if (err != EEXIST) {
    // File systems without hard links: rename, unless a copy is there already.
    if (err != EPERM && err != EOPNOTSUPP && err != ENOSYS && err != EMLINK) {
      return ErrnoStatus(err, "cannot move into the model directory", from);
    }
    struct stat st;
    if (::stat(to.c_str(), &st) != 0 && errno == ENOENT) {
      if (::rename(from.c_str(), to.c_str()) == 0) return Move::kMoved;
      if (errno == ENOENT) return Move::kGone;
      return ErrnoStatus(errno, "cannot move into the model directory", from);
    }
  }
  // Both exist: the same file (another replica's link, its unlink not done yet), or two copies.
  if (SameFile(from, to)) {
    if (::unlink(from.c_str()) != 0 && errno != ENOENT) {
      return ErrnoStatus(errno, "cannot remove the flat copy", from);
    }
    return Move::kMoved;
  }
  StatusOr<SnapshotSummary> there = SummaryIn(store, id);
  if (there.ok() && there->revision >= revision) {
    STREAMD_RETURN_IF_ERROR(store
                                .RejectPath(from, file,
                                            "superseded by revision " +
                                                std::to_string(there->revision) +
                                                " in the model directory")
                                .status());
    return Move::kSuperseded;
  }
  if (!there.ok() && there.status().code() != StatusCode::kNotFound) {
    // The copy there cannot be read: set it aside (kept), the readable flat one takes its place.
    STREAMD_RETURN_IF_ERROR(store.Reject(file, "replaced by a readable flat copy").status());
  }
  if (::rename(from.c_str(), to.c_str()) != 0) {
    if (errno == ENOENT) return Move::kGone;
    return ErrnoStatus(errno, "cannot move into the model directory", from);
  }
  return Move::kMoved;
}

}  // namespace

std::string ModelSnapshotDirName(std::string_view model_fingerprint) {
  return std::string(model_fingerprint.substr(0, kModelDirFingerprintDigits));
}

StatusOr<std::unique_ptr<SnapshotStore>> OpenModelSnapshotStore(const std::string& root,
                                                                const SnapshotContext& context,
                                                                ModelDirMigration* migration) {
  const std::string name = ModelSnapshotDirName(context.model_fingerprint);
  if (name.size() != kModelDirFingerprintDigits ||
      name.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return InvalidArgumentError("the model fingerprint \"" + context.model_fingerprint +
                                "\" does not name a snapshot directory (it needs " +
                                std::to_string(kModelDirFingerprintDigits) + " hex digits)");
  }
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<SnapshotStore> flat, SnapshotStore::Open(root));
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<SnapshotStore> store,
                           SnapshotStore::Open(flat->dir() + "/" + name));
  ModelDirMigration report;
  report.dir = store->dir();
  // List() sweeps the flat layout's stale temp files as it did, and skips directories: the
  // model directories themselves, and rejected/.
  STREAMD_ASSIGN_OR_RETURN(const std::vector<StoredSnapshot> listed, flat->List());
  bool changed = false;
  for (const StoredSnapshot& f : listed) {
    const std::string from = flat->dir() + "/" + f.file;
    StatusOr<SnapshotSummary> summary = SummaryIn(*flat, f.id);
    if (!summary.ok()) {
      if (summary.status().code() == StatusCode::kNotFound) continue;  // moved by a replica
      report.unreadable.push_back(f.file + ": " + summary.status().message());
      continue;
    }
    if (summary->model_fingerprint != context.model_fingerprint) {
      ++report.other_models;
      continue;
    }
    if (summary->id != f.id) {
      report.unreadable.push_back(f.file + ": it holds session " + summary->id.ToString());
      continue;
    }
    StatusOr<Move> moved = MoveIn(from, f.file, f.id, summary->revision, *store);
    if (!moved.ok()) {
      report.failed.push_back(f.file + ": " + moved.status().message());
      continue;
    }
    changed = changed || *moved != Move::kGone;
    if (*moved == Move::kMoved) ++report.moved;
    if (*moved == Move::kSuperseded) ++report.superseded;
  }
  if (changed) {
    // The renames survive a power cut: both directories' entries changed.
    STREAMD_RETURN_IF_ERROR(SyncDirectory(store->dir()));
    STREAMD_RETURN_IF_ERROR(SyncDirectory(flat->dir()));
  }
  if (migration != nullptr) *migration = std::move(report);
  return store;
}

}  // namespace streamd
