#include "server/listen_security.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/config/server_config.h"

namespace streamd::server {
namespace {

using ::testing::HasSubstr;

ServerOptions Listening(const std::string& address) {
  ServerOptions o;
  o.listen_address = address;
  return o;
}

TEST(ListenSecurityTest, LoopbackAddresses) {
  for (const char* a :
       {"127.0.0.1:50051", "127.0.0.1:0", "127.1.2.3:80", "[::1]:50051", "[::ffff:127.0.0.1]:1",
        "localhost:50051", "unix:/run/streamd/grpc.sock", "unix:relative.sock"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a : {"0.0.0.0:50051", "[::]:50051", "192.168.1.20:50051", "10.0.0.1:0",
                        "[fe80::1]:50051", "[2001:db8::1]:1", "[::ffff:10.0.0.1]:1", "128.0.0.1:1",
                        "example.com:50051", "localhost.example.com:1", ":50051", "*:50051"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
}

TEST(ListenSecurityTest, LoopbackNeedsNothing) {
  for (const char* a : {"127.0.0.1:50051", "[::1]:0", "localhost:50051", "unix:/tmp/s"}) {
    EXPECT_TRUE(CheckListenSecurity(Listening(a)).ok()) << a;
  }
}

TEST(ListenSecurityTest, NetworkWithoutClientAuthenticationIsRefused) {
  for (const char* a : {"0.0.0.0:50051", "[::]:50051", "192.168.1.20:50051"}) {
    const Status s = CheckListenSecurity(Listening(a));
    ASSERT_FALSE(s.ok()) << a;
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr(std::string("server.listen_address = ") + a +
                                       " is not a loopback address"));
    EXPECT_THAT(s.message(), HasSubstr("clients are not authenticated"));
    EXPECT_THAT(s.message(), HasSubstr("auth.allow_insecure: true"));
  }
  // Server-only TLS encrypts, but anyone may still connect.
  ServerOptions tls = Listening("0.0.0.0:50051");
  tls.tls.cert_file = "/c.pem";
  tls.tls.key_file = "/k.pem";
  const Status s = CheckListenSecurity(tls);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("TLS is on but does not authenticate clients"));
}

TEST(ListenSecurityTest, MutualTlsOrAnExplicitOptInAllowsTheNetwork) {
  ServerOptions mtls = Listening("0.0.0.0:50051");
  mtls.tls.cert_file = "/c.pem";
  mtls.tls.key_file = "/k.pem";
  mtls.tls.client_ca_file = "/ca.pem";
  EXPECT_TRUE(CheckListenSecurity(mtls).ok());
  ServerOptions insecure = Listening("[::]:50051");
  insecure.auth.allow_insecure = true;
  EXPECT_TRUE(CheckListenSecurity(insecure).ok());
  // A client CA without a server certificate is not mTLS (the config refuses it anyway).
  ServerOptions ca_only = Listening("0.0.0.0:50051");
  ca_only.tls.client_ca_file = "/ca.pem";
  EXPECT_FALSE(CheckListenSecurity(ca_only).ok());
  // API keys authenticate every call.
  ServerOptions keys = Listening("0.0.0.0:50051");
  keys.auth.keys_file = "/etc/streamd/keys.yaml";
  EXPECT_TRUE(CheckListenSecurity(keys).ok());
}

TEST(ListenSecurityTest, MetricsStayOnLoopbackByDefault) {
  // The metrics endpoint has no authentication and no TLS: its default must be loopback.
  EXPECT_TRUE(IsLoopbackAddress(DefaultServerConfig().server.metrics_address));
  EXPECT_TRUE(IsLoopbackAddress(DefaultServerConfig().server.listen_address));
}

}  // namespace
}  // namespace streamd::server
