// ClientConnection: has the client of a request being answered hung up? A non-streamed answer
// writes nothing until its generation ends, so without this a client that left would keep its
// generation running to max_tokens. The request's own socket is known directly: over TLS it is
// the descriptor of the request's SSL session, over plain HTTP the one SocketAwareServer marked
// the worker thread with (socket_aware_server.h). httplib keeps it open while the handler runs,
// so it cannot be closed or reused meanwhile; each Gone() is one poll(2) of it.
//
// A client that shuts down only its sending side (half-close) after its request counts as gone:
// no HTTP client streamd knows of does that while it waits for an answer.
#pragma once

namespace httplib {
struct Request;
}  // namespace httplib

namespace streamd::http {

class ClientConnection {
 public:
  // The connection `req` came on; must be made on the thread running its handler.
  explicit ClientConnection(const httplib::Request& req);

  // True once the peer closed or reset the connection. False when the socket is unknown (a
  // server that is not a SocketAwareServer): the answer then runs to its end.
  bool Gone() const;

  int socket() const { return socket_; }

 private:
  int socket_;
};

}  // namespace streamd::http
