#include "engine/util/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace streamd {
namespace {

Status Errno(int err, const std::string& what, const std::string& path) {
  const StatusCode code = err == ENOSPC || err == EDQUOT ? StatusCode::kResourceExhausted
                          : err == ENOENT               ? StatusCode::kNotFound
                                                        : StatusCode::kFailedPrecondition;
  return Status(code, what + " " + path + ": " + std::strerror(err));
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

Status WriteFileAtomically(const std::string& path, std::span<const uint8_t> bytes) {
  const std::string tmp = path + "." + std::to_string(::getpid()) + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(errno, "cannot create", tmp);
  Status s = OkStatus();
  size_t done = 0;
  while (s.ok() && done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) s = Errno(errno, "cannot write", tmp);
    else done += static_cast<size_t>(n);
  }
  if (s.ok() && ::fsync(fd) != 0) s = Errno(errno, "cannot fsync", tmp);
  if (::close(fd) != 0 && s.ok()) s = Errno(errno, "cannot close", tmp);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = Errno(errno, "cannot rename to", path);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  const std::string dir = DirectoryOf(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Errno(errno, "cannot open directory", dir);
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0) return Errno(err, "cannot fsync directory", dir);
  return OkStatus();
}

}  // namespace streamd
