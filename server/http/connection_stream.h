// ConnectionStream: an httplib::Stream over an accepted TCP socket, with the semantics of
// httplib's own socket stream (0.11): a read waits up to the read timeout and is buffered (the
// request parser reads a line a byte at a time), a write waits up to the write timeout, and
// is_writable (which httplib asks before every write) fails once the peer has closed.
// SocketAwareServer reads a connection's requests through it.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace streamd::http {

class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int socket, std::chrono::milliseconds read_timeout,
                   std::chrono::milliseconds write_timeout);

  // Bytes received and not yet read (a pipelined next request).
  bool HasBuffered() const { return next_ < end_; }

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return socket_; }

 private:
  const int socket_;
  const std::chrono::milliseconds read_timeout_, write_timeout_;
  std::vector<char> buffer_;
  size_t next_ = 0, end_ = 0;  // buffer_[next_, end_) is received, not yet read
};

// Waits up to `timeout` for `events` (POLLIN, POLLOUT) on `socket`; true when one is ready (or
// the socket failed: the read or write that follows says how).
bool WaitForSocket(int socket, short events, std::chrono::milliseconds timeout);

}  // namespace streamd::http
