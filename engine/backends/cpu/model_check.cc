#include "engine/backends/cpu/model_check.h"

#include <vector>

#include "engine/backends/cpu/llama_weights.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/llama_config.h"
#include "engine/tokenizer/tokenizer.h"

namespace streamd {
namespace {

std::string WithPath(const std::string& path, const std::string& message) {
  return message.find(path) != std::string::npos ? message : path + ": " + message;
}

}  // namespace

Status CheckModelFile(const std::string& path) {
  // The metadata alone opens whatever the tensors hold; a file whose metadata cannot be read is
  // not a GGUF streamd can say more about (Open's errors name the path).
  StatusOr<std::unique_ptr<gguf::GgufFile>> meta =
      gguf::GgufFile::Open(path, gguf::GgufRead::kMetadataOnly);
  if (!meta.ok()) return meta.status();
  std::vector<Status> problems;

  bool architecture_ok = false;
  StatusOr<std::string> architecture = (*meta)->GetString("general.architecture");
  if (!architecture.ok()) {
    problems.push_back(architecture.status());
  } else if (!IsSupportedArchitecture(*architecture)) {
    problems.push_back(UnimplementedError(
        "architecture \"" + *architecture +
        "\" is not supported (supported: " + SupportedArchitectureNames() + ")"));
  } else {
    architecture_ok = true;
  }

  // The tensors, read again from the same mapping (every unsupported type in one error).
  const std::span<const uint8_t> bytes = (*meta)->bytes();
  auto full = gguf::GgufFile::FromBuffer(bytes.data(), bytes.size(), gguf::GgufRead::kAll);
  if (!full.ok()) {
    problems.push_back(full.status());
  } else if (architecture_ok) {
    // Hyper-parameters and shapes mean something only for an architecture streamd knows.
    StatusOr<LlamaConfig> config = ReadLlamaConfig(**full);
    if (!config.ok()) {
      problems.push_back(config.status());
    } else if (auto weights = BindLlamaWeights(**full, *config); !weights.ok()) {
      problems.push_back(weights.status());
    }
  }

  if (auto vocab = tokenizer::Tokenizer::FromGguf(**meta); !vocab.ok()) {
    problems.push_back(vocab.status());
  }

  if (problems.empty()) return OkStatus();
  // UNIMPLEMENTED when anything is a feature streamd lacks (a user may wait for it), else the
  // first problem's code (a damaged or malformed file).
  StatusCode code = problems.front().code();
  std::string message = path + ": ";
  if (problems.size() > 1) message += std::to_string(problems.size()) + " problems: ";
  for (size_t i = 0; i < problems.size(); ++i) {
    if (problems[i].code() == StatusCode::kUnimplemented) code = StatusCode::kUnimplemented;
    if (i > 0) message += "; ";
    message += problems[i].message();
  }
  return Status(code, message);
}

Status ExplainModelLoadFailure(const std::string& path, const Status& failure) {
  if (failure.ok()) return failure;
  Status found = CheckModelFile(path);
  if (!found.ok()) return found;
  return Status(failure.code(), WithPath(path, failure.message()));
}

}  // namespace streamd
