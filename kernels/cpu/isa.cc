// Run-time choice of the instruction set used by matmul.h and vec_ops.h.
//
// Invariant: ActiveIsa() never names a level the CPU (and OS) lacks, so AVX2 and AVX-512 code is
// only ever reached on a CPU that can run it. __builtin_cpu_supports checks the OS-enabled YMM and
// ZMM state too.
#include <atomic>

#include "kernels/cpu/matmul.h"

namespace streamd::kernels::cpu {
namespace {

std::atomic<Isa>& ActiveIsaSlot() {
  static std::atomic<Isa> isa{DetectIsa()};
  return isa;
}

}  // namespace

bool IsaSupported(Isa isa) {
  if (isa == Isa::kPortable) return true;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  switch (isa) {
    case Isa::kPortable:
      return true;
    case Isa::kAvx2:
      return avx2;
    case Isa::kAvxVnni:
      return avx2 && __builtin_cpu_supports("avxvnni");
    case Isa::kAvx512Vnni:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }
#endif
  return false;
}

Isa DetectIsa() {
  for (Isa isa : {Isa::kAvx512Vnni, Isa::kAvxVnni, Isa::kAvx2}) {
    if (IsaSupported(isa)) return isa;
  }
  return Isa::kPortable;
}

Isa ActiveIsa() { return ActiveIsaSlot().load(std::memory_order_relaxed); }

void ForceIsa(Isa isa) {
  // Never run code the CPU cannot execute: step down to a level it supports.
  while (!IsaSupported(isa)) isa = static_cast<Isa>(static_cast<int>(isa) - 1);
  ActiveIsaSlot().store(isa, std::memory_order_relaxed);
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return "portable";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvxVnni:
      return "avx-vnni";
    case Isa::kAvx512Vnni:
      return "avx512-vnni";
  }
  return "unknown";
}

}  // namespace streamd::kernels::cpu
