// STREAMD_CHECK: the one invariant check of the codebase, on in every build (Abseil's CHECK
// semantics: on failure it prints file:line, the condition and a message to stderr and aborts).
//
// The failure policy (docs/ARCHITECTURE.md, "Errors"): anything that comes from outside the
// process (a request, a config value, a model, snapshot or plan file, a token id from a client)
// is validated and answered with a Status naming the field and the limit; the daemon keeps
// serving. A check is for what our own code guarantees (a shape a caller validated, a block
// that must be allocated, a size two functions must agree on): failing it is a bug, and going
// on would corrupt memory or a session, so the process stops and the supervisor restarts it
// (sessions come back from their snapshots). `assert` is not used: it vanishes in Release.
//
// Header-only, with no dependency, so kernels/ (host code of .cu files included) can use it.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace streamd::check_internal {

[[noreturn]] inline void CheckFailed(const char* file, int line, const char* condition,
                                     const char* message) {
  std::fprintf(stderr, "%s:%d: STREAMD_CHECK failed: %s%s%s\n", file, line, condition,
               message[0] != '\0' ? ": " : "", message);
  std::fflush(stderr);
  std::abort();
}

}  // namespace streamd::check_internal

// STREAMD_CHECK(cond): aborts when `cond` is false.
#define STREAMD_CHECK(cond) STREAMD_CHECK_MSG(cond, "")
// STREAMD_CHECK_MSG(cond, "what broke"): the same with a message (a C string).
#define STREAMD_CHECK_MSG(cond, msg)                                            \
  do {                                                                          \
    if (__builtin_expect(!(cond), 0)) {                                         \
      ::streamd::check_internal::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
    }                                                                           \
  } while (0)
// STREAMD_CHECK_UNREACHABLE("why"): a branch our own code never takes.
#define STREAMD_CHECK_UNREACHABLE(msg) \
  ::streamd::check_internal::CheckFailed(__FILE__, __LINE__, "unreachable", (msg))
