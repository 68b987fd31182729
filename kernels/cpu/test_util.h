// Shared helpers of kernels_cpu_test: fresh random seeds (printed on failure so a failing run can
// be replayed with STREAMD_TEST_SEED=<seed>) and the instruction-set levels this CPU can run.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.h"

namespace streamd::kernels::cpu::testing {

// STREAMD_TEST_SEED if set, else a fresh seed from std::random_device.
inline uint64_t TestSeed() {
  if (const char* env = std::getenv("STREAMD_TEST_SEED")) return std::strtoull(env, nullptr, 10);
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

inline std::string SeedTrace(uint64_t seed) {
  return "replay with STREAMD_TEST_SEED=" + std::to_string(seed);
}

// Every level this CPU can run, portable first; a level it lacks is not listed (and ForceIsa
// steps down from it).
inline std::vector<Isa> SupportedIsas() {
  std::vector<Isa> isas;
  for (Isa isa : kAllIsas) {
    if (IsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Restores the detected ISA when a test that forced one ends.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa) { ForceIsa(isa); }
  ~ScopedIsa() { ForceIsa(DetectIsa()); }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;
};

}  // namespace streamd::kernels::cpu::testing
