// Writes a GGUF for the CLI tests (tests/cli_errors_test.sh) with engine/gguf/gguf_writer:
//   make_test_gguf several-problems OUT   architecture, tensor types and pre-tokenizer all
//                                         unsupported (tests/support/model_check_test_util.h)
//   make_test_gguf good OUT               the same synthetic model without a problem
#include <cstdio>
#include <string>

#include "tests/support/model_check_test_util.h"

int main(int argc, char** argv) {
  using namespace streamd;
  const std::string what = argc == 3 ? argv[1] : "";
  if (what != "several-problems" && what != "good") {
    std::fprintf(stderr, "usage: make_test_gguf several-problems|good OUT\n");
    return 2;
  }
  StatusOr<std::vector<uint8_t>> bytes = testing::GgufWithSeveralProblems();
  if (bytes.ok() && what == "good") {
    SyntheticModelSpec spec;
    spec.with_vocab = true;
    spec.vocab_size = 300;
    bytes = BuildSyntheticModel(spec);
  }
  if (!bytes.ok()) {
    std::fprintf(stderr, "make_test_gguf: %s\n", bytes.status().ToString().c_str());
    return 1;
  }
  std::FILE* f = std::fopen(argv[2], "wb");
  if (f == nullptr || std::fwrite(bytes->data(), 1, bytes->size(), f) != bytes->size() ||
      std::fclose(f) != 0) {
    std::fprintf(stderr, "make_test_gguf: cannot write %s\n", argv[2]);
    return 1;
  }
  return 0;
}
