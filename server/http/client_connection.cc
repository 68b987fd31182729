#include "server/http/client_connection.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <utility>

namespace streamd::http {
namespace {

// The numeric host and the port of a socket address, formatted as httplib formats them
// (getnameinfo, NI_NUMERICHOST).
bool HostPort(const sockaddr_storage& a, socklen_t len, std::string* host, int* port) {
  if (a.ss_family != AF_INET && a.ss_family != AF_INET6) return false;
  char h[NI_MAXHOST];
  char p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof(h), p, sizeof(p),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  *host = h;
  *port = std::atoi(p);
  return true;
}

}  // namespace

ClientConnection::ClientConnection(std::string local_addr, int local_port, std::string remote_addr,
                                   int remote_port)
    : local_addr_(std::move(local_addr)),
      remote_addr_(std::move(remote_addr)),
      local_port_(local_port),
      remote_port_(remote_port) {}

int ClientConnection::Find() const {
  if (remote_port_ <= 0 || local_port_ <= 0) return -1;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || fd < 0 || fd == dirfd(dir)) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, local{};
    socklen_t peer_len = sizeof(peer), local_len = sizeof(local);
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0 ||
        getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0) {
      continue;
    }
    std::string peer_host, local_host;
    int peer_port = 0, local_port = 0;
    if (HostPort(peer, peer_len, &peer_host, &peer_port) && peer_port == remote_port_ &&
        HostPort(local, local_len, &local_host, &local_port) && local_port == local_port_ &&
        peer_host == remote_addr_ && local_host == local_addr_) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool ClientConnection::Gone() {
  if (fd_ == -2) fd_ = Find();
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) != 1) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace streamd::http
