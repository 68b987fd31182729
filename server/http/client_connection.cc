#include "server/http/client_connection.h"

#include <httplib.h>
#include <openssl/ssl.h>
#include <poll.h>

#include "server/http/socket_aware_server.h"

namespace streamd::http {
namespace {

int SocketOf(const httplib::Request& req) {
  if (req.ssl != nullptr) return SSL_get_fd(req.ssl);
  return SocketAwareServer::CurrentSocket();
}

}  // namespace

ClientConnection::ClientConnection(const httplib::Request& req) : socket_(SocketOf(req)) {}

bool ClientConnection::Gone() const {
  if (socket_ < 0) return false;
  pollfd p{socket_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) != 1) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace streamd::http
