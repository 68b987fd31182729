// ClientConnection: has the client of a request being answered hung up? cpp-httplib (0.11)
// gives a handler no socket, only the connection's two addresses; a non-streamed answer writes
// nothing until its generation ends, so without this a client that left would keep its
// generation running to max_tokens. The socket is found once, lazily (the first Gone() call),
// among the process's descriptors by its local and peer address (the connection is held open by
// httplib while its handler runs, so the descriptor cannot be reused meanwhile); then each
// Gone() is one poll(2).
//
// A client that shuts down only its sending side (half-close) after its request counts as gone:
// no HTTP client streamd knows of does that while it waits for an answer.
#pragma once

#include <string>

namespace streamd::http {

class ClientConnection {
 public:
  // The addresses as httplib's Request has them (numeric host, port).
  ClientConnection(std::string local_addr, int local_port, std::string remote_addr,
                   int remote_port);

  // True once the peer closed or reset the connection. False when the socket cannot be found
  // (the answer then runs to its end, as before).
  bool Gone();

 private:
  int Find() const;

  const std::string local_addr_, remote_addr_;
  const int local_port_, remote_port_;
  int fd_ = -2;  // -2: not looked up yet; -1: not found
};

}  // namespace streamd::http
