// Golden test against llama.cpp's own vocabulary test vectors: llama-cpp-python 0.3.36 ships
// llama.cpp's models/ggml-vocab-NAME.gguf (vocabulary only) with NAME.gguf.inp (input texts
// separated by "\n__ggml_vocab_test__\n") and NAME.gguf.out (one line of expected ids per
// input, made with the Hugging Face tokenizer of the model). As llama.cpp's
// tests/test-tokenizer-0.cpp does, each input is encoded without BOS and without parsing
// special tokens, and must give exactly the expected ids.
//
// The directory is $STREAMD_VOCAB_DIR (`scripts/fetch-test-vocab.sh --golden` prints it; `make
// test` sets it). A vocabulary whose tokenizer.ggml.model or tokenizer.ggml.pre streamd does
// not support is skipped, with the tokenizer's own error as the reason; every other load
// failure, a missing file or a differing case fails.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/tokenizer_test_util.h"
#include "tests/support/vocab_test_vectors.h"

namespace streamd::tokenizer {
namespace {

// Every ggml-vocab-NAME.gguf of the sdist that has test vectors. EveryVectorFileIsListed
// fails when the directory holds one that is not here, so a new sdist cannot add untested
// vocabularies silently.
constexpr std::string_view kVocabs[] = {
    "bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon",
    "gemma-4",  "gpt-2",     "llama-bpe",      "llama-spm",    "mpt",
    "phi-3",    "qwen2",     "qwen35",         "refact",       "starcoder",
};

using testing::GoldenCase;
using testing::ReadCases;
using testing::VocabDirOrFail;

// A case's text as one printable line: "\n", "\t", "\xNN" for other control and non-ASCII
// bytes, cut after 80 bytes.
std::string Printable(std::string_view text) {
  std::string out;
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (size_t i = 0; i < text.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c >= 0x7F || c == '\\') {
      out.append("\\x").push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (text.size() > 80) out += "...";
  return out;
}

std::string IdList(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out.append(i ? " " : "").append(std::to_string(ids[i]));
  return out + "]";
}

class TokenizerGoldenTest : public ::testing::TestWithParam<std::string_view> {};

TEST_P(TokenizerGoldenTest, MatchesLlamaCppTestVectors) {
  const std::string dir = VocabDirOrFail();
  if (dir.empty()) return;
  const std::string path = dir + "/ggml-vocab-" + std::string(GetParam()) + ".gguf";
  auto file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto tokenizer = Tokenizer::FromGguf(**file);
  if (!tokenizer.ok()) {
    // Only what streamd says it does not support is a skip; a supported vocabulary that fails
    // to load is a failure.
    auto pre = (*file)->GetStringOr("tokenizer.ggml.pre", "");
    const bool unsupported_model = tokenizer.status().code() == StatusCode::kUnimplemented;
    const bool unsupported_pre = pre.ok() && !PreTokenizer::IsSupported(*pre);
    if (unsupported_model || unsupported_pre) {
      GTEST_SKIP() << GetParam() << ": not supported by streamd: " << tokenizer.status().message();
    }
    FAIL() << path << ": " << tokenizer.status().ToString();
  }

  std::vector<GoldenCase> cases;
  std::string error;
  ASSERT_TRUE(ReadCases(path + ".inp", path + ".out", &cases, &error)) << error;
  int matched = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const GoldenCase& c = cases[i];
    auto ids = (*tokenizer)->Encode(c.text, /*add_bos=*/false, /*parse_special=*/false);
    if (!ids.ok()) {
      ADD_FAILURE() << GetParam() << " case " << i << " \"" << Printable(c.text)
                    << "\": " << ids.status().ToString();
      continue;
    }
    if (*ids != c.ids) {
      ADD_FAILURE() << GetParam() << " case " << i << " \"" << Printable(c.text) << "\"\n"
                    << "  llama.cpp: " << IdList(c.ids) << "\n  streamd:   " << IdList(*ids);
      continue;
    }
    ++matched;
  }
  std::printf("%s (tokenizer.ggml.pre '%s'): %d of %zu cases match llama.cpp\n",
              std::string(GetParam()).c_str(),
              std::string((*tokenizer)->pre_tokenizer_name()).c_str(), matched, cases.size());
}

// "llama-bpe" -> "llama_bpe": gtest names allow no '-'.
std::string VocabTestName(const ::testing::TestParamInfo<std::string_view>& param) {
  std::string name(param.param);
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Vocab, TokenizerGoldenTest, ::testing::ValuesIn(kVocabs), VocabTestName);

TEST(TokenizerGoldenFilesTest, EveryVectorFileIsListed) {
  const std::string dir = VocabDirOrFail();
  if (dir.empty()) return;
  int listed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    constexpr std::string_view kPrefix = "ggml-vocab-", kSuffix = ".gguf.inp";
    if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) continue;
    const std::string vocab =
        name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
    bool found = false;
    for (std::string_view known : kVocabs) found = found || known == vocab;
    EXPECT_TRUE(found) << name << " has test vectors but is not in kVocabs";
    ++listed;
  }
  EXPECT_GT(listed, 0) << "no ggml-vocab-*.gguf.inp in " << dir;
}

}  // namespace
}  // namespace streamd::tokenizer
