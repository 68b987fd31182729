// HealthService on a real gRPC server (loopback, port 0): Check and Watch answer as gRPC's
// built-in health service does, Watch follows every change and ends at Shutdown, and a closed
// gate refuses calls without a valid key (counted by the Authenticator) and admits them with one.
#include "server/health_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <vector>

namespace streamd::server {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using namespace std::chrono_literals;

// `printf %s test | sha256sum`: computed outside the code under test.
constexpr char kKey[] = "test";
constexpr char kKeyHash[] = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

class HealthServiceTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (server_ != nullptr) {
      service_->Shutdown();
      server_->Shutdown(std::chrono::system_clock::now() + 1s);
    }
    server_.reset();
    service_.reset();
    auth_.reset();
    if (!dir_.empty()) std::system(("rm -rf " + dir_).c_str());
  }
  void Start(KeyGate gate = {}) {
    service_ = std::make_unique<HealthService>(gate);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = Health::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                                grpc::InsecureChannelCredentials()));
  }
  // A gate that needs the key kKey, refusals recorded in refused_.
  KeyGate ClosedGate() {
    char tmpl[] = "/tmp/streamd-health-XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ + "/keys.yaml")
        << "keys:\n  - {tenant: ops, role: user, sha256: " << kKeyHash << "}\n";
    auto auth = Authenticator::Create(dir_ + "/keys.yaml",
                                      [this](AuthFailure why) { refused_.push_back(why); });
    EXPECT_TRUE(auth.ok()) << auth.status().ToString();
    auth_ = std::move(auth).value();
    return KeyGate(auth_.get(), nullptr);
  }
  grpc::Status Check(const std::string& service, HealthCheckResponse* response,
                     const std::string& key = "") {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    if (!key.empty()) ctx.AddMetadata("authorization", "Bearer " + key);
    HealthCheckRequest request;
    request.set_service(service);
    return stub_->Check(&ctx, request, response);
  }
  // Waits (bounded) until the service holds `n` Watch streams.
  bool WaitForWatchers(size_t n) {
    for (int i = 0; i < 500 && service_->watchers() != n; ++i) std::this_thread::sleep_for(10ms);
    return service_->watchers() == n;
  }

  std::string dir_;
  std::vector<AuthFailure> refused_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<HealthService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Health::Stub> stub_;
  int port_ = 0;
};

TEST_F(HealthServiceTest, CheckAnswersEveryNameSetAndNotFoundForOthers) {
  Start();
  HealthCheckResponse r;
  // The whole server is SERVING from the start, as with gRPC's built-in service.
  ASSERT_TRUE(Check("", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  const grpc::Status unknown = Check("readiness", &r);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(unknown.error_message().find("readiness"), std::string::npos);
  service_->SetServingStatus("readiness", false);
  service_->SetServingStatus("liveness", true);
  ASSERT_TRUE(Check("readiness", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
  ASSERT_TRUE(Check("liveness", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  // All at once (a drain), then every later update is ignored after Shutdown.
  service_->SetServingStatus(false);
  for (const char* name : {"", "liveness", "readiness"}) {
    ASSERT_TRUE(Check(name, &r).ok());
    EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING) << name;
  }
  service_->SetServingStatus(true);
  ASSERT_TRUE(Check("liveness", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  service_->Shutdown();
  service_->SetServingStatus("liveness", true);
  ASSERT_TRUE(Check("liveness", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
}

TEST_F(HealthServiceTest, WatchSendsTheStatusThenEveryChangeAndEndsAtShutdown) {
  Start();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  HealthCheckRequest request;
  request.set_service("readiness");
  auto reader = stub_->Watch(&ctx, request);
  HealthCheckResponse r;
  // A name not set yet: SERVICE_UNKNOWN, and the stream stays open.
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  ASSERT_TRUE(WaitForWatchers(1));
  service_->SetServingStatus("readiness", true);
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  service_->SetServingStatus("liveness", false);  // another name: nothing for this stream
  service_->SetServingStatus("readiness", true);  // no change: nothing either
  service_->SetServingStatus("readiness", false);
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
  service_->SetServingStatus("readiness", true);
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  // Shutdown: NOT_SERVING, then the stream ends at once (not at the server's deadline).
  service_->Shutdown();
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(reader->Read(&r));
  const grpc::Status end = reader->Finish();
  EXPECT_EQ(end.error_code(), grpc::StatusCode::UNAVAILABLE) << end.error_message();
  EXPECT_TRUE(WaitForWatchers(0));
}

TEST_F(HealthServiceTest, AWatchTheClientCancelsIsGone) {
  Start();
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    auto reader = stub_->Watch(&ctx, {});
    HealthCheckResponse r;
    ASSERT_TRUE(reader->Read(&r));
    EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
    ctx.TryCancel();
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_TRUE(WaitForWatchers(0));
  // Changes with no watcher left reach nobody and break nothing.
  service_->SetServingStatus(false);
  HealthCheckResponse r;
  ASSERT_TRUE(Check("", &r).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING);
}

TEST_F(HealthServiceTest, AClosedGateRefusesCallsWithoutAValidKey) {
  Start(ClosedGate());
  HealthCheckResponse r;
  const grpc::Status missing = Check("", &r);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED) << missing.error_message();
  EXPECT_EQ(r.status(), HealthCheckResponse::UNKNOWN);  // nothing answered
  EXPECT_EQ(Check("", &r, "wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    auto reader = stub_->Watch(&ctx, {});
    EXPECT_FALSE(reader->Read(&r));  // not a word before the status
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(refused_, (std::vector<AuthFailure>{AuthFailure::kMissing, AuthFailure::kUnknownKey,
                                                AuthFailure::kMissing}));
  // With the key: answered, watched.
  ASSERT_TRUE(Check("", &r, kKey).ok());
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  ctx.AddMetadata("authorization", std::string("Bearer ") + kKey);
  auto reader = stub_->Watch(&ctx, {});
  ASSERT_TRUE(reader->Read(&r));
  EXPECT_EQ(r.status(), HealthCheckResponse::SERVING);
  ctx.TryCancel();
  reader->Finish();
  EXPECT_EQ(refused_.size(), 3u);
}

}  // namespace
}  // namespace streamd::server
