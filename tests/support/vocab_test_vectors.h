// llama.cpp's vocabulary test vectors: models/ggml-vocab-NAME.gguf.inp holds input texts
// separated by "\n__ggml_vocab_test__\n", NAME.gguf.out one line of expected ids per input, made
// with the Hugging Face tokenizer of the model (llama.cpp's tests/test-tokenizer-0.cpp reads them
// the same way). The llama-cpp-python 0.3.36 sdist ships them; `scripts/fetch-test-vocab.sh
// --golden` prints their directory.
#pragma once

#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/tokenizer_test_util.h"

namespace streamd::tokenizer::testing {

// One input text and the ids the Hugging Face tokenizer gives it.
struct GoldenCase {
  std::string text;
  std::vector<int32_t> ids;
};

// Splits the .inp/.out pair as test-tokenizer-0.cpp does; false (with `*error`) when the
// files are missing, malformed or disagree on the number of cases.
inline bool ReadCases(const std::string& inp_path, const std::string& out_path,
                      std::vector<GoldenCase>* cases, std::string* error) {
  if (!std::filesystem::is_regular_file(inp_path) || !std::filesystem::is_regular_file(out_path)) {
    *error = "missing " + inp_path + " or " + out_path;
    return false;
  }
  const std::string inp = ReadFileOrEmpty(inp_path);
  const std::string out = ReadFileOrEmpty(out_path);
  constexpr std::string_view kSeparator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(kSeparator, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + kSeparator.size();
  }
  std::vector<std::vector<int32_t>> expected;
  for (size_t pos = 0; pos < out.size();) {
    size_t end = out.find('\n', pos);
    if (end == std::string::npos) end = out.size();
    std::vector<int32_t> ids;
    const std::string line = out.substr(pos, end - pos);
    for (size_t i = 0; i < line.size();) {
      if (line[i] == ' ') {
        ++i;
        continue;
      }
      char* stop = nullptr;
      const long id = std::strtol(line.c_str() + i, &stop, 10);
      const size_t used = static_cast<size_t>(stop - (line.c_str() + i));
      if (used == 0 || id < 0 || id > INT32_MAX) {
        *error = out_path + " line " + std::to_string(expected.size() + 1) + ": '" + line +
                 "' is not a list of token ids";
        return false;
      }
      ids.push_back(static_cast<int32_t>(id));
      i += used;
    }
    expected.push_back(std::move(ids));
    pos = end + 1;
  }
  if (texts.empty() || texts.size() != expected.size()) {
    *error = inp_path + " has " + std::to_string(texts.size()) + " cases but " + out_path +
             " has " + std::to_string(expected.size());
    return false;
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    cases->push_back({std::move(texts[i]), std::move(expected[i])});
  }
  return true;
}

}  // namespace streamd::tokenizer::testing
