// The HTTP API over TLS and mTLS with server.tls's files (certificates made by the openssl CLI,
// tests/certs), and the start-up errors that name a bad file or a busy address.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>

#include "server/http/http_server.h"
#include "tests/certs/test_certs.h"
#include "tests/support/scripted_http_sessions.h"

namespace streamd::http {
namespace {

class HttpTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "http_tls_" + std::to_string(getpid());
    std::filesystem::create_directories(dir_);
    certs_ = std::make_unique<testing::TestCerts>(dir_);
    ASSERT_TRUE(certs_->MakeCa("ca").ok());
    ASSERT_TRUE(certs_->MakeLeaf("server", "ca", testing::LeafKind::kServer).ok());
    ASSERT_TRUE(certs_->MakeLeaf("client", "ca", testing::LeafKind::kClient).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<HttpServer> Start(bool mutual) {
    HttpServerOptions o;
    o.address = "127.0.0.1:0";
    o.cert_file = certs_->Cert("server");
    o.key_file = certs_->Key("server");
    if (mutual) o.client_ca_file = certs_->Cert("ca");
    auto s = HttpServer::Start(o, sessions_);
    EXPECT_TRUE(s.ok()) << s.status().message();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  httplib::Result Get(int port, bool with_client_cert) {
    auto c = with_client_cert
                 ? std::make_unique<httplib::SSLClient>("127.0.0.1", port, certs_->Cert("client"),
                                                        certs_->Key("client"))
                 : std::make_unique<httplib::SSLClient>("127.0.0.1", port);
    c->set_ca_cert_path(certs_->Cert("ca").c_str());
    c->enable_server_certificate_verification(true);
    c->set_connection_timeout(5);
    return c->Get("/v1/models");
  }

  std::string dir_;
  std::unique_ptr<testing::TestCerts> certs_;
  // A TLS connection of the test's own that has sent `request`, so that the test can drop it
  // whenever it likes: the socket (owned by `ssl`), or -1 with the failure added to the test.
  int SendOverTls(int port, const std::string& request, SSL** ssl) {
    ctx_.reset(SSL_CTX_new(TLS_client_method()));
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    *ssl = ctx_ ? SSL_new(ctx_.get()) : nullptr;
    if (fd < 0 || *ssl == nullptr ||
        connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        SSL_set_fd(*ssl, fd) != 1 || SSL_connect(*ssl) != 1 ||
        SSL_write(*ssl, request.data(), static_cast<int>(request.size())) !=
            static_cast<int>(request.size())) {
      ADD_FAILURE() << "cannot send a request over TLS to port " << port;
      if (*ssl != nullptr) SSL_free(*ssl);
      *ssl = nullptr;
      if (fd >= 0) close(fd);
      return -1;
    }
    return fd;
  }

  scripted::Journal journal_;
  scripted::ScriptedSessions sessions_{journal_};
  struct CtxFree {
    void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
  };
  std::unique_ptr<SSL_CTX, CtxFree> ctx_;
};

TEST_F(HttpTlsTest, ServesOverTls) {
  auto s = Start(/*mutual=*/false);
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->tls());
  auto r = Get(s->port(), false);
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("scripted"), std::string::npos);
  // Plain HTTP on the TLS port gets nothing.
  httplib::Client plain("127.0.0.1", s->port());
  plain.set_connection_timeout(5);
  plain.set_read_timeout(5);
  auto p = plain.Get("/v1/models");
  EXPECT_TRUE(!p || p->status != 200);
}

TEST_F(HttpTlsTest, MutualTlsNeedsAClientCertificate) {
  auto s = Start(/*mutual=*/true);
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(Get(s->port(), false));
  auto r = Get(s->port(), true);
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpTlsTest, StartErrorsNameTheKeyOrAddress) {
  HttpServerOptions o;
  o.address = "127.0.0.1:0";
  o.cert_file = dir_ + "/missing.pem";
  o.key_file = certs_->Key("server");
  auto missing = HttpServer::Start(o, sessions_);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("server.tls.cert_file"), std::string::npos)
      << missing.status().message();
  o.cert_file = certs_->Cert("server");
  o.key_file = certs_->Key("client");  // not this certificate's key
  auto mismatch = HttpServer::Start(o, sessions_);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("server.tls.key_file"), std::string::npos)
      << mismatch.status().message();
  HttpServerOptions plain;
  plain.address = "127.0.0.1:0";
  auto first = HttpServer::Start(plain, sessions_);
  ASSERT_TRUE(first.ok());
  plain.address = "127.0.0.1:" + std::to_string((*first)->port());
  auto busy = HttpServer::Start(plain, sessions_);
  ASSERT_FALSE(busy.ok());
  EXPECT_NE(busy.status().message().find("server.http_address"), std::string::npos);
  plain.address = "nonsense";
  EXPECT_EQ(HttpServer::Start(plain, sessions_).status().code(), StatusCode::kInvalidArgument);
}

// A client that leaves over TLS is found as over plain TCP: the connection's socket is the TLS
// session's (SSL_get_fd), looked at while the answer is not ready yet.
std::string ChatRequest(bool stream) {
  const std::string body = std::string(R"({"messages": [{"role": "user", "content": "Hi"}])") +
                           (stream ? R"(, "stream": true})" : "}");
  return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST_F(HttpTlsTest, ClientLeavingBeforeAWholeAnswerCancelsIt) {
  journal_.endless = true;
  auto s = Start(/*mutual=*/false);
  ASSERT_NE(s, nullptr);
  SSL* ssl = nullptr;
  const int fd = SendOverTls(s->port(), ChatRequest(/*stream=*/false), &ssl);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(scripted::Eventually(journal_, [](auto& j) { return !j.appended.empty(); }));
  SSL_free(ssl);
  close(fd);  // gone without a word (no TLS close_notify)
  EXPECT_TRUE(
      scripted::Eventually(journal_, [](auto& j) { return j.cancelled >= 1 && j.closed == 1; }));
}

TEST_F(HttpTlsTest, ClientLeavingMidStreamCancelsIt) {
  journal_.endless = true;
  auto s = Start(/*mutual=*/false);
  ASSERT_NE(s, nullptr);
  SSL* ssl = nullptr;
  const int fd = SendOverTls(s->port(), ChatRequest(/*stream=*/true), &ssl);
  ASSERT_GE(fd, 0);
  const timeval timeout{10, 0};  // a server that never answers fails the test
  ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)), 0);
  std::string got;
  char buf[4096];
  while (got.find("\"content\":\"lo\"") == std::string::npos) {
    const int n = SSL_read(ssl, buf, sizeof(buf));
    ASSERT_GT(n, 0) << got;
    got.append(buf, static_cast<size_t>(n));
  }
  SSL_shutdown(ssl);  // a polite goodbye this time
  SSL_free(ssl);
  close(fd);
  EXPECT_TRUE(
      scripted::Eventually(journal_, [](auto& j) { return j.cancelled >= 1 && j.closed == 1; }));
}

}  // namespace
}  // namespace streamd::http
