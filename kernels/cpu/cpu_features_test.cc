// ReadCpuFeatures (CPUID + XGETBV) against GCC's __builtin_cpu_supports, which the detection
// used before clang had to build it: every feature the kernels ask for, and every level's
// IsaSupported against the expression isa.cc evaluated then. Built with GCC only (clang 14
// does not know half of these names: the reason cpu_features.cc exists).
#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "kernels/cpu/matmul.h"

namespace streamd::kernels::cpu {
namespace {

// The builtin answers a bit mask, not a bool; its argument must be a string literal.
#define GCC_HAS(name) (__builtin_cpu_supports(name) != 0)

// libgcc fills in __builtin_cpu_supports only for these two vendors (GCC 12): elsewhere it
// says no to everything, while CPUID says what the CPU has.
bool GccKnowsThisVendor() {
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::string(vendor) == "GenuineIntel" || std::string(vendor) == "AuthenticAMD";
}

TEST(CpuFeaturesTest, SameAnswersAsGccBuiltins) {
  if (!GccKnowsThisVendor()) GTEST_SKIP() << "libgcc detects features on Intel and AMD only";
  __builtin_cpu_init();
  const CpuFeatures f = ReadCpuFeatures();
  EXPECT_EQ(f.avx, GCC_HAS("avx"));
  EXPECT_EQ(f.avx2, GCC_HAS("avx2"));
  EXPECT_EQ(f.fma, GCC_HAS("fma"));
  // libgcc reports F16C without looking at the OS's AVX state, which its instructions need.
  EXPECT_EQ(f.f16c, GCC_HAS("f16c") && GCC_HAS("avx"));
  EXPECT_EQ(f.avx_vnni, GCC_HAS("avxvnni"));
  EXPECT_EQ(f.avx512f, GCC_HAS("avx512f"));
  EXPECT_EQ(f.avx512bw, GCC_HAS("avx512bw"));
  EXPECT_EQ(f.avx512dq, GCC_HAS("avx512dq"));
  EXPECT_EQ(f.avx512vl, GCC_HAS("avx512vl"));
  EXPECT_EQ(f.avx512vnni, GCC_HAS("avx512vnni"));
  EXPECT_EQ(f.amx_tile, GCC_HAS("amx-tile"));
  EXPECT_EQ(f.amx_int8, GCC_HAS("amx-int8"));
}

// The levels as isa.cc computed them from the builtins (for AMX without the arch_prctl
// request, which both versions make the same way).
bool LevelByBuiltins(Isa isa) {
  const bool avx2 = GCC_HAS("avx2") && GCC_HAS("fma") && GCC_HAS("f16c");
  const bool avx512 = avx2 && GCC_HAS("avx512f") && GCC_HAS("avx512bw") && GCC_HAS("avx512vl") &&
                      GCC_HAS("avx512vnni");
  switch (isa) {
    case Isa::kPortable:
      return true;
    case Isa::kAvx2:
      return avx2;
    case Isa::kAvxVnni:
      return avx2 && GCC_HAS("avxvnni");
    case Isa::kAvx512Vnni:
      return avx512;
    case Isa::kAmx:
      return avx512 && GCC_HAS("amx-tile") && GCC_HAS("amx-int8");
  }
  return false;
}

TEST(CpuFeaturesTest, LevelsMatchTheBuiltinDetection) {
  if (!GccKnowsThisVendor()) GTEST_SKIP() << "libgcc detects features on Intel and AMD only";
  __builtin_cpu_init();
  for (Isa isa : kAllIsas) {
    if (isa == Isa::kAmx) {
      // IsaSupported also needs the OS's permission (arch_prctl) and a compiler with AMX
      // intrinsics: it may say less than the CPU has, never more.
      if (IsaSupported(isa)) {
        EXPECT_TRUE(LevelByBuiltins(isa));
      }
      continue;
    }
    EXPECT_EQ(IsaSupported(isa), LevelByBuiltins(isa)) << IsaName(isa);
  }
}

}  // namespace
}  // namespace streamd::kernels::cpu
