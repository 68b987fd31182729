#include "engine/core/snapshot_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "engine/util/atomic_file.h"

namespace streamd {
namespace {

constexpr std::string_view kSuffix = ".snap";
constexpr int64_t kStaleTempMs = 60LL * 60 * 1000;  // temp files older than this are debris

int64_t UnixMillisNow() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status MakeDirectories(const std::string& dir) {
  std::string at;
  size_t i = 0;
  while (i <= dir.size()) {
    const size_t slash = dir.find('/', i);
    const size_t end = slash == std::string::npos ? dir.size() : slash;
    at = dir.substr(0, end);
    i = end + 1;
    if (at.empty()) continue;
    if (::mkdir(at.c_str(), 0700) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, "cannot create the snapshot directory", at);
    }
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot stat", dir);
  if (!S_ISDIR(st.st_mode)) {
    return FailedPreconditionError("snapshot directory " + dir + " is not a directory");
  }
  return OkStatus();
}

bool IsHexId(std::string_view s) {
  if (s.size() != 32) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string Slug(std::string_view reason) {
  std::string out;
  for (char c : reason) {
    const char l = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9')) {
      out += l;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
    if (out.size() >= 48) break;
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "rejected" : out;
}

// An open file, closed when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads up to `limit` bytes of `path` into `buffer` (grown when needed, never shrunk) and
// returns how many were read: the whole file when `whole` (OUT_OF_RANGE when it is larger than
// `limit`), else its first `limit` bytes. A file shorter than fstat said is read as it is: the
// snapshot reader reports the truncation.
StatusOr<size_t> ReadFile(const std::string& path, int64_t limit, bool whole,
                          std::vector<uint8_t>* buffer) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return ErrnoStatus(errno, "cannot open", path);
  size_t want = static_cast<size_t>(limit);
  if (whole) {
    struct stat st;
    if (::fstat(f.fd, &st) != 0) return ErrnoStatus(errno, "cannot stat", path);
    if (st.st_size > limit) {
      return OutOfRangeError(path + " has " + std::to_string(st.st_size) +
                             " bytes, over the limit of " + std::to_string(limit));
    }
    want = static_cast<size_t>(st.st_size);
  }
  if (buffer->size() < want) buffer->resize(want);
  size_t done = 0;
  while (done < want) {
    const ssize_t n = ::read(f.fd, buffer->data() + done, want - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "cannot read", path);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace

StatusOr<std::unique_ptr<SnapshotStore>> SnapshotStore::Open(std::string dir) {
  if (dir.empty()) return InvalidArgumentError("snapshot directory is empty");
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  STREAMD_RETURN_IF_ERROR(MakeDirectories(dir));
  return std::unique_ptr<SnapshotStore>(new SnapshotStore(std::move(dir)));
}

std::string SnapshotStore::PathOf(SessionId id) const {
  return dir_ + "/" + id.ToString() + std::string(kSuffix);
}

Status SnapshotStore::Write(SessionId id, std::span<const uint8_t> bytes) {
  return WriteFileAtomically(PathOf(id), bytes, 0600);
}

Status SnapshotStore::WarmUp(SessionId id) const {
  const std::string path = PathOf(id);
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return ErrnoStatus(errno, "cannot open", path);
  struct stat st;
  if (::fstat(f.fd, &st) != 0) return ErrnoStatus(errno, "cannot stat", path);
  // One call per 128 KiB: Linux reads a bounded amount per call, not the whole range asked for
  // (one call over a 23 MB file read 8 MiB of it here).
  constexpr off_t kStep = 128 << 10;
  for (off_t at = 0; at < st.st_size; at += kStep) {
    const int err = ::posix_fadvise(f.fd, at, kStep, POSIX_FADV_WILLNEED);
    if (err != 0) return ErrnoStatus(err, "cannot read ahead", path);
  }
  return OkStatus();
}

Status SnapshotStore::Write(SessionId id, PageAlignedBuffer& buffer, size_t size) {
  return WriteFileAtomically(PathOf(id), buffer, size, 0600);
}

StatusOr<std::vector<uint8_t>> SnapshotStore::Read(SessionId id, int64_t max_bytes) const {
  std::vector<uint8_t> out;
  STREAMD_ASSIGN_OR_RETURN(const size_t n, ReadFile(PathOf(id), max_bytes, true, &out));
  out.resize(n);
  return out;
}

StatusOr<size_t> SnapshotStore::ReadInto(SessionId id, std::vector<uint8_t>* buffer,
                                         int64_t max_bytes) const {
  return ReadFile(PathOf(id), max_bytes, true, buffer);
}

StatusOr<std::vector<uint8_t>> SnapshotStore::ReadPrefix(SessionId id, size_t n) const {
  std::vector<uint8_t> out;
  STREAMD_ASSIGN_OR_RETURN(const size_t got,
                           ReadFile(PathOf(id), static_cast<int64_t>(n), false, &out));
  out.resize(got);
  return out;
}

Status SnapshotStore::Remove(SessionId id) {
  const std::string path = PathOf(id);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return OkStatus();
    return ErrnoStatus(errno, "cannot remove", path);
  }
  return SyncDirectory(dir_);
}

StatusOr<int64_t> SnapshotStore::ModifiedUnixMs(SessionId id) const {
  const std::string path = PathOf(id);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot stat", path);
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
}

Status SnapshotStore::Touch(SessionId id) {
  const std::string path = PathOf(id);
  if (::utimensat(AT_FDCWD, path.c_str(), nullptr, 0) != 0) {
    return ErrnoStatus(errno, "cannot touch", path);
  }
  return OkStatus();
}

StatusOr<std::vector<StoredSnapshot>> SnapshotStore::List() const {
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return ErrnoStatus(errno, "cannot list", dir_);
  std::vector<StoredSnapshot> out;
  const int64_t now = UnixMillisNow();
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const std::string path = dir_ + "/" + name;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const int64_t mtime =
        static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
    if (name.size() > 4 && name[0] == '.' && name.ends_with(".tmp")) {
      if (now - mtime > kStaleTempMs) ::unlink(path.c_str());  // a writer died mid-write
      continue;
    }
    if (!name.ends_with(kSuffix)) continue;
    const std::string_view stem(name.data(), name.size() - kSuffix.size());
    if (!IsHexId(stem)) continue;
    auto id = SessionId::Parse(stem);
    if (!id.ok()) continue;
    out.push_back({*id, name, static_cast<int64_t>(st.st_size), mtime});
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(),
            [](const StoredSnapshot& a, const StoredSnapshot& b) { return a.file < b.file; });
  return out;
}

StatusOr<std::string> SnapshotStore::Reject(const std::string& file, std::string_view reason) {
  return RejectPath(dir_ + "/" + file, file, reason);
}

StatusOr<std::string> SnapshotStore::RejectPath(const std::string& path, const std::string& file,
                                                std::string_view reason) {
  if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
    return InvalidArgumentError("reject: \"" + file + "\" is not a file name");
  }
  const std::string rejected = dir_ + "/rejected";
  if (::mkdir(rejected.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, "cannot create", rejected);
  }
  const int64_t seconds = UnixMillisNow() / 1000;
  const std::string to = rejected + "/" + file + "." + Slug(reason) + "." + std::to_string(seconds);
  if (::rename(path.c_str(), to.c_str()) != 0) return ErrnoStatus(errno, "cannot move aside", path);
  STREAMD_RETURN_IF_ERROR(SyncDirectory(rejected));
  const size_t slash = path.rfind('/');
  STREAMD_RETURN_IF_ERROR(SyncDirectory(slash == std::string::npos ? "." : path.substr(0, slash)));
  return to;
}

}  // namespace streamd
