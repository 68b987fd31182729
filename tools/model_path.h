// Where tools look for the model when --model is not given.
#pragma once

#include <string>

namespace streamd::tools {

// $STREAMD_MODEL, else ~/.cache/streamd/models/SmolLM2-135M-Instruct.Q4_1.gguf (the path
// scripts/fetch-model.sh writes).
std::string DefaultModelPath();

}  // namespace streamd::tools
