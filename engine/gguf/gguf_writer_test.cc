// Writer -> reader round trips: every value type, nested arrays, every supported tensor type,
// and the layout rules (alignment of the data section and of each tensor).
#include "engine/gguf/gguf_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <numeric>

#include "engine/gguf/gguf_file.h"

namespace streamd::gguf {
namespace {

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

std::unique_ptr<GgufFile> MustParse(const std::vector<uint8_t>& bytes) {
  auto file = GgufFile::FromBuffer(bytes.data(), bytes.size());
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  return file.ok() ? std::move(file).value() : nullptr;
}

TEST(GgufWriterTest, RoundTripsEveryScalarType) {
  GgufWriter w;
  w.Add("u8", MakeValue<uint8_t>(250));
  w.Add("i8", MakeValue<int8_t>(-100));
  w.Add("u16", MakeValue<uint16_t>(65000));
  w.Add("i16", MakeValue<int16_t>(-30000));
  w.Add("u32", MakeValue<uint32_t>(4000000000u));
  w.Add("i32", MakeValue<int32_t>(-2000000000));
  w.Add("f32", MakeValue<float>(1.5f));
  w.Add("bool", MakeValue<bool>(true));
  w.Add("string", MakeString("héllo\nworld"));
  w.Add("u64", MakeValue<uint64_t>(std::numeric_limits<uint64_t>::max()));
  w.Add("i64", MakeValue<int64_t>(std::numeric_limits<int64_t>::min()));
  w.Add("f64", MakeValue<double>(-2.25));
  const std::vector<uint8_t> bytes = w.Serialize();
  auto file = MustParse(bytes);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->version(), 3u);
  ASSERT_EQ(file->metadata().size(), 12u);
  const char* order[] = {"u8",  "i8",   "u16",    "i16", "u32", "i32",
                         "f32", "bool", "string", "u64", "i64", "f64"};
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(file->metadata()[i].first, order[i]);
    const size_t type_id = i < 9 ? i : i + 1;  // id 9 is kArray
    EXPECT_EQ(static_cast<size_t>(file->metadata()[i].second.type), type_id) << order[i];
  }
  EXPECT_EQ(file->GetU32("u8").value(), 250u);
  EXPECT_EQ(file->GetI64("i8").value(), -100);
  EXPECT_EQ(file->GetU32("u16").value(), 65000u);
  EXPECT_EQ(file->GetI64("i16").value(), -30000);
  EXPECT_EQ(file->GetU32("u32").value(), 4000000000u);
  EXPECT_EQ(file->GetI64("i32").value(), -2000000000);
  EXPECT_EQ(file->GetF32("f32").value(), 1.5f);
  EXPECT_TRUE(file->GetBool("bool").value());
  EXPECT_EQ(file->GetString("string").value(), "héllo\nworld");
  EXPECT_EQ(std::get<uint64_t>(file->Find("u64")->data), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(file->GetI64("i64").value(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(file->GetF32("f64").value(), -2.25f);
  EXPECT_TRUE(file->tensors().empty());
}

TEST(GgufWriterTest, RoundTripsArraysOfEveryTypeAndNesting) {
  GgufWriter w;
  w.Add("a.u8", MakeArrayOf<uint8_t>({1, 2, 255}));
  w.Add("a.i8", MakeArrayOf<int8_t>({-1, 2}));
  w.Add("a.u16", MakeArrayOf<uint16_t>({7}));
  w.Add("a.i16", MakeArrayOf<int16_t>({-7, 8}));
  w.Add("a.u32", MakeArrayOf<uint32_t>({1, 2, 3}));
  w.Add("a.i32", MakeArrayOf<int32_t>({-5, 0, 5}));
  w.Add("a.f32", MakeArrayOf<float>({0.5f, -1.0f}));
  w.Add("a.bool", MakeArrayOf<bool>({true, false}));
  w.Add("a.string", MakeArrayOf<std::string>({"a", "", "ccc"}));
  w.Add("a.u64", MakeArrayOf<uint64_t>({1ull << 40}));
  w.Add("a.i64", MakeArrayOf<int64_t>({-(1ll << 40)}));
  w.Add("a.f64", MakeArrayOf<double>({3.0, 4.0}));
  w.Add("a.empty", MakeArrayOf<int32_t>({}));
  w.Add("a.nested", MakeArray(ValueType::kArray,
                              {MakeArrayOf<uint8_t>({1, 2}), MakeArrayOf<std::string>({"x"})}));
  const std::vector<uint8_t> bytes = w.Serialize();  // outlives the file: arrays view it
  auto file = MustParse(bytes);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->GetI32Array("a.u8").value(), (std::vector<int32_t>{1, 2, 255}));
  EXPECT_EQ(file->GetI32Array("a.i8").value(), (std::vector<int32_t>{-1, 2}));
  EXPECT_EQ(file->GetI32Array("a.u16").value(), (std::vector<int32_t>{7}));
  EXPECT_EQ(file->GetI32Array("a.i16").value(), (std::vector<int32_t>{-7, 8}));
  EXPECT_EQ(file->GetI32Array("a.u32").value(), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(file->GetI32Array("a.i32").value(), (std::vector<int32_t>{-5, 0, 5}));
  EXPECT_EQ(file->GetF32Array("a.f32").value(), (std::vector<float>{0.5f, -1.0f}));
  EXPECT_EQ(file->Find("a.bool")->array_type, ValueType::kBool);
  EXPECT_TRUE(std::holds_alternative<RawArray>(file->Find("a.bool")->data));
  EXPECT_EQ(std::get<bool>(ArrayElements(*file->Find("a.bool"))[0].data), true);
  EXPECT_EQ(file->GetStringArray("a.string").value(), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_FALSE(file->GetI32Array("a.u64").ok());  // 2^40 does not fit i32
  EXPECT_FALSE(file->GetI32Array("a.i64").ok());
  EXPECT_EQ(file->GetF32Array("a.f64").value(), (std::vector<float>{3.0f, 4.0f}));
  EXPECT_TRUE(file->GetI32Array("a.empty").value().empty());
  const Value* nested = file->Find("a.nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->array_type, ValueType::kArray);
  const auto& outer = std::get<std::vector<Value>>(nested->data);  // nested arrays stay Values
  ASSERT_EQ(outer.size(), 2u);
  EXPECT_EQ(outer[0].array_type, ValueType::kUint8);
  EXPECT_EQ(std::get<std::string>(ArrayElements(outer[1])[0].data), "x");
}

// "t3". (Not "t" + std::to_string(i): GCC 12 reports a false -Wrestrict on that at -O2.)
std::string TensorName(size_t i) { return std::string(1, 't').append(std::to_string(i)); }

struct TypeCase {
  TensorType type;
  std::vector<int64_t> dims;
  uint64_t bytes;
};

TEST(GgufWriterTest, RoundTripsEverySupportedTensorType) {
  const std::vector<TypeCase> cases = {
      {TensorType::kF32, {3, 5}, 3 * 5 * 4},      {TensorType::kF16, {7}, 7 * 2},
      {TensorType::kBF16, {2, 3, 4}, 24 * 2},     {TensorType::kQ4_0, {64, 3}, 6 * 18},
      {TensorType::kQ4_1, {32, 2, 1, 2}, 4 * 20}, {TensorType::kQ8_0, {96}, 3 * 34},
  };
  GgufWriter w;
  w.Add("general.architecture", MakeString("llama"));
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(w.AddTensor(TensorName(i), cases[i].type, cases[i].dims,
                            Pattern(cases[i].bytes, static_cast<uint8_t>(i)))
                    .ok());
  }
  const std::vector<uint8_t> bytes = w.Serialize();
  auto file = MustParse(bytes);
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(file->tensors().size(), cases.size());
  EXPECT_EQ(file->data_offset() % 32, 0u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const TensorInfo* t = file->FindTensor(TensorName(i));
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, cases[i].type);
    EXPECT_EQ(t->dims, cases[i].dims);
    EXPECT_EQ(t->size_bytes, cases[i].bytes);
    EXPECT_EQ(t->offset % 32, 0u);
    EXPECT_EQ(t->num_elements, std::accumulate(cases[i].dims.begin(), cases[i].dims.end(),
                                               int64_t{1}, std::multiplies<>()));
    EXPECT_EQ(t->rows() * cases[i].dims[0], t->num_elements);
    EXPECT_EQ(t->row_bytes() * static_cast<uint64_t>(t->rows()), t->size_bytes);
    EXPECT_EQ(t->data, bytes.data() + file->data_offset() + t->offset);
    const std::vector<uint8_t> want = Pattern(cases[i].bytes, static_cast<uint8_t>(i));
    EXPECT_EQ(std::memcmp(t->data, want.data(), want.size()), 0) << t->name;
  }
  EXPECT_EQ(file->FindTensor("missing"), nullptr);
}

TEST(GgufWriterTest, HonoursCustomAlignmentAndVersion2) {
  GgufWriter w;
  w.set_version(2);
  w.SetAlignment(256);
  ASSERT_TRUE(w.AddTensor("a", TensorType::kF32, {3}, Pattern(12, 1)).ok());
  ASSERT_TRUE(w.AddTensor("b", TensorType::kF32, {1}, Pattern(4, 2)).ok());
  const std::vector<uint8_t> bytes = w.Serialize();  // outlives the file: arrays view it
  auto file = MustParse(bytes);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->version(), 2u);
  EXPECT_EQ(file->alignment(), 256u);
  EXPECT_EQ(file->data_offset() % 256, 0u);
  EXPECT_EQ(file->FindTensor("a")->offset, 0u);
  EXPECT_EQ(file->FindTensor("b")->offset, 256u);
  EXPECT_EQ(file->file_size(), file->data_offset() + 256 + 4);
}

TEST(GgufWriterTest, AddTensorRejectsWrongByteCount) {
  GgufWriter w;
  EXPECT_FALSE(w.AddTensor("x", TensorType::kQ4_1, {32}, Pattern(19, 0)).ok());
  EXPECT_FALSE(w.AddTensor("x", TensorType::kQ4_1, {33}, Pattern(20, 0)).ok());
  EXPECT_TRUE(w.AddTensor("x", TensorType::kQ4_1, {32}, Pattern(20, 0)).ok());
}

TEST(GgufWriterTest, WriteFileThenOpenMapsTheFile) {
  GgufWriter w;
  w.Add("general.name", MakeString("tiny"));
  ASSERT_TRUE(w.AddTensor("w", TensorType::kF16, {4, 2}, Pattern(16, 3)).ok());
  const std::string path = ::testing::TempDir() + "gguf_writer_test.gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->GetString("general.name").value(), "tiny");
  const TensorInfo* t = (*file)->FindTensor("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(std::memcmp(t->data, Pattern(16, 3).data(), 16), 0);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace streamd::gguf
