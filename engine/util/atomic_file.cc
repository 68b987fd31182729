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

// Writes all of [p, p + n) to fd, retrying short writes and EINTR; the errno of a failure.
int WriteAll(int fd, const uint8_t* p, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd, p + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    done += static_cast<size_t>(w);
  }
  return 0;
}

// Writes `bytes` into the new file `tmp` (fd): with O_DIRECT when `direct` (then `bytes` is page
// aligned and may be read up to `padded` bytes), falling back to the page cache when the file
// system refuses direct I/O.
Status FillTemporary(int fd, bool direct, std::span<const uint8_t> bytes, size_t padded,
                     const std::string& tmp) {
  if (direct) {
    const int err = WriteAll(fd, bytes.data(), padded);
    if (err == 0) {
      if (::ftruncate(fd, static_cast<off_t>(bytes.size())) != 0) {
        return ErrnoStatus(errno, "cannot truncate", tmp);
      }
      return OkStatus();
    }
    if (err != EINVAL) return ErrnoStatus(err, "cannot write", tmp);
    // Alignment this device does not take: start again through the page cache.
    if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_DIRECT) != 0 || ::ftruncate(fd, 0) != 0 ||
        ::lseek(fd, 0, SEEK_SET) != 0) {
      return ErrnoStatus(errno, "cannot rewrite", tmp);
    }
  }
  const int err = WriteAll(fd, bytes.data(), bytes.size());
  return err == 0 ? OkStatus() : ErrnoStatus(err, "cannot write", tmp);
}

// WriteFileAtomically, with O_DIRECT when `padded` > 0 (the length rounded up to pages that
// `bytes.data()` may be read to).
Status WriteAtomically(const std::string& path, std::span<const uint8_t> bytes, mode_t mode,
                       size_t padded) {
  const std::string dir = DirectoryOf(path);
  const size_t slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string tmp = (dir == "." && slash == std::string::npos ? "" : dir + "/") + "." + name +
                          "." + std::to_string(::getpid()) + "." + Nonce() + ".tmp";
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
  bool direct = padded > 0;
  int fd = direct ? ::open(tmp.c_str(), kFlags | O_DIRECT, mode) : -1;
  if (fd < 0 && direct && errno == EINVAL) direct = false;  // no direct I/O on this file system
  if (fd < 0 && !direct) fd = ::open(tmp.c_str(), kFlags, mode);
  if (fd < 0) return ErrnoStatus(errno, "cannot create", tmp);
  Status s = FillTemporary(fd, direct, bytes, padded, tmp);
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
  return WriteAtomically(path, bytes, mode, 0);
}

Status WriteFileAtomically(const std::string& path, PageAlignedBuffer& buffer, size_t size,
                           mode_t mode) {
  if (size > buffer.capacity()) {
    return InvalidArgumentError("write " + path + ": " + std::to_string(size) +
                                " bytes from a buffer of " + std::to_string(buffer.capacity()));
  }
  const size_t padded = PageAlignedBuffer::RoundUp(size);
  if (padded > size) std::memset(buffer.data() + size, 0, padded - size);  // no stale bytes
  return WriteAtomically(path, {buffer.data(), size}, mode, padded);
}

}  // namespace streamd
