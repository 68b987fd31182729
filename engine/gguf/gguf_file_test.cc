// Validation of hostile and corrupt GGUF input, typed getters, Open() errors, and (when
// STREAMD_MODEL is set) the real default model.
#include "engine/gguf/gguf_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>

#include "engine/gguf/gguf_writer.h"

namespace streamd {
// Lets gtest print codes by name.
void PrintTo(StatusCode code, std::ostream* os) { *os << StatusCodeName(code); }
}  // namespace streamd

namespace streamd::gguf {
namespace {

// Substring check that prints the whole message when it fails.
::testing::AssertionResult Contains(const std::string& message, std::string_view part) {
  if (message.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not in: " << message;
}

// Hand-built bytes for headers the writer cannot express (absurd counts, lengths).
struct Bytes {
  std::vector<uint8_t> v;
  template <typename T>
  Bytes& Put(T x) {
    const size_t at = v.size();
    v.resize(at + sizeof(T));
    std::memcpy(v.data() + at, &x, sizeof(T));
    return *this;
  }
  Bytes& Str(std::string_view s) {
    Put<uint64_t>(s.size());
    v.insert(v.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& Header(uint64_t n_tensors, uint64_t n_kv) {
    return Put<uint32_t>(0x46554747).Put<uint32_t>(3).Put(n_tensors).Put(n_kv);
  }
};

StatusOr<std::unique_ptr<GgufFile>> Parse(const std::vector<uint8_t>& bytes) {
  return GgufFile::FromBuffer(bytes.data(), bytes.size());
}

// Expects failure with `code` and a one-line message containing every `parts`.
void ExpectError(const std::vector<uint8_t>& bytes, StatusCode code,
                 std::initializer_list<std::string_view> parts) {
  auto file = Parse(bytes);
  ASSERT_FALSE(file.ok()) << "parsed a file that should have been rejected";
  const Status s = file.status();
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  for (std::string_view p : parts) EXPECT_TRUE(Contains(s.message(), p));
}

std::vector<uint8_t> Zeros(size_t n) { return std::vector<uint8_t>(n, 0); }

// A small valid file touching every section: scalar, string and array metadata, an explicit
// alignment, and tensors of three types.
GgufWriter ValidWriter() {
  GgufWriter w;
  w.Add("general.architecture", MakeString("llama"));
  w.SetAlignment(64);
  w.Add("llama.block_count", MakeValue<uint32_t>(2));
  w.Add("llama.rope.freq_base", MakeValue<float>(10000.0f));
  w.Add("tokenizer.ggml.tokens", MakeArrayOf<std::string>({"<s>", "a", "bc"}));
  w.Add("tokenizer.ggml.token_type", MakeArrayOf<int32_t>({3, 1, 1}));
  w.Add("tokenizer.ggml.add_bos_token", MakeValue<bool>(false));
  w.Add("nested", MakeArray(ValueType::kArray, {MakeArrayOf<uint16_t>({1, 2})}));
  EXPECT_TRUE(w.AddTensor("token_embd.weight", TensorType::kQ8_0, {32, 3}, Zeros(3 * 34)).ok());
  EXPECT_TRUE(w.AddTensor("output_norm.weight", TensorType::kF32, {32}, Zeros(128)).ok());
  EXPECT_TRUE(w.AddTensor("blk.0.attn_q.weight", TensorType::kQ4_1, {32, 32}, Zeros(640)).ok());
  return w;
}

TEST(GgufFileTest, ValidFileParses) {
  const std::vector<uint8_t> bytes = ValidWriter().Serialize();
  auto file = Parse(bytes);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->alignment(), 64u);
  EXPECT_EQ((*file)->tensors().size(), 3u);
}

TEST(GgufFileTest, TruncationAtEveryByteIsAnErrorNeverACrash) {
  const std::vector<uint8_t> bytes = ValidWriter().Serialize();
  for (size_t n = 0; n < bytes.size(); ++n) {
    // A fresh exact-size copy, so a read past the end is caught by ASan/valgrind.
    const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + n);
    auto file = Parse(prefix);
    ASSERT_FALSE(file.ok()) << "prefix of " << n << " bytes parsed";
    const Status s = file.status();
    EXPECT_TRUE(s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kInvalidArgument)
        << n << ": " << s.ToString();
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
  }
}

TEST(GgufFileTest, FlippedBytesNeverCrash) {
  const std::vector<uint8_t> bytes = ValidWriter().Serialize();
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      std::vector<uint8_t> copy = bytes;
      copy[i] ^= mask;
      auto file = Parse(copy);
      if (!file.ok()) {
        EXPECT_EQ(file.status().message().find('\n'), std::string::npos);
        continue;
      }
      for (const TensorInfo& t : (*file)->tensors()) {  // the invariant readers rely on
        ASSERT_GE(t.data, copy.data());
        ASSERT_LE(t.data + t.size_bytes, copy.data() + copy.size());
      }
    }
  }
}

TEST(GgufFileTest, RejectsEmptyAndWrongMagic) {
  ExpectError({}, StatusCode::kInvalidArgument, {"not a GGUF file", "0 bytes"});
  EXPECT_FALSE(GgufFile::FromBuffer(nullptr, 0).ok());
  ExpectError(Bytes().Put<uint32_t>(0x4c4d4747).Put<uint32_t>(3).v, StatusCode::kInvalidArgument,
              {"not a GGUF file: magic is 'GGML'", "expected 'GGUF'"});
  ExpectError({'\x7f', 'E', 'L', 'F', 0, 0}, StatusCode::kInvalidArgument, {"'\\x7fELF'"});
}

TEST(GgufFileTest, RejectsUnsupportedVersions) {
  auto with_version = [](uint32_t v) { return Bytes().Put<uint32_t>(0x46554747).Put(v).v; };
  ExpectError(with_version(1), StatusCode::kUnimplemented, {"version 1 ", "supported: 2, 3"});
  ExpectError(with_version(4), StatusCode::kUnimplemented, {"version 4 "});
  ExpectError(with_version(0x03000000), StatusCode::kUnimplemented, {"big-endian"});
}

TEST(GgufFileTest, RejectsCountsThatCannotFit) {
  ExpectError(Bytes().Header(0, uint64_t{1} << 62).v, StatusCode::kDataLoss,
              {"4611686018427387904 metadata keys"});
  ExpectError(Bytes().Header(~uint64_t{0}, 0).v, StatusCode::kDataLoss,
              {"18446744073709551615 tensors"});
  // Counts that fit the byte budget but whose contents are missing: a clean truncation error.
  ExpectError(Bytes().Header(0, 1).Put<uint64_t>(0).Put<uint32_t>(0).Put<uint16_t>(0).v,
              StatusCode::kInvalidArgument, {"key #0", "empty"});
}

TEST(GgufFileTest, RejectsBadStringLengths) {
  ExpectError(Bytes().Header(0, 1).Put<uint64_t>(uint64_t{1} << 60).Put<uint64_t>(0).v,
              StatusCode::kInvalidArgument, {"metadata key #0", "over the limit of 65535"});
  ExpectError(Bytes().Header(0, 1).Put<uint64_t>(100).Put<uint32_t>(0).Put<uint16_t>(0).v,
              StatusCode::kDataLoss, {"truncated", "metadata key #0", "needs 100 bytes"});
  ExpectError(Bytes().Header(0, 1).Str("k").Put<uint32_t>(8).Put<uint64_t>(~0ull).v,
              StatusCode::kDataLoss, {"string value of key 'k'"});
}

TEST(GgufFileTest, RejectsBadArrays) {
  ExpectError(Bytes()
                  .Header(0, 1)
                  .Str("arr")
                  .Put<uint32_t>(9)
                  .Put<uint32_t>(4)
                  .Put<uint64_t>(uint64_t{1} << 61)
                  .v,
              StatusCode::kDataLoss, {"'arr' claims 2305843009213693952 u32 elements"});
  ExpectError(Bytes().Header(0, 1).Str("arr").Put<uint32_t>(9).Put<uint32_t>(77).v,
              StatusCode::kInvalidArgument, {"'arr'", "unknown value type 77"});
  Bytes deep = Bytes().Header(0, 1).Str("deep").Put<uint32_t>(9);
  for (int i = 0; i < 6; ++i) deep.Put<uint32_t>(9).Put<uint64_t>(1);
  ExpectError(deep.v, StatusCode::kInvalidArgument, {"'deep' nests arrays deeper than 4"});
  // Fits in the file, but over the total-values cap: rejected before allocating.
  Bytes big = Bytes().Header(0, 1).Str("big").Put<uint32_t>(9).Put<uint32_t>(0).Put<uint64_t>(
      (uint64_t{1} << 24) + 1);
  big.v.resize(big.v.size() + (size_t{1} << 24) + 1);
  ExpectError(big.v, StatusCode::kInvalidArgument, {"'big' has 16777217 elements"});
}

TEST(GgufFileTest, RejectsUnknownValueTypeAndBadBool) {
  GgufWriter w;
  Value odd;
  odd.type = static_cast<ValueType>(13);
  w.Add("general.weird", odd);
  ExpectError(w.Serialize(), StatusCode::kInvalidArgument,
              {"'general.weird' has unknown value type 13", "at byte"});
  ExpectError(Bytes().Header(0, 1).Str("flag").Put<uint32_t>(7).Put<uint8_t>(2).v,
              StatusCode::kInvalidArgument, {"'flag' has bool byte 2"});
}

TEST(GgufFileTest, RejectsDuplicatesAndEmptyNames) {
  GgufWriter keys;
  keys.Add("a", MakeValue<uint8_t>(1));
  keys.Add("a", MakeValue<uint8_t>(2));
  ExpectError(keys.Serialize(), StatusCode::kInvalidArgument, {"duplicate metadata key 'a'"});
  GgufWriter tensors;
  ASSERT_TRUE(tensors.AddTensor("w", TensorType::kF32, {1}, Zeros(4)).ok());
  ASSERT_TRUE(tensors.AddTensor("w", TensorType::kF32, {1}, Zeros(4)).ok());
  ExpectError(tensors.Serialize(), StatusCode::kInvalidArgument, {"duplicate tensor name 'w'"});
  GgufWriter unnamed;
  unnamed.AddRawTensor("", 0, {1}, Zeros(4));
  ExpectError(unnamed.Serialize(), StatusCode::kInvalidArgument, {"tensor #0", "empty name"});
  GgufWriter long_name;
  long_name.AddRawTensor(std::string(65, 'n'), 0, {1}, Zeros(4));
  ExpectError(long_name.Serialize(), StatusCode::kInvalidArgument, {"65 bytes", "limit of 64"});
}

TEST(GgufFileTest, RejectsBadAlignment) {
  for (uint32_t bad : {0u, 3u, 48u}) {
    GgufWriter w;
    w.Add("general.alignment", MakeValue<uint32_t>(bad));
    ExpectError(w.Serialize(), StatusCode::kInvalidArgument,
                {"general.alignment is " + std::to_string(bad), "power of two"});
  }
  GgufWriter wide;
  wide.Add("general.alignment", MakeValue<uint64_t>(32));
  ExpectError(wide.Serialize(), StatusCode::kInvalidArgument, {"type u64, expected u32"});
}

TEST(GgufFileTest, RejectsBadShapes) {
  auto with_dims = [](uint32_t type, std::vector<int64_t> dims) {
    GgufWriter w;
    w.AddRawTensor("blk.0.ffn_up.weight", type, std::move(dims), {});
    return w.Serialize();
  };
  ExpectError(with_dims(0, {}), StatusCode::kInvalidArgument, {"0 dimensions", "1..4"});
  ExpectError(with_dims(0, {1, 1, 1, 1, 1}), StatusCode::kInvalidArgument, {"5 dimensions"});
  ExpectError(with_dims(0, {4, 0}), StatusCode::kInvalidArgument, {"dim 1 is 0"});
  ExpectError(with_dims(0, {4, -1}), StatusCode::kInvalidArgument,
              {"dim 1 is 18446744073709551615"});
  ExpectError(with_dims(0, {int64_t{1} << 32, int64_t{1} << 32}), StatusCode::kInvalidArgument,
              {"'blk.0.ffn_up.weight' element count overflows"});
  ExpectError(with_dims(0, {int64_t{1} << 62}), StatusCode::kInvalidArgument,
              {"byte size overflows"});
  ExpectError(with_dims(3, {48, 2}), StatusCode::kInvalidArgument,
              {"type Q4_1 has row length 48, not a multiple of the block size 32"});
}

TEST(GgufFileTest, NamesUnsupportedTensorTypes) {
  GgufWriter w;
  w.AddRawTensor("blk.0.attn_q.weight", 16, {256}, {});
  const std::vector<uint8_t> bytes = w.Serialize();  // outlives the file: arrays view it
  auto file = Parse(bytes);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(file.status().message(),
            "tensor types streamd does not support: IQ2_XXS (1 tensor: 'blk.0.attn_q.weight') "
            "(supported: F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, Q3_K, Q2_K, Q5_0, "
            "Q5_1, IQ4_NL, IQ4_XS)");
  GgufWriter unknown;
  unknown.AddRawTensor("x", 99, {1}, {});
  ExpectError(unknown.Serialize(), StatusCode::kInvalidArgument,
              {"'x'", "unknown ggml type id 99"});
}

// Every unsupported type in one error, with its count and first tensor: a user re-encoding a
// file learns all of them at once. Supported tensors between them change nothing.
TEST(GgufFileTest, NamesEveryUnsupportedTensorTypeWithCounts) {
  GgufWriter w;
  w.AddRawTensor("blk.0.attn_q.weight", 16, {256}, {});  // IQ2_XXS
  ASSERT_TRUE(
      w.AddTensor("blk.0.attn_norm.weight", TensorType::kF32, {4}, std::vector<uint8_t>(16)).ok());
  w.AddRawTensor("blk.0.attn_k.weight", 19, {256}, {});  // IQ1_S
  w.AddRawTensor("blk.1.attn_q.weight", 16, {256}, {});
  w.AddRawTensor("blk.2.attn_q.weight", 16, {256}, {});
  const std::vector<uint8_t> bytes = w.Serialize();  // outlives the file: arrays view it
  auto file = Parse(bytes);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(file.status().message().find('\n'), std::string::npos);
  EXPECT_EQ(file.status().message().rfind(
                "tensor types streamd does not support: IQ2_XXS (3 tensors, first "
                "'blk.0.attn_q.weight'), IQ1_S (1 tensor: 'blk.0.attn_k.weight') (supported: F32,",
                0),
            0u)
      << file.status().message();
  // Damage after an unsupported tensor is still damage (the first error of that kind wins).
  GgufWriter dup;
  dup.AddRawTensor("a", 16, {256}, {});
  dup.AddRawTensor("a", 16, {256}, {});
  ExpectError(dup.Serialize(), StatusCode::kInvalidArgument, {"duplicate tensor name 'a'"});
}

TEST(GgufFileTest, MetadataOnlyReadSkipsTensorsItCannotUse) {
  GgufWriter w;
  w.Add("tokenizer.ggml.model", MakeString("gpt2"));
  w.AddRawTensor("blk.0.attn_q.weight", 13, {256}, {});  // Q5_K
  const std::vector<uint8_t> bytes = w.Serialize();
  ASSERT_FALSE(Parse(bytes).ok());
  auto file = GgufFile::FromBuffer(bytes.data(), bytes.size(), GgufRead::kMetadataOnly);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(*(*file)->GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_TRUE((*file)->tensors().empty());
  EXPECT_EQ((*file)->FindTensor("blk.0.attn_q.weight"), nullptr);
  // Metadata is still validated: a file cut inside it fails either way.
  const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + 40);
  EXPECT_FALSE(GgufFile::FromBuffer(cut.data(), cut.size(), GgufRead::kMetadataOnly).ok());
}

TEST(GgufFileTest, TypeNamesFollowGgml) {
  EXPECT_EQ(TensorTypeName(0), "F32");
  EXPECT_EQ(TensorTypeName(8), "Q8_0");
  EXPECT_EQ(TensorTypeName(13), "Q5_K");
  EXPECT_EQ(TensorTypeName(16), "IQ2_XXS");
  EXPECT_EQ(TensorTypeName(30), "BF16");
  EXPECT_EQ(TensorTypeName(39), "MXFP4");
  EXPECT_EQ(TensorTypeName(1000), "type 1000");
  EXPECT_EQ(FindTensorTypeTraits(16), nullptr);  // IQ2_XXS: not supported
  EXPECT_EQ(FindTensorTypeTraits(3)->type_size, 20);
  EXPECT_EQ(FindTensorTypeTraits(13)->type_size, 176);  // Q5_K: converted at load
  EXPECT_EQ(FindTensorTypeTraits(13)->block_size, 256);
  EXPECT_EQ(ValueTypeName(ValueType::kFloat64), "f64");
}

TEST(GgufFileTest, RejectsMisplacedTensorData) {
  GgufWriter misaligned;
  misaligned.AddRawTensor("a", 0, {1}, Zeros(4), 4);
  ExpectError(misaligned.Serialize(), StatusCode::kInvalidArgument,
              {"'a' offset 4 is not a multiple of general.alignment 32"});
  GgufWriter past_end;
  past_end.AddRawTensor("a", 0, {1}, Zeros(4));
  past_end.AddRawTensor("b", 0, {16}, {}, 1024);
  ExpectError(past_end.Serialize(), StatusCode::kDataLoss,
              {"'b' data (offset 1024, 64 bytes) runs past the end"});
  GgufWriter wraps;  // offset + size overflows 64 bits: must not wrap into range
  wraps.AddRawTensor("a", 0, {8}, Zeros(32));
  wraps.AddRawTensor("b", 0, {8}, {}, ~uint64_t{31});
  ExpectError(wraps.Serialize(), StatusCode::kDataLoss, {"'b' data"});
  GgufWriter overlap;
  overlap.AddRawTensor("a", 0, {16}, Zeros(64), 0);
  overlap.AddRawTensor("b", 0, {16}, Zeros(64), 32);
  ExpectError(overlap.Serialize(), StatusCode::kInvalidArgument,
              {"tensors 'a' [0, 64) and 'b' [32, 96) overlap"});
}

TEST(GgufFileTest, GetterErrorsNameTheKey) {
  GgufWriter w;
  w.Add("s", MakeString("text"));
  w.Add("neg", MakeValue<int32_t>(-1));
  w.Add("huge", MakeValue<uint64_t>(uint64_t{1} << 40));
  w.Add("max", MakeValue<uint64_t>(~uint64_t{0}));
  w.Add("byte", MakeValue<uint8_t>(1));
  w.Add("f", MakeValue<double>(1e300));
  w.Add("ints", MakeArrayOf<int64_t>({1, int64_t{1} << 40}));
  w.Add("strs", MakeArrayOf<std::string>({"a"}));
  const std::vector<uint8_t> bytes = w.Serialize();  // outlives the file: arrays view it
  auto parsed = Parse(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const GgufFile& f = **parsed;
  auto expect = [](const Status& s, StatusCode code, std::string_view text) {
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_TRUE(Contains(s.message(), text));
  };
  expect(f.GetU32("missing").status(), StatusCode::kNotFound, "metadata key 'missing' not found");
  expect(f.GetU32("s").status(), StatusCode::kInvalidArgument, "'s' holds string, expected an");
  expect(f.GetU32("neg").status(), StatusCode::kInvalidArgument, "'neg' holds i32 -1");
  expect(f.GetU32("huge").status(), StatusCode::kInvalidArgument, "'huge' holds u64 1099511627776");
  expect(f.GetI64("max").status(), StatusCode::kInvalidArgument, "'max'");
  expect(f.GetF32("byte").status(), StatusCode::kInvalidArgument, "'byte' holds u8 1");
  expect(f.GetF32("f").status(), StatusCode::kInvalidArgument, "'f'");
  expect(f.GetBool("byte").status(), StatusCode::kInvalidArgument, "expected bool");
  expect(f.GetString("neg").status(), StatusCode::kInvalidArgument, "expected string");
  expect(f.GetStringArray("ints").status(), StatusCode::kInvalidArgument, "'ints' element 0");
  expect(f.GetI32Array("ints").status(), StatusCode::kInvalidArgument, "'ints' element 1");
  expect(f.GetI32Array("s").status(), StatusCode::kInvalidArgument, "'s' holds string");
  expect(f.GetF32Array("strs").status(), StatusCode::kInvalidArgument, "'strs' element 0");
  EXPECT_EQ(f.GetI64("neg").value(), -1);
  EXPECT_EQ(f.GetI64("huge").value(), int64_t{1} << 40);
  EXPECT_EQ(f.GetU32Or("missing", 7).value(), 7u);
  EXPECT_EQ(f.GetF32Or("missing", 0.5f).value(), 0.5f);
  EXPECT_TRUE(f.GetBoolOr("missing", true).value());
  EXPECT_EQ(f.GetStringOr("missing", "x").value(), "x");
  EXPECT_EQ(f.GetStringOr("s", "x").value(), "text");
  expect(f.GetU32Or("s", 7).status(), StatusCode::kInvalidArgument, "'s'");
  expect(f.GetBoolOr("s", true).status(), StatusCode::kInvalidArgument, "'s'");
}

TEST(GgufFileTest, OpenReportsPathProblems) {
  const std::string dir = ::testing::TempDir();
  auto missing = GgufFile::Open(dir + "no-such-model.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(missing.status().message(), "no-such-model.gguf"));
  EXPECT_TRUE(Contains(missing.status().message(), "No such file or directory"));

  auto directory = GgufFile::Open(dir);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(directory.status().message(), "directory"));

  const std::string empty = dir + "gguf_file_test_empty.gguf";
  std::ofstream(empty).close();
  auto empty_file = GgufFile::Open(empty);
  ASSERT_FALSE(empty_file.ok());
  EXPECT_TRUE(Contains(empty_file.status().message(), "is empty"));
  auto under_file = GgufFile::Open(empty + "/model.gguf");
  EXPECT_EQ(under_file.status().code(), StatusCode::kNotFound);

  const std::string corrupt = dir + "gguf_file_test_corrupt.gguf";
  std::ofstream(corrupt) << "GGML and more";
  auto bad = GgufFile::Open(corrupt);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status().message(), corrupt + ": not a GGUF file"));
  std::remove(empty.c_str());
  std::remove(corrupt.c_str());
}

// The real default model; the integration suite sets STREAMD_MODEL.
TEST(GgufFileTest, RealDefaultModel) {
  const char* path = std::getenv("STREAMD_MODEL");
  if (path == nullptr || *path == '\0') GTEST_SKIP() << "STREAMD_MODEL not set";
  auto opened = GgufFile::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const GgufFile& f = **opened;
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(f.metadata().size(), 33u);
  EXPECT_EQ(f.GetU32("llama.block_count").value(), 30u);
  EXPECT_EQ(f.GetString("general.architecture").value(), "llama");
  std::map<std::string, int> counts;
  for (const TensorInfo& t : f.tensors()) ++counts[TensorTypeName(static_cast<uint32_t>(t.type))];
  EXPECT_EQ(counts, (std::map<std::string, int>{{"Q4_1", 210}, {"F32", 61}, {"Q8_0", 1}}));
  const TensorInfo* embd = f.FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dims, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(embd->type, TensorType::kQ8_0);
  EXPECT_EQ(f.GetStringArray("tokenizer.ggml.tokens").value().size(), 49152u);
}

}  // namespace
}  // namespace streamd::gguf
