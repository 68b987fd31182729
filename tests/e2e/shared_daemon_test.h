// A test suite whose tests share one daemon (started with kSharedServerFlags before the first
// test, drained and checked for a clean exit after the last).
#pragma once

#include <gtest/gtest.h>

#include <chrono>

#include "tests/e2e/daemon_process.h"
#include "tests/e2e/e2e_util.h"

namespace streamd::e2e {

class SharedDaemonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { daemon_ = DaemonProcess::Start(kSharedServerFlags).release(); }
  static void TearDownTestSuite() {
    if (daemon_ != nullptr) {
      daemon_->Terminate();
      EXPECT_EQ(daemon_->Wait(std::chrono::seconds(60)), 0) << daemon_->Stderr();
    }
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(daemon_, nullptr) << "the daemon did not start"; }

  inline static DaemonProcess* daemon_ = nullptr;
};

}  // namespace streamd::e2e
