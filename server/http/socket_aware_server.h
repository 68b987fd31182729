// SocketAwareServer: cpp-httplib's plain-HTTP server, whose worker threads know the socket of
// the connection they serve. httplib (0.11) hands a handler no socket, only the connection's
// addresses; a non-streamed answer, written only when its generation ends, needs the socket to
// notice that its client left (client_connection.h).
//
// How: httplib runs each accepted connection by calling the virtual process_and_close_socket
// with the accepted socket on a worker thread, and lets a subclass drive a connection's requests
// through the protected process_request with a Stream of its own (the library's SSLServer is
// built the same way). This override marks its thread with the socket, reads the connection's
// requests through ConnectionStream (connection_stream.h) and closes the socket when done. A
// connection's handlers and content providers run inside process_request, on that thread, so
// CurrentSocket() answers them; the socket stays open until they return.
//
// Over TLS, httplib's SSLServer is used as it is: its requests carry their SSL session, whose
// descriptor is the socket (ClientConnection asks it).
#pragma once

#include <httplib.h>

namespace streamd::http {

class SocketAwareServer : public httplib::Server {
 public:
  // The socket of the connection the calling thread serves; -1 when the thread serves none
  // (or the server is not a SocketAwareServer).
  static int CurrentSocket();

 private:
  bool process_and_close_socket(socket_t sock) override;
};

}  // namespace streamd::http
