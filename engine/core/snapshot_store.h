// SnapshotStore: the directory where session snapshots live, one file per session, and the only
// code that touches it. Durability follows SQLite's atomic commit, in miniature:
//
//   Write(id, bytes):  .<id>.<pid>.<random>.tmp  <- bytes, fsync
//                      rename -> <id>.snap       (atomic: readers see the old file or the new)
//                      fsync(directory)          (the rename itself survives a power cut)
//
// so a snapshot is never seen half-written, whatever kills the process; a failed write removes
// its temp file and leaves the previous snapshot as it was. Files that cannot be read back
// (corrupt, another model, a newer format) are moved into rejected/ with the reason in their
// name, never deleted. Several replicas may share the directory: temp names carry the writer's
// pid and a random suffix, and only temp files left for longer than an hour are swept.
//
// Snapshots hold a conversation's K/V: the directory is created 0700 and files 0600.
// Errors are Status values naming the path and the errno text; a full disk or a read-only
// directory is RESOURCE_EXHAUSTED or PERMISSION_DENIED, so callers can count them apart.
// Thread-safe: every method may be called concurrently (distinct ids, or the same id: the last
// rename wins).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/util/page_aligned_buffer.h"
#include "engine/util/session_id.h"
#include "engine/util/status.h"

namespace streamd {

struct StoredSnapshot {
  SessionId id;
  std::string file;  // file name inside the directory
  int64_t bytes = 0;
  int64_t mtime_unix_ms = 0;
};

class SnapshotStore {
 public:
  // Creates the directory (and its parents) if needed. Errors name the directory.
  static StatusOr<std::unique_ptr<SnapshotStore>> Open(std::string dir);

  // Atomically replaces the snapshot of `id` with `bytes` (see above).
  Status Write(SessionId id, std::span<const uint8_t> bytes);
  // The same with the first `size` bytes of `buffer`, written with direct I/O where the file
  // system takes it (engine/util/atomic_file.h): the daemon's writes, off the page cache.
  Status Write(SessionId id, PageAlignedBuffer& buffer, size_t size);
  // NOT_FOUND when there is none; files over max_bytes are refused (OUT_OF_RANGE).
  StatusOr<std::vector<uint8_t>> Read(SessionId id, int64_t max_bytes = int64_t{4} << 30) const;
  // Reads the snapshot of `id` into *buffer, which only grows (a loader that reads snapshot
  // after snapshot faults no new pages in and zero-fills nothing); returns the bytes read.
  // Errors as Read. (Not a memory map: a file truncated underneath a mapping, or a disk error,
  // would be SIGBUS, and no snapshot may crash the daemon.)
  StatusOr<size_t> ReadInto(SessionId id, std::vector<uint8_t>* buffer,
                            int64_t max_bytes = int64_t{4} << 30) const;
  // The first `n` bytes (fewer when the file is shorter): enough for a summary.
  StatusOr<std::vector<uint8_t>> ReadPrefix(SessionId id, size_t n) const;
  // Deletes the snapshot of `id` (a closed session); OK when there is none.
  Status Remove(SessionId id);
  // When the snapshot of `id` was last written or touched (its mtime, unix ms); NOT_FOUND when
  // there is none. Touch sets it to now without writing: the session was used here unchanged,
  // which another replica sharing the directory must see before it ends it for idleness.
  StatusOr<int64_t> ModifiedUnixMs(SessionId id) const;
  Status Touch(SessionId id);
  // Asks the kernel to read the snapshot of `id` into the page cache (POSIX_FADV_WILLNEED, in
  // the background): writes go around the cache, and an offloaded session's Resume then reads
  // its snapshot from memory instead of the device.
  Status WarmUp(SessionId id) const;
  // Every snapshot file, by file name; other files are ignored. Sweeps stale temp files.
  StatusOr<std::vector<StoredSnapshot>> List() const;
  // Moves `file` into rejected/, named <file>.<reason>.<unix seconds>; the reason is reduced
  // to [a-z0-9-]. Returns the new path.
  StatusOr<std::string> Reject(const std::string& file, std::string_view reason);
  // The same for a file outside this directory (`path`), named `file` in rejected/: a copy of
  // a session found elsewhere (the flat layout, model_snapshot_dir.h) that the one here
  // supersedes. Never deleted: only the operator removes what streamd refused.
  StatusOr<std::string> RejectPath(const std::string& path, const std::string& file,
                                   std::string_view reason);

  const std::string& dir() const { return dir_; }
  std::string PathOf(SessionId id) const;

 private:
  explicit SnapshotStore(std::string dir) : dir_(std::move(dir)) {}

  std::string dir_;
};

}  // namespace streamd
