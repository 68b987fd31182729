// Run-time choice of the instruction set used by matmul.h and vec_ops.h.
//
// Invariant: ActiveIsa() never names a level the CPU (and OS) lacks, so AVX2 and AVX-512 code is
// only ever reached on a CPU that can run it. ReadCpuFeatures (cpu_features.h) checks the
// OS-enabled YMM, ZMM and tile state too.
#include <atomic>
#include <iterator>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"

namespace streamd::kernels::cpu {
namespace {

// Read once: the answer cannot change while the process runs.
const CpuFeatures& Features() {
  static const CpuFeatures features = ReadCpuFeatures();
  return features;
}

// The level's vector ops (vec_ops_avx512.cc) are compiled with -mavx512dq as well, so DQ is
// part of the level: every CPU with AVX512-VNNI has it, but a hypervisor may mask flags singly.
bool Avx512Vnni(const CpuFeatures& f, bool avx2) {
  return avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni;
}

// Linux hands out the 8 KiB tile data state only to processes that ask for it (5.16+); without
// it the first tile instruction faults. Asked once; the answer holds for every thread.
[[maybe_unused]] bool AmxPermitted() {
#if defined(__linux__) && defined(__x86_64__)
  static const bool permitted = [] {
    constexpr int kArchReqXcompPerm = 0x1023;
    constexpr int kXfeatureXtileData = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
  }();
  return permitted;
#else
  return false;
#endif
}

std::atomic<Isa>& ActiveIsaSlot() {
  static std::atomic<Isa> isa{DetectIsa()};
  return isa;
}

}  // namespace

bool IsaSupported(Isa isa) {
  if (isa == Isa::kPortable) return true;
#if defined(__x86_64__) || defined(__i386__)
  const CpuFeatures& f = Features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case Isa::kPortable:
      return true;
    case Isa::kAvx2:
      return avx2;
    case Isa::kAvxVnni:
      return avx2 && f.avx_vnni;
    case Isa::kAvx512Vnni:
      return Avx512Vnni(f, avx2);
    case Isa::kAmx:
#if defined(STREAMD_NO_AMX)
      return false;  // built by a compiler without AMX intrinsics (CMakeLists.txt)
#else
      return Avx512Vnni(f, avx2) && f.amx_tile && f.amx_int8 && AmxPermitted();
#endif
  }
#endif
  return false;
}

Isa DetectIsa() {
  for (auto it = std::rbegin(kAllIsas); it != std::rend(kAllIsas); ++it) {
    if (IsaSupported(*it)) return *it;  // the best first; kPortable always is
  }
  return Isa::kPortable;
}

Isa ActiveIsa() { return ActiveIsaSlot().load(std::memory_order_relaxed); }

void ForceIsa(Isa isa) {
  // Never run code the CPU cannot execute: step down to a level it supports.
  while (!IsaSupported(isa)) isa = static_cast<Isa>(static_cast<int>(isa) - 1);
  ActiveIsaSlot().store(isa, std::memory_order_relaxed);
}

}  // namespace streamd::kernels::cpu
