#include "engine/build_plan/hardware_fingerprint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace streamd {
namespace {

TEST(HardwareFingerprintTest, ParsesTheFirstProcessorAndKeepsOnlyKernelFlags) {
  const HardwareFingerprint fp = ParseCpuInfo(
      "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core\n"
      "flags\t\t: fpu sse2 avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni md_clear\n\n"
      "processor\t: 1\nvendor_id\t: Other\nmodel name\t: Other\nflags\t\t: amx_tile\n\n");
  EXPECT_EQ(fp.vendor, "AuthenticAMD");
  EXPECT_EQ(fp.model, "AMD EPYC 9654 96-Core");
  EXPECT_EQ(fp.isa_flags, (std::vector<std::string>{"avx2", "avx512_vnni", "avx512bw", "avx512f",
                                                    "avx512vl", "f16c", "fma"}));
}

TEST(HardwareFingerprintTest, ThisMachineIsStableAndDescribed) {
  const HardwareFingerprint a = CpuFingerprint();
  const HardwareFingerprint b = CpuFingerprint();
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.kind, "cpu");
  EXPECT_GE(a.cpus, 1);
  EXPECT_FALSE(a.kernel_level.empty());
  EXPECT_THAT(a.Describe(), ::testing::HasSubstr(a.model));
}

}  // namespace
}  // namespace streamd
