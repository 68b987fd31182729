#include "server/http/socket_aware_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "server/http/connection_stream.h"

namespace streamd::http {
namespace {

thread_local int current_socket = -1;

// Marks the calling thread as serving `socket` for the mark's lifetime.
class SocketMark {
 public:
  explicit SocketMark(int socket) { current_socket = socket; }
  ~SocketMark() { current_socket = -1; }
  SocketMark(const SocketMark&) = delete;
  SocketMark& operator=(const SocketMark&) = delete;
};

std::chrono::milliseconds Millis(time_t sec, time_t usec) {
  return std::chrono::milliseconds(static_cast<int64_t>(sec) * 1000 + usec / 1000);
}

}  // namespace

int SocketAwareServer::CurrentSocket() { return current_socket; }

bool SocketAwareServer::process_and_close_socket(socket_t sock) {
  const SocketMark mark(sock);
  ConnectionStream stream(sock, Millis(read_timeout_sec_, read_timeout_usec_),
                          Millis(write_timeout_sec_, write_timeout_usec_));
  // A kept-alive connection waits for its next request up to the keep-alive timeout, in short
  // slices so that a stopping server (its listening socket closed) lets it go at once.
  const auto next_request = [&] {
    if (stream.HasBuffered()) return true;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
    while (svr_sock_ != INVALID_SOCKET) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      if (WaitForSocket(sock, POLLIN, std::min(left, std::chrono::milliseconds(100)))) {
        return true;
      }
    }
    return false;
  };
  bool ok = false;
  for (size_t left = keep_alive_max_count_; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
    if (!next_request()) break;
    bool closed = false;  // the request asked for Connection: close
    ok = process_request(stream, /*close_connection=*/left == 1, closed, nullptr);
    if (!ok || closed) break;
  }
  shutdown(sock, SHUT_RDWR);
  close(sock);
  return ok;
}

}  // namespace streamd::http
