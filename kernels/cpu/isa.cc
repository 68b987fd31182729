// Run-time choice of the instruction set used by matmul.h and vec_ops.h.
//
// Invariant: ActiveIsa() never names a level the CPU (and OS) lacks, so AVX2 code is only ever
// reached on a CPU that can run it. __builtin_cpu_supports checks the OS-enabled YMM state too.
#include <atomic>

#include "kernels/cpu/matmul.h"

namespace streamd::kernels::cpu {
namespace {

std::atomic<Isa>& ActiveIsaSlot() {
  static std::atomic<Isa> isa{DetectIsa()};
  return isa;
}

}  // namespace

Isa DetectIsa() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    return __builtin_cpu_supports("avxvnni") ? Isa::kAvxVnni : Isa::kAvx2;
  }
#endif
  return Isa::kPortable;
}

Isa ActiveIsa() { return ActiveIsaSlot().load(std::memory_order_relaxed); }

void ForceIsa(Isa isa) {
  // A level above what the CPU supports is clamped: never run code the CPU cannot execute.
  const Isa best = DetectIsa();
  if (static_cast<int>(isa) > static_cast<int>(best)) isa = best;
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
  }
  return "unknown";
}

}  // namespace streamd::kernels::cpu
