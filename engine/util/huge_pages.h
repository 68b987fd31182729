// Large, long-lived host buffers that the forward pass reads scattered across (the KV pool, the
// AMX-packed weights): 2 MiB-aligned and advised as transparent huge pages, so reading them
// costs far fewer TLB misses. With 4 KiB pages a 16-session decode step's attention touched
// ~18,000 pages of K/V per step; on 2 MiB pages its time fell by ~12% (docs/PERFORMANCE.md).
// The advice is a hint: where the kernel has THP off, the memory is ordinary pages.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace streamd {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// bytes rounded up to 2 MiB, or null when the allocation fails. Free with std::free.
void* AllocateHugePageBacked(size_t bytes);

}  // namespace streamd
