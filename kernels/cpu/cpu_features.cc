// CPUID and XGETBV, read directly (cpu_features.h). Bit numbers are those of the Intel SDM,
// vol. 2A, CPUID ("Feature Information", "Structured Extended Feature Flags") and vol. 1,
// 13.3 (XCR0); spelled out here so the code does not depend on which names a compiler's
// <cpuid.h> happens to define.
#include "kernels/cpu/cpu_features.h"

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace streamd::kernels::cpu {
namespace {

constexpr bool Bit(uint32_t reg, int bit) { return ((reg >> bit) & 1u) != 0; }

// XCR0 state components: the OS saves and restores these registers on a context switch.
constexpr uint64_t kXcr0Sse = 1u << 1;
constexpr uint64_t kXcr0Ymm = 1u << 2;       // upper halves of YMM0-15
constexpr uint64_t kXcr0Opmask = 1u << 5;    // k0-k7
constexpr uint64_t kXcr0ZmmHi256 = 1u << 6;  // upper halves of ZMM0-15
constexpr uint64_t kXcr0Hi16Zmm = 1u << 7;   // ZMM16-31
constexpr uint64_t kXcr0TileCfg = 1u << 17;
constexpr uint64_t kXcr0TileData = 1u << 18;
constexpr uint64_t kAvxState = kXcr0Sse | kXcr0Ymm;
constexpr uint64_t kAvx512State = kAvxState | kXcr0Opmask | kXcr0ZmmHi256 | kXcr0Hi16Zmm;
constexpr uint64_t kAmxState = kXcr0TileCfg | kXcr0TileData;

#if defined(__x86_64__) || defined(__i386__)
// XGETBV(0) = XCR0. Only valid when CPUID says OSXSAVE (the OS turned XSAVE on); raw asm, since
// the _xgetbv intrinsic needs the function to be compiled for XSAVE.
uint64_t ReadXcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

}  // namespace

CpuFeatures ReadCpuFeatures() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0 || eax < 1) return f;
  const unsigned int max_leaf = eax;
  __get_cpuid(1, &eax, &ebx, &ecx, &edx);
  const uint32_t leaf1_ecx = ecx;
  // CPUID.1:ECX.OSXSAVE[27]: XGETBV may be executed.
  const uint64_t xcr0 = Bit(leaf1_ecx, 27) ? ReadXcr0() : 0;
  const bool avx_state = (xcr0 & kAvxState) == kAvxState;
  const bool avx512_state = avx_state && (xcr0 & kAvx512State) == kAvx512State;
  const bool amx_state = (xcr0 & kAmxState) == kAmxState;

  f.avx = avx_state && Bit(leaf1_ecx, 28);
  f.fma = avx_state && Bit(leaf1_ecx, 12);
  // F16C's conversions are VEX-encoded: without the AVX state they fault like AVX.
  f.f16c = avx_state && Bit(leaf1_ecx, 29);
  if (max_leaf < 7) return f;
  __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx);
  const unsigned int max_subleaf = eax;
  f.avx2 = avx_state && Bit(ebx, 5);
  f.avx512f = avx512_state && Bit(ebx, 16);
  f.avx512dq = avx512_state && Bit(ebx, 17);
  f.avx512bw = avx512_state && Bit(ebx, 30);
  f.avx512vl = avx512_state && Bit(ebx, 31);
  f.avx512vnni = avx512_state && Bit(ecx, 11);
  f.amx_tile = amx_state && Bit(edx, 24);
  f.amx_int8 = amx_state && Bit(edx, 25);
  if (max_subleaf >= 1) {
    __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx);
    f.avx_vnni = avx_state && Bit(eax, 4);
  }
#endif
  return f;
}

}  // namespace streamd::kernels::cpu
