#include "tools/model_path.h"

#include <cstdlib>

namespace streamd::tools {

std::string DefaultModelPath() {
  if (const char* env = std::getenv("STREAMD_MODEL"); env != nullptr && *env != '\0') return env;
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") +
         "/.cache/streamd/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace streamd::tools
