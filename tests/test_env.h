// Paths integration tests read from the environment. `make test` sets them; a test that needs
// one fails (never passes silently) when it is missing.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace streamd::testing {

// $STREAMD_MODEL: the default model (scripts/fetch-model.sh prints its path).
inline std::string ModelPathOrFail() {
  const char* env = std::getenv("STREAMD_MODEL");
  if (env == nullptr || *env == '\0') {
    ADD_FAILURE() << "STREAMD_MODEL is not set: run the tests with `make test`, or set "
                     "STREAMD_MODEL=$(scripts/fetch-model.sh)";
    return "";
  }
  return env;
}

}  // namespace streamd::testing
