// Helpers of the durability end-to-end tests (durability_e2e_test.cc): a temporary directory,
// snapshot files as the daemon left them, the unary and transfer calls, Resume with retries,
// bounded waits, and the wrapper that runs a daemon in a private mount namespace.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/snapshot/snapshot_format.h"
#include "tests/e2e/daemon_process.h"
#include "tests/e2e/e2e_util.h"

namespace streamd::e2e {

// Every bounded wait here gives up after this long (and fails the test with a message).
inline constexpr std::chrono::seconds kWaitLimit{30};

// Polls `done` every 50 ms for up to kWaitLimit; true when it held.
template <typename F>
bool WaitFor(F done) {
  const auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// A directory the test owns, removed with everything in it at the end.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // path()/name, created.
  std::string Sub(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ---- Files ----------------------------------------------------------------------------------

std::vector<uint8_t> ReadBytes(const std::string& path);
void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes);
// Regular files in `dir` (not recursive), by name, sorted.
std::vector<std::string> FilesIn(const std::string& dir);
// Where a daemon of the default model keeps its snapshots under sessions.snapshot_dir `root`:
// root/<its fingerprint's first 16 hex digits> (engine/core/model_snapshot_dir.h).
std::string ModelDir(const std::string& root, const std::string& model_path = ModelPath());
// "a, b, c", or "(none)".
std::string Joined(const std::vector<std::string>& names);
// The temp files of writes in progress (SnapshotStore: .<id>.<pid>.<random>.tmp).
std::vector<std::string> TempFilesIn(const std::string& dir);
// The summary of `dir`/<id>.snap as the daemon reads it; nullopt when there is none (a file
// that does not read fails the test).
std::optional<SnapshotSummary> StoredSummary(const std::string& dir, const std::string& id);
// tokens_seen as the daemon reports it (SessionInfo counts pending input).
inline int64_t SeenOf(const SnapshotSummary& s) { return s.tokens_seen + s.pending_tokens; }

// ---- Calls ----------------------------------------------------------------------------------

grpc::Status GetSession(const DaemonProcess& d, const std::string& id, v1::SessionInfo* info);
// Every session, by id.
std::map<std::string, v1::SessionInfo> ListSessions(const DaemonProcess& d);
// The bytes of ExportSession, and its status.
grpc::Status Export(const DaemonProcess& d, const std::string& id, std::vector<uint8_t>* bytes);

struct ImportResult {
  grpc::Status status;
  v1::ImportSessionResponse response;
  size_t bytes_written = 0;  // what the client got to send before the call ended
};
// ImportSession of `bytes` in chunks of `chunk` bytes.
ImportResult Import(const DaemonProcess& d, const std::vector<uint8_t>& bytes,
                    size_t chunk = size_t{1} << 20);

// One greedy generation of up to n tokens on an attached stream.
Generation GenerateOn(RawStream& s, int32_t n);
// The greedy continuation of `context` (raw token ids) by a fresh session of `reference`.
Generation ReferenceContinuation(const DaemonProcess& reference,
                                 const std::vector<int32_t>& context, int32_t n);

// A stream attached to session `id` by Resume, or the error that refused it. A Resume that
// finds the session still being read back (UNAVAILABLE) or its old stream not yet gone
// (FAILED_PRECONDITION) is retried, for up to kWaitLimit.
struct Resumed {
  std::unique_ptr<RawStream> stream;
  std::optional<v1::Opened> opened;
  v1::Error error;
};
Resumed ResumeSession(const DaemonProcess& d, const std::string& id);

// Ends a stream without closing its session (it stays resumable).
void DetachStream(RawStream& s);
// Waits until the session's input is in its cache (with one token per step an append takes as
// many steps), so that a snapshot of it holds K/V rather than pending tokens.
void WaitPrefilled(const DaemonProcess& d, const std::string& id);

// ---- The daemon's surroundings --------------------------------------------------------------

// An executable of the base system by name, as a path ("" when absent): DaemonProcess and
// RunProgram exec by path.
std::string SystemTool(const std::string& name);
// A DaemonProcess wrapper that runs the daemon in a private mount namespace after `setup`, a
// shell command on "$0" (the snapshot directory `dir`); nullopt when this machine does not allow
// one (unshare -m needs root or CAP_SYS_ADMIN). Mounts made there go with the daemon; other
// processes see them through /proc/<pid>/root.
std::optional<std::vector<std::string>> InMountNamespace(const std::string& setup,
                                                         const std::string& dir);

}  // namespace streamd::e2e
