#include "server/http/connection_stream.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace streamd::http {
namespace {

// The request parser reads its lines a byte at a time: one recv(2) fills this much.
constexpr size_t kReadBufferBytes = 4096;

// The numeric host and the port of a socket address, as httplib reports them (getnameinfo with
// NI_NUMERICHOST); nothing for other families.
void HostAndPort(const sockaddr_storage& a, socklen_t len, std::string& ip, int& port) {
  if (a.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  } else if (a.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  } else {
    return;
  }
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof(host), nullptr, 0,
                  NI_NUMERICHOST) == 0) {
    ip = host;
  }
}

// False once the peer has closed or reset the connection. Pending data (a pipelined request)
// says nothing: it is only peeked at.
bool PeerStillThere(int socket) {
  if (!WaitForSocket(socket, POLLIN, std::chrono::milliseconds(0))) return true;
  char byte;
  ssize_t n;
  do {
    n = recv(socket, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

}  // namespace

bool WaitForSocket(int socket, short events, std::chrono::milliseconds timeout) {
  pollfd p{socket, events, 0};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    const int r = poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    if (r >= 0) return r > 0;
    if (errno != EINTR) return false;
  }
}

ConnectionStream::ConnectionStream(int socket, std::chrono::milliseconds read_timeout,
                                   std::chrono::milliseconds write_timeout)
    : socket_(socket),
      read_timeout_(read_timeout),
      write_timeout_(write_timeout),
      buffer_(kReadBufferBytes) {}

bool ConnectionStream::is_readable() const { return WaitForSocket(socket_, POLLIN, read_timeout_); }

bool ConnectionStream::is_writable() const {
  return WaitForSocket(socket_, POLLOUT, write_timeout_) && PeerStillThere(socket_);
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (HasBuffered()) {
    const size_t n = std::min(size, end_ - next_);
    std::memcpy(ptr, buffer_.data() + next_, n);
    next_ += n;
    return static_cast<ssize_t>(n);
  }
  if (!is_readable()) return -1;
  const bool direct = size >= buffer_.size();  // a large read needs no copy
  ssize_t n;
  do {
    n = recv(socket_, direct ? ptr : buffer_.data(), direct ? size : buffer_.size(), 0);
  } while (n < 0 && errno == EINTR);
  if (direct || n <= 0) return n;
  next_ = 0;
  end_ = static_cast<size_t>(n);
  return read(ptr, size);
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  // Only room to write is waited for: httplib asks is_writable() (which also looks for a gone
  // peer) before every write, and a second look here cost each SSE chunk two more syscalls.
  if (!WaitForSocket(socket_, POLLOUT, write_timeout_)) return -1;
  ssize_t n;
  do {
    n = send(socket_, ptr, size, MSG_NOSIGNAL);  // a gone peer is an error, not a SIGPIPE
  } while (n < 0 && errno == EINTR);
  return n;
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getpeername(socket_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    HostAndPort(a, len, ip, port);
  }
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getsockname(socket_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    HostAndPort(a, len, ip, port);
  }
}

}  // namespace streamd::http
