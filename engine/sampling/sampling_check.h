// STREAMD_SAMPLING_CHECK: aborts on a broken invariant inside engine/sampling/.
//
// Per the engine's failure policy, untrusted input is rejected with a Status before it reaches
// a Sampler or a StopStringMatcher (ValidateSamplingParams, StopStringMatcher::Create); a
// violation afterwards is a caller bug. assert() would vanish in Release builds and let an
// out-of-range token id index memory, so this check stays on in every build type.
#pragma once

#include <cstdio>
#include <cstdlib>

#define STREAMD_SAMPLING_CHECK(cond, msg)                                                    \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", __FILE__, __LINE__, #cond, msg); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)
