// The HTTP API over TLS and mTLS with server.tls's files (certificates made by the openssl CLI,
// tests/certs), and the start-up errors that name a bad file or a busy address.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>

#include "server/http/http_server.h"
#include "tests/certs/test_certs.h"

namespace streamd::http {
namespace {

// Sessions are never reached here: only models and keys are asked.
class NoSessions : public HttpSessions {
 public:
  StatusOr<HttpCaller> Authenticate(const std::string*) const override { return HttpCaller{}; }
  StatusOr<std::unique_ptr<Session>> Open(const HttpCaller&) override {
    return UnavailableError("no sessions here");
  }
  StatusOr<std::unique_ptr<Session>> Resume(const HttpCaller&, const std::string&) override {
    return UnavailableError("no sessions here");
  }
  Status Serving() const override { return OkStatus(); }
  std::string ModelName() const override { return "tls-model"; }
};

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
  NoSessions sessions_;
};

TEST_F(HttpTlsTest, ServesOverTls) {
  auto s = Start(/*mutual=*/false);
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->tls());
  auto r = Get(s->port(), false);
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("tls-model"), std::string::npos);
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

}  // namespace
}  // namespace streamd::http
