#include "engine/util/huge_pages.h"

#include <sys/mman.h>

namespace streamd {

void* AllocateHugePageBacked(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded == 0 ? kHugePage : rounded);
#ifdef MADV_HUGEPAGE
  if (p != nullptr) madvise(p, rounded, MADV_HUGEPAGE);  // before first touch; a hint only
#endif
  return p;
}

}  // namespace streamd
