// ModelFingerprint on synthetic GGUFs (what it covers, and what it deliberately samples), and on
// the real default model when STREAMD_MODEL is set.
#include "engine/snapshot/model_fingerprint.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>

#include "engine/gguf/gguf_writer.h"

namespace streamd {
namespace {

using gguf::GgufFile;
using gguf::GgufWriter;
using gguf::TensorType;

constexpr int64_t kBigFloats = 16384;  // 64 KiB: far more than two samples

std::vector<uint8_t> Pattern(size_t n, uint8_t salt) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + salt);
  return v;
}

// A model-like file: metadata, a large tensor and a small one.
std::vector<uint8_t> Model(uint32_t block_count = 2, uint8_t salt = 0) {
  GgufWriter w;
  w.Add("general.architecture", gguf::MakeString("llama"));
  w.Add("general.name", gguf::MakeString("tiny"));
  w.Add("llama.block_count", gguf::MakeValue<uint32_t>(block_count));
  EXPECT_TRUE(w.AddTensor("token_embd.weight", TensorType::kF32, {64, kBigFloats / 64},
                          Pattern(kBigFloats * 4, salt))
                  .ok());
  EXPECT_TRUE(w.AddTensor("output_norm.weight", TensorType::kF32, {64}, Pattern(256, salt)).ok());
  return w.Serialize();
}

std::string Fingerprint(const std::vector<uint8_t>& bytes) {
  auto file = GgufFile::FromBuffer(bytes.data(), bytes.size());
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  return file.ok() ? ModelFingerprint(**file) : "";
}

// File offset of a tensor's first data byte.
size_t DataOffset(const std::vector<uint8_t>& bytes, std::string_view tensor) {
  auto file = GgufFile::FromBuffer(bytes.data(), bytes.size());
  EXPECT_TRUE(file.ok());
  return static_cast<size_t>((*file)->FindTensor(tensor)->data - bytes.data());
}

TEST(ModelFingerprintTest, SameBytesSameFingerprintOf32HexDigits) {
  const std::vector<uint8_t> a = Model();
  const std::vector<uint8_t> b = Model();  // another buffer, same bytes
  const std::string fa = Fingerprint(a);
  EXPECT_EQ(fa.size(), 32u);
  EXPECT_EQ(fa.find_first_not_of("0123456789abcdef"), std::string::npos) << fa;
  EXPECT_EQ(fa, Fingerprint(b));
}

TEST(ModelFingerprintTest, OneMetadataValueChangesIt) {
  EXPECT_NE(Fingerprint(Model(2)), Fingerprint(Model(3)));
}

TEST(ModelFingerprintTest, WeightsWithIdenticalMetadataDiffer) {
  // Two "fine-tunes": same metadata and shapes, different weights.
  EXPECT_NE(Fingerprint(Model(2, 0)), Fingerprint(Model(2, 1)));
}

TEST(ModelFingerprintTest, OneWeightByteInsideTheSampleChangesIt) {
  const std::vector<uint8_t> base = Model();
  const std::string f = Fingerprint(base);
  const size_t big = DataOffset(base, "token_embd.weight");
  const size_t big_size = kBigFloats * 4;
  const size_t small = DataOffset(base, "output_norm.weight");
  for (size_t at :
       {big, big + kFingerprintSampleBytes - 1, big + big_size - kFingerprintSampleBytes,
        big + big_size - 1, small, small + 255}) {
    std::vector<uint8_t> changed = base;
    changed[at] ^= 1;
    EXPECT_NE(Fingerprint(changed), f) << "byte " << at;
  }
  // Outside the sample (the middle of a large tensor) a change is not seen: the bounded cost.
  std::vector<uint8_t> middle = base;
  middle[big + big_size / 2] ^= 1;
  EXPECT_EQ(Fingerprint(middle), f);
}

TEST(ModelFingerprintTest, FileWithoutTensors) {
  GgufWriter w;
  w.Add("general.architecture", gguf::MakeString("llama"));
  const std::vector<uint8_t> bytes = w.Serialize();
  EXPECT_EQ(Fingerprint(bytes).size(), 32u);
  GgufWriter w2;
  w2.Add("general.architecture", gguf::MakeString("llamb"));
  EXPECT_NE(Fingerprint(bytes), Fingerprint(w2.Serialize()));
}

// The real default model: stable across opens, and cheap (printed; not asserted, the machine is
// shared).
TEST(ModelFingerprintTest, RealDefaultModel) {
  const char* path = std::getenv("STREAMD_MODEL");
  if (path == nullptr || *path == '\0') GTEST_SKIP() << "STREAMD_MODEL not set";
  auto a = GgufFile::Open(path);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const auto start = std::chrono::steady_clock::now();
  const std::string fa = ModelFingerprint(**a);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  auto b = GgufFile::Open(path);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(ModelFingerprint(**b), fa);
  EXPECT_EQ(fa.size(), 32u);
  RecordProperty("fingerprint", fa);
  RecordProperty("fingerprint_ms", std::to_string(ms));
  std::printf("fingerprint %s of %s in %.2f ms\n", fa.c_str(), path, ms);
}

}  // namespace
}  // namespace streamd
