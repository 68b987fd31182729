#include "engine/util/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace streamd {
namespace {

// 2 MiB-aligned, usable over the whole size asked for, for small, odd and zero sizes.
TEST(HugePagesTest, AllocationsAreHugePageAlignedAndUsable) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4097}, (size_t{2} << 20) + 1}) {
    void* p = AllocateHugePageBacked(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t{2} << 20), 0u) << bytes;
    std::memset(p, 0xab, bytes);
    std::free(p);
  }
}

}  // namespace
}  // namespace streamd
