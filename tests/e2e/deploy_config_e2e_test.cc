// End-to-end: the configs that deploy/ ships (deploy/streamd.yaml for the systemd unit and the
// image, deploy/kubernetes/streamd.yaml for the ConfigMap) are accepted by the daemon: every
// key known, every value in range, the cross-field checks passed. (deploy/check.py checks that
// they agree with the other files.) The test overrides what cannot work here: the addresses
// (127.0.0.1 port 0), the model path, threads, the KV pool and the pod's keys file.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/e2e/daemon_process.h"
#include "tests/e2e/e2e_util.h"

namespace streamd::e2e {
namespace {

using grpc::health::v1::HealthCheckResponse;

class DeployConfigE2eTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DeployConfigE2eTest, StartsServesAndDrains) {
  const std::string config = std::string(STREAMD_SOURCE_DIR) + "/" + GetParam();
  // Overrides come after the file whatever their place; info level logs the effective config.
  std::vector<std::string> flags = {"--config=" + config, "--logging.level=info"};
  // The pod's keys file is its Secret; here the example of its format stands in (so that the
  // example is checked to parse, too).
  if (std::string(GetParam()).find("kubernetes") != std::string::npos) {
    flags.push_back("--auth.keys_file=" + std::string(STREAMD_SOURCE_DIR) +
                    "/deploy/kubernetes/keys.example.yaml");
  }
  auto d = DaemonProcess::Start(flags);
  ASSERT_NE(d, nullptr) << config;
  auto stub = grpc::health::v1::Health::NewStub(d->Channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  HealthCheckResponse health;
  ASSERT_TRUE(stub->Check(&ctx, {}, &health).ok());
  EXPECT_EQ(health.status(), HealthCheckResponse::SERVING);
  d->Terminate();
  EXPECT_EQ(d->Wait(std::chrono::seconds(60)), 0) << d->Stderr();
  // The file was read, not just named: the Kubernetes one sets logging.format json, which
  // no flag overrides, so its log lines are JSON objects; the other one keeps text.
  const std::string log = d->Stderr();
  const bool json_file = std::string(GetParam()).find("kubernetes") != std::string::npos;
  EXPECT_EQ(log.rfind("{\"ts\":", 0) == 0, json_file)
      << "logging.format of " << GetParam() << " not applied:\n"
      << log;
}

INSTANTIATE_TEST_SUITE_P(Shipped, DeployConfigE2eTest,
                         ::testing::Values("deploy/streamd.yaml", "deploy/kubernetes/streamd.yaml"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                           return std::string(param.index == 0 ? "SystemdAndImage" : "Kubernetes");
                         });

}  // namespace
}  // namespace streamd::e2e
