// Paths integration tests read from the environment. `make test` sets them; a test that needs
// one fails (never passes silently) when it is missing.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace streamd::testing {

// $`name`, or "" after recording a failure that says how to set it (`how`: the command whose
// output it takes).
inline std::string EnvOrFail(const char* name, const char* how) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') {
    ADD_FAILURE() << name << " is not set: run the tests with `make test`, or set " << name << "=$("
                  << how << ")";
    return "";
  }
  return env;
}

// $STREAMD_MODEL: the default model (scripts/fetch-model.sh prints its path).
inline std::string ModelPathOrFail() {
  return EnvOrFail("STREAMD_MODEL", "scripts/fetch-model.sh");
}

}  // namespace streamd::testing
