// model_check.h: a GGUF with several problems (architecture, tensor types, pre-tokenizer) is
// refused with every one of them in one message naming the path once; each alone is named
// alone; a good model has none, and a loader's own error stays as it was.
#include "engine/backends/cpu/model_check.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "engine/backends/cpu/llama_model.h"
#include "engine/model/model_family.h"
#include "tests/support/model_check_test_util.h"

namespace streamd {
namespace {

using namespace streamd::testing;

std::string TempDir() {
  char tmpl[] = "/tmp/streamd-model-check-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d;
}

std::string WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return path;
}

size_t Occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

std::vector<uint8_t> GoodModel() {
  SyntheticModelSpec spec;
  spec.with_vocab = true;
  spec.vocab_size = 300;
  auto bytes = BuildSyntheticModel(spec);
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  return *std::move(bytes);
}

// The families streamd reads (model_family.h), named in the order it lists them.
const std::string kArchitectureProblem =
    "architecture \"gpt-neox\" is not supported (supported: " + SupportedArchitectures() + ")";
const char* kTypesProblem =
    "tensor types streamd does not support: IQ2_XXS (3 tensors, first 'blk.0.attn_q.weight'), "
    "IQ1_S (1 tensor: 'blk.1.ffn_up.weight') (supported: F32,";
const char* kPreProblem = "tokenizer.ggml.pre 'no-such-pre' is not supported (supported: ";

TEST(ModelCheckTest, NamesEveryProblemAtOnceWithThePathOnce) {
  auto bytes = GgufWithSeveralProblems();
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  const std::string path = WriteFile(TempDir() + "/several.gguf", *bytes);
  const Status s = CheckModelFile(path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  const std::string& m = s.message();
  EXPECT_EQ(m.rfind(path + ": 3 problems: ", 0), 0u) << m;
  EXPECT_EQ(Occurrences(m, path), 1u) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);
  for (const std::string& part :
       {kArchitectureProblem, std::string(kTypesProblem), std::string(kPreProblem)}) {
    EXPECT_NE(m.find(part), std::string::npos) << part << "\nnot in: " << m;
  }
  // What a loader reports: the same message, whatever it stopped at first.
  auto model = LlamaModel::Load(path);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(ExplainModelLoadFailure(path, model.status()).message(), m);
}

TEST(ModelCheckTest, EachProblemAloneIsNamedAlone) {
  const std::vector<uint8_t> good = GoodModel();
  const std::string dir = TempDir();
  struct Case {
    const char* name;
    std::string architecture, pre;
    std::vector<std::pair<std::string, uint32_t>> retype;
    std::string want;
    StatusCode code;  // the reader's own (the pre-tokenizer's is INVALID_ARGUMENT)
  };
  const std::vector<Case> cases = {
      {"architecture", kBadArchitecture, "", {}, kArchitectureProblem, StatusCode::kUnimplemented},
      {"pre", "", kBadPreTokenizer, {}, kPreProblem, StatusCode::kInvalidArgument},
      {"types",
       "",
       "",
       {{"blk.0.attn_q.weight", kIq1S}},
       "tensor types streamd does not support: IQ1_S (1 tensor: 'blk.0.attn_q.weight')",
       StatusCode::kUnimplemented},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto bytes = RewriteGguf(good, c.architecture, c.pre, c.retype);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    const std::string path = WriteFile(dir + "/" + c.name + ".gguf", *bytes);
    const Status s = CheckModelFile(path);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), c.code) << s.ToString();
    EXPECT_EQ(s.message().rfind(path + ": " + c.want, 0), 0u) << s.message();
    EXPECT_EQ(s.message().find("problems:"), std::string::npos) << s.message();
  }
}

TEST(ModelCheckTest, AGoodModelHasNoneAndALoadersOwnErrorIsKept) {
  const std::string path = WriteFile(TempDir() + "/good.gguf", GoodModel());
  EXPECT_TRUE(CheckModelFile(path).ok()) << CheckModelFile(path).ToString();
  const Status other = ResourceExhaustedError("cannot map 98 MB");
  EXPECT_EQ(ExplainModelLoadFailure(path, other).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ExplainModelLoadFailure(path, other).message(), path + ": cannot map 98 MB");
  const Status named = DataLossError(path + ": truncated");
  EXPECT_EQ(ExplainModelLoadFailure(path, named).message(), named.message());
  // Not a GGUF at all: the reader's one error, the path in it once.
  const std::string junk = WriteFile(TempDir() + "/junk.gguf", {'n', 'o', 'p', 'e'});
  const Status s = CheckModelFile(junk);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(Occurrences(s.message(), junk), 1u) << s.message();
}

}  // namespace
}  // namespace streamd
