// MakeChannel's API key: every call (unary and streaming) carries `authorization: Bearer KEY`,
// over plaintext too, and nothing when there is no key. An in-process server records the
// metadata of every call it receives and answers UNIMPLEMENTED.
#include "tools/streamctl/channel.h"

#include <grpcpp/generic/async_generic_service.h>
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "streamd/v1/streamd.grpc.pb.h"

namespace streamd::streamctl {
namespace {

class RecordingService : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto& md = ctx->client_metadata();
      const auto it = md.find("authorization");
      calls_.push_back(
          {std::string(ctx->method()),
           it == md.end() ? "(none)" : std::string(it->second.data(), it->second.size())});
    }
    class Refuse : public grpc::ServerGenericBidiReactor {
     public:
      Refuse() { Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "recorded")); }
      void OnDone() override { delete this; }
    };
    return new Refuse;
  }
  std::vector<std::pair<std::string, std::string>> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<std::string, std::string>> calls_;  // method, authorization
};

class ChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterCallbackGenericService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // One unary call and one Session stream on `channel`; both end UNIMPLEMENTED.
  static void Call(const std::shared_ptr<grpc::Channel>& channel) {
    auto health = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext unary;
    unary.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::health::v1::HealthCheckResponse response;
    EXPECT_EQ(health->Check(&unary, {}, &response).error_code(), grpc::StatusCode::UNIMPLEMENTED);
    auto streamd = v1::Streamd::NewStub(channel);
    grpc::ClientContext stream_ctx;
    stream_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = streamd->Session(&stream_ctx);
    stream->WritesDone();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);
  }

  RecordingService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(ChannelTest, ApiKeyGoesWithEveryCall) {
  auto channel = MakeChannel({.address = address(), .api_key = "k-123_ABC"});
  ASSERT_TRUE(channel.ok()) << channel.status().ToString();
  Call(*channel);
  const auto calls = service_.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].first, "/grpc.health.v1.Health/Check");
  EXPECT_EQ(calls[1].first, "/streamd.v1.Streamd/Session");
  for (const auto& [method, authorization] : calls) {
    EXPECT_EQ(authorization, "Bearer k-123_ABC") << method;
  }
}

TEST_F(ChannelTest, NoKeyNoHeader) {
  auto channel = MakeChannel({.address = address()});
  ASSERT_TRUE(channel.ok());
  Call(*channel);
  const auto calls = service_.calls();
  ASSERT_EQ(calls.size(), 2u);
  for (const auto& [method, authorization] : calls) EXPECT_EQ(authorization, "(none)") << method;
}

TEST_F(ChannelTest, KeysThatCannotBeSentAreRefused) {
  for (const char* key : {"with space", "with\nnewline", "tab\t", "caf\xc3\xa9"}) {
    auto channel = MakeChannel({.address = address(), .api_key = key});
    ASSERT_FALSE(channel.ok()) << key;
    EXPECT_EQ(channel.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(channel.status().message().find("--api-key / $STREAMD_API_KEY"), std::string::npos);
  }
  EXPECT_TRUE(service_.calls().empty());
}

TEST_F(ChannelTest, TlsFlagsAreCheckedBeforeAnyCall) {
  auto key_only = MakeChannel({.address = address(), .tls_key = "/k.pem"});
  EXPECT_EQ(key_only.status().message(), "--tls-key needs --tls-cert (the client certificate)");
  auto cert_only = MakeChannel({.address = address(), .tls_cert = "/c.pem"});
  EXPECT_EQ(cert_only.status().message(), "--tls-cert needs --tls-key (its private key)");
  auto missing = MakeChannel({.address = address(), .tls_ca = "/nonexistent/ca.pem"});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "--tls-ca /nonexistent/ca.pem: cannot open: No such file or directory");
}

}  // namespace
}  // namespace streamd::streamctl
