// DequantizeReference against an independent implementation: the numpy dequantization of the
// `gguf` PyPI package (pinned in tests/reference/gguf-venv.sh), run by
// tests/reference/gguf_dequantize.py on fresh random blocks written to a temp file. Without
// Python, venv or PyPI the tests skip and say why; they never pass without the comparison.
#include "kernels/cpu/dequantize_reference.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/random_quant_blocks.h"
#include "tests/support/kernels_cpu_test_util.h"

namespace streamd::kernels {
namespace {

using cpu::testing::SeedTrace;
using cpu::testing::TestSeed;

// Runs a shell command; its stdout, and whether it exited 0.
bool RunCommand(const std::string& command, std::string* out) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return false;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out->append(buf, n);
  return pclose(pipe) == 0;
}

// The python with `gguf` installed (the venv is created on first use), or empty with *why set.
std::string GgufPython(std::string* why) {
  if (const char* env = std::getenv("STREAMD_GGUF_PYTHON")) return env;
  struct Found {
    std::string python, why;
  };
  static const Found found = [] {
    std::string out;
    const std::string cmd = std::string("'") + STREAMD_SOURCE_DIR +
                            "/tests/reference/gguf-venv.sh' '" + STREAMD_GGUF_VENV_DIR + "' 2>&1";
    if (!RunCommand(cmd, &out)) {
      return Found{"", "no Python with the gguf package (" + cmd + "): " + out};
    }
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return Found{out.substr(out.rfind('\n') + 1), ""};
  }();
  *why = found.why;
  return found.python;
}

std::vector<float> ReadFloats(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

class DequantizeReferenceTest : public ::testing::TestWithParam<ConvertedQuant> {};

TEST_P(DequantizeReferenceTest, EqualsGgufPackageOnRandomBlocks) {
  std::string why;
  const std::string python = GgufPython(&why);
  if (python.empty()) GTEST_SKIP() << why;

  const ConvertedQuant type = GetParam();
  const QuantLayout layout = LayoutOf(type);
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::printf("%s: seed %llu\n", layout.name, static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  constexpr int64_t kBlocks = 96;
  // Half the blocks with scales over a wide range of magnitudes and signs, half as a model's.
  std::vector<uint8_t> blocks = RandomBlocks(type, kBlocks / 2, rng, 0.0f);
  const std::vector<uint8_t> model_like = RandomBlocks(type, kBlocks / 2, rng, 0.25f);
  blocks.insert(blocks.end(), model_like.begin(), model_like.end());

  // One directory per type and process: ctest runs the types in parallel, with one seed when
  // STREAMD_TEST_SEED is set.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("streamd-dequant-" + std::string(layout.name) + "-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path in = dir / "blocks.bin", out = dir / "values.f32";
  {
    std::ofstream f(in, std::ios::binary);
    f.write(reinterpret_cast<const char*>(blocks.data()),
            static_cast<std::streamsize>(blocks.size()));
  }
  std::string log;
  const bool ran = RunCommand("'" + python + "' '" + STREAMD_SOURCE_DIR +
                                  "/tests/reference/gguf_dequantize.py' " + layout.name + " '" +
                                  in.string() + "' '" + out.string() + "' 2>&1",
                              &log);
  const std::vector<float> expected = ReadFloats(out);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(ran) << "gguf_dequantize.py failed: " << log;
  ASSERT_EQ(expected.size(), static_cast<size_t>(kBlocks * layout.block_values));

  std::vector<float> got(expected.size());
  DequantizeReference(type, blocks.data(), kBlocks, got.data());
  int mismatches = 0;
  for (size_t i = 0; i < got.size() && mismatches < 8; ++i) {
    // Bit for bit: the same f32 products in the same order (dequantize_reference.cc).
    if (std::memcmp(&got[i], &expected[i], sizeof(float)) != 0) {
      ADD_FAILURE() << layout.name << " value " << i << " (block " << i / layout.block_values
                    << ", index " << i % layout.block_values << "): " << got[i] << ", gguf "
                    << expected[i];
      ++mismatches;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllConverted, DequantizeReferenceTest,
                         ::testing::ValuesIn(kConvertedQuants),
                         [](const ::testing::TestParamInfo<ConvertedQuant>& p) {
                           return std::string(LayoutOf(p.param).name);
                         });

}  // namespace
}  // namespace streamd::kernels
