// STREAMD_CHECK (kernels/common/check.h): on in every build, and a failure names the file, the
// line, the condition and the message before it aborts.
#include "kernels/common/check.h"

#include <gtest/gtest.h>

namespace streamd {
namespace {

int Twice(int x) {
  STREAMD_CHECK_MSG(x >= 0, "a negative input reached Twice");
  return 2 * x;
}

TEST(CheckDeathTest, AFailedCheckNamesWhereAndWhatThenAborts) {
  EXPECT_EQ(Twice(3), 6);  // a check that holds costs nothing visible
  EXPECT_DEATH(Twice(-1),
               "check_test.cc:11: STREAMD_CHECK failed: x >= 0: a negative input "
               "reached Twice");
  EXPECT_DEATH(STREAMD_CHECK(1 + 1 == 3), "STREAMD_CHECK failed: 1 \\+ 1 == 3\n");
  EXPECT_DEATH(STREAMD_CHECK_UNREACHABLE("no such weight type"),
               "STREAMD_CHECK failed: unreachable: no such weight type");
}

}  // namespace
}  // namespace streamd
