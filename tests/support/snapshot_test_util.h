// Shared pieces of the snapshot tests: seeds, contexts, error expectations.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <random>
#include <string>
#include <string_view>

#include "engine/snapshot/snapshot_format.h"
#include "engine/util/status.h"

namespace streamd {
// Lets gtest print codes by name.
inline void PrintTo(StatusCode code, std::ostream* os) { *os << StatusCodeName(code); }
}  // namespace streamd

namespace streamd::snapshot_testing {

// A fresh seed each run (printed by the caller's SCOPED_TRACE on failure);
// STREAMD_TEST_SEED=<n> replays one.
inline uint64_t TestSeed() {
  if (const char* env = std::getenv("STREAMD_TEST_SEED"); env != nullptr && *env != '\0') {
    return std::strtoull(env, nullptr, 10);
  }
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

inline std::string SeedTrace(uint64_t seed) {
  return "seed " + std::to_string(seed) + " (replay: STREAMD_TEST_SEED=" + std::to_string(seed) +
         ")";
}

// SmolLM2-135M's K/V shape by default.
inline SnapshotContext TestContext(int32_t n_layers = 30, int32_t n_kv_heads = 3,
                                   int32_t head_dim = 64) {
  SnapshotContext c;
  c.model_fingerprint = "0123456789abcdef0123456789abcdef";
  c.model_name = "SmolLM2-135M-Instruct";
  c.n_layers = n_layers;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = head_dim;
  c.block_size = 16;
  c.streamd_version = "0.1.0";
  return c;
}

inline ::testing::AssertionResult Contains(const std::string& message, std::string_view part) {
  if (message.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not in: " << message;
}

// Expects `status` to fail with `code` and a one-line message containing every part.
inline void ExpectError(const Status& status, StatusCode code,
                        std::initializer_list<std::string_view> parts) {
  ASSERT_FALSE(status.ok()) << "accepted bytes that should have been refused";
  EXPECT_EQ(status.code(), code) << status.ToString();
  EXPECT_EQ(status.message().find('\n'), std::string::npos) << status.message();
  for (std::string_view p : parts) EXPECT_TRUE(Contains(status.message(), p));
}

}  // namespace streamd::snapshot_testing
