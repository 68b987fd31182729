#include "engine/util/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

namespace streamd {
namespace {

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// 8 hex digits that differ between calls and between processes.
std::string Nonce() {
  static const uint32_t seed = std::random_device{}();
  static std::atomic<uint32_t> counter{0};
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x",
                seed ^ (counter.fetch_add(1, std::memory_order_relaxed) * 0x9e3779b9u));
  return buf;
}

}  // namespace

Status ErrnoStatus(int err, const std::string& what, const std::string& path) {
  const std::string m = what + " " + path + ": " + std::strerror(err);
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return ResourceExhaustedError(m);
    case EROFS:
    case EACCES:
    case EPERM:
      return Status(StatusCode::kPermissionDenied, m);
    case ENOENT:
      return NotFoundError(m);
    default:
      return InternalError(m);
  }
}

Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open", dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) return ErrnoStatus(err, "cannot fsync", dir);
  return OkStatus();
}

Status WriteFileAtomically(const std::string& path, std::span<const uint8_t> bytes, mode_t mode) {
  const std::string dir = DirectoryOf(path);
  const size_t slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string tmp = (dir == "." && slash == std::string::npos ? "" : dir + "/") + "." +
                          name + "." + std::to_string(::getpid()) + "." + Nonce() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoStatus(errno, "cannot create", tmp);
  Status s = OkStatus();
  size_t done = 0;
  while (s.ok() && done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      s = ErrnoStatus(errno, "cannot write", tmp);
    } else {
      done += static_cast<size_t>(n);
    }
  }
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoStatus(errno, "cannot fsync", tmp);
  if (::close(fd) != 0 && s.ok()) s = ErrnoStatus(errno, "cannot close", tmp);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoStatus(errno, "cannot rename to", path);
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());  // never leave a partial file behind
    return s;
  }
  return SyncDirectory(dir);
}

}  // namespace streamd
