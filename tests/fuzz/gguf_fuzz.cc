// libFuzzer target for the GGUF reader: any byte string must yield either a validated file
// whose every accessor and every tensor byte can be read, or an error with a one-line message.
// Never a crash, a sanitizer report, or an out-of-range tensor.
//
// Built twice: as gguf_fuzz (libFuzzer main) and, with STREAMD_GGUF_FUZZ_SEEDS, as
// gguf_fuzz_seeds, which writes the seed corpus with GgufWriter.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/gguf/gguf_file.h"

namespace {

using streamd::gguf::GgufFile;
using streamd::gguf::TensorInfo;
using streamd::gguf::Value;
using streamd::gguf::ValueType;

// Reads every stored byte of a value so ASan sees any dangling or short storage.
size_t Touch(const Value& v) {
  size_t sum = static_cast<size_t>(v.type);
  if (const auto* s = std::get_if<std::string>(&v.data)) {
    for (char c : *s) sum += static_cast<unsigned char>(c);
  } else if (v.type == ValueType::kArray) {
    // Nested arrays as Values, the others decoded from the file's bytes one by one.
    ForEachElement(v, [&sum](uint64_t, const Value& e) {
      sum += Touch(e);
      return true;
    });
  }
  return sum;
}

// Every getter on every key: each must return a value or a Status, whatever the stored type.
void CallGetters(const GgufFile& f, const std::string& key) {
  (void)f.GetU32(key);
  (void)f.GetI64(key);
  (void)f.GetF32(key);
  (void)f.GetBool(key);
  (void)f.GetString(key);
  (void)f.GetStringArray(key);
  (void)f.GetI32Array(key);
  (void)f.GetF32Array(key);
  (void)f.GetU32Or(key, 1);
  (void)f.GetStringOr(key, "x");
}

// The invariants the header promises; a violation is a reader bug, so trap.
void CheckTensor(const GgufFile& f, const TensorInfo& t, const uint8_t* data, size_t size) {
  const auto* traits = streamd::gguf::FindTensorTypeTraits(static_cast<uint32_t>(t.type));
  if (traits == nullptr || t.dims.empty() || t.dims.size() > 4) __builtin_trap();
  if (t.dims[0] % traits->block_size != 0 || t.offset % f.alignment() != 0) __builtin_trap();
  const uint64_t want = static_cast<uint64_t>(t.num_elements / traits->block_size) *
                        static_cast<uint64_t>(traits->type_size);
  if (t.size_bytes != want || t.rows() * t.dims[0] != t.num_elements) __builtin_trap();
  if (t.data < data || t.size_bytes > size || t.data + t.size_bytes > data + size) {
    __builtin_trap();
  }
  if (f.FindTensor(t.name) != &t) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = GgufFile::FromBuffer(data, size);
  if (!parsed.ok()) {
    const streamd::Status status = parsed.status();  // by value: status() returns a copy
    const std::string& msg = status.message();
    if (msg.empty() || msg.find('\n') != std::string::npos) __builtin_trap();
    return 0;
  }
  const GgufFile& f = **parsed;
  volatile size_t sink = 0;
  for (const auto& [key, value] : f.metadata()) {
    if (f.Find(key) != &value) __builtin_trap();
    sink = sink + Touch(value);
    CallGetters(f, key);
  }
  for (const TensorInfo& t : f.tensors()) {
    CheckTensor(f, t, data, size);
    for (uint64_t i = 0; i < t.size_bytes; ++i) sink = sink + t.data[i];
  }
  return 0;
}

#ifdef STREAMD_GGUF_FUZZ_SEEDS
#include <cstdio>
#include <fstream>
#include <iterator>

#include "engine/gguf/gguf_writer.h"

namespace {

using namespace streamd::gguf;  // NOLINT: seed builder only

void Save(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> Bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 13 + 1);
  return v;
}

GgufWriter AllValueTypes() {
  GgufWriter w;
  w.Add("general.architecture", MakeString("llama"));
  w.Add("u8", MakeValue<uint8_t>(1));
  w.Add("i8", MakeValue<int8_t>(-1));
  w.Add("u16", MakeValue<uint16_t>(2));
  w.Add("i16", MakeValue<int16_t>(-2));
  w.Add("llama.block_count", MakeValue<uint32_t>(2));
  w.Add("i32", MakeValue<int32_t>(-3));
  w.Add("llama.rope.freq_base", MakeValue<float>(10000.0f));
  w.Add("tokenizer.ggml.add_bos_token", MakeValue<bool>(true));
  w.Add("u64", MakeValue<uint64_t>(4));
  w.Add("i64", MakeValue<int64_t>(-4));
  w.Add("f64", MakeValue<double>(0.5));
  w.Add("tokenizer.ggml.tokens", MakeArrayOf<std::string>({"<s>", "a", "b c"}));
  w.Add("tokenizer.ggml.token_type", MakeArrayOf<int32_t>({3, 1, 1}));
  w.Add("tokenizer.ggml.scores", MakeArrayOf<float>({0.0f, -1.0f, -2.0f}));
  w.Add("nested", MakeArray(ValueType::kArray,
                            {MakeArrayOf<uint8_t>({1, 2}), MakeArrayOf<std::string>({"x"})}));
  return w;
}

GgufWriter AllTensorTypes(uint32_t alignment) {
  GgufWriter w;
  w.SetAlignment(alignment);
  w.Add("general.architecture", MakeString("llama"));
  (void)w.AddTensor("f32", TensorType::kF32, {4, 2}, Bytes(32));
  (void)w.AddTensor("f16", TensorType::kF16, {3}, Bytes(6));
  (void)w.AddTensor("bf16", TensorType::kBF16, {2, 2, 2}, Bytes(16));
  (void)w.AddTensor("q4_0", TensorType::kQ4_0, {32}, Bytes(18));
  (void)w.AddTensor("blk.0.attn_q.weight", TensorType::kQ4_1, {32, 2}, Bytes(40));
  (void)w.AddTensor("token_embd.weight", TensorType::kQ8_0, {64, 1, 1, 1}, Bytes(68));
  return w;
}

void WriteModelPrefixes(const std::string& dir, const char* model) {
  std::ifstream in(model, std::ios::binary);
  std::vector<char> head(65536);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  for (size_t n : {size_t{4096}, size_t{65536}}) {
    if (head.size() < n) continue;
    Save(dir, "model_prefix_" + std::to_string(n),
         std::vector<uint8_t>(head.begin(), head.begin() + n));
  }
}

}  // namespace

// gguf_fuzz_seeds DIR [MODEL]
int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [MODEL.gguf]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  Save(dir, "empty_v3", GgufWriter().Serialize());
  GgufWriter v2;
  v2.set_version(2);
  v2.Add("general.name", MakeString("v2"));
  Save(dir, "v2", v2.Serialize());
  Save(dir, "all_value_types", AllValueTypes().Serialize());
  Save(dir, "all_tensor_types_32", AllTensorTypes(32).Serialize());
  Save(dir, "all_tensor_types_1", AllTensorTypes(1).Serialize());
  Save(dir, "all_tensor_types_256", AllTensorTypes(256).Serialize());
  GgufWriter both = AllValueTypes();
  (void)both.AddTensor("output_norm.weight", TensorType::kF32, {8}, Bytes(32));
  (void)both.AddTensor("blk.0.ffn_up.weight", TensorType::kQ4_1, {32, 3}, Bytes(60));
  Save(dir, "values_and_tensors", both.Serialize());
  if (argc > 2) WriteModelPrefixes(dir, argv[2]);
  return 0;
}
#endif  // STREAMD_GGUF_FUZZ_SEEDS
