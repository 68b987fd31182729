// ClientConnection finds a request's socket without looking for it: over TLS the descriptor of
// the request's SSL session, over plain HTTP the one SocketAwareServer marked the thread with
// (the disconnect tests of http_server_test.cc cover that path through a real server).
#include "server/http/client_connection.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>

#include "server/http/socket_aware_server.h"

namespace streamd::http {
namespace {

TEST(ClientConnection, TlsRequestUsesItsSessionsSocket) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_server_method()),
                                                        SSL_CTX_free);
  ASSERT_NE(ctx, nullptr);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  ASSERT_NE(ssl, nullptr);
  ASSERT_EQ(SSL_set_fd(ssl.get(), fds[0]), 1);
  httplib::Request req;
  req.ssl = ssl.get();
  const ClientConnection client(req);
  EXPECT_EQ(client.socket(), fds[0]);
  EXPECT_FALSE(client.Gone());
  close(fds[1]);  // the peer hangs up
  EXPECT_TRUE(client.Gone());
  close(fds[0]);
}

TEST(ClientConnection, PlainRequestOutsideASocketAwareServerIsNeverGone) {
  ASSERT_EQ(SocketAwareServer::CurrentSocket(), -1);
  httplib::Request req;  // no SSL session, and this thread serves no connection
  const ClientConnection client(req);
  EXPECT_EQ(client.socket(), -1);
  EXPECT_FALSE(client.Gone());  // unknown: the answer runs to its end
}

}  // namespace
}  // namespace streamd::http
