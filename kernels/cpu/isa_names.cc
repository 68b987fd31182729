// The levels' names, apart from isa.cc's run-time detection: code that only prints or parses
// a level (plan files, their fuzzer) needs no CPU checks.
#include "kernels/cpu/matmul.h"

namespace streamd::kernels::cpu {

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
    case Isa::kAmx:
      return "amx-int8";
  }
  return "unknown";
}

}  // namespace streamd::kernels::cpu
