// What this x86-64 CPU and its OS let the kernels run, read with CPUID and XGETBV.
//
// A feature counts only when the CPU has it *and* the OS saves the registers it uses on a
// context switch (XCR0): AVX-class features need the XMM and YMM state, AVX-512 ones also the
// opmask and both ZMM halves, AMX the tile configuration and tile data. That is what GCC's
// __builtin_cpu_supports answers on Intel and AMD CPUs (cpu_features_test.cc compares the two),
// written out here because clang 14 rejects most of these names in that builtin. Linux's
// per-process AMX permission (arch_prctl) is the caller's business (isa.cc).
#pragma once

namespace streamd::kernels::cpu {

struct CpuFeatures {
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx_vnni = false;  // VEX-encoded vpdpwssd (Alder Lake, Zen 5)
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool amx_tile = false;
  bool amx_int8 = false;
};

// Reads CPUID and XCR0 each time it is called (cheap, but callers cache it). All false on a
// CPU without CPUID leaf 1 and on other architectures.
CpuFeatures ReadCpuFeatures();

}  // namespace streamd::kernels::cpu
