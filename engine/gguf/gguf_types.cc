// GGUF type tables: metadata value types (names, minimum encoded sizes) and ggml tensor types
// (the names of every ggml id, and block traits of the ones streamd supports).
#include <array>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_internal.h"

namespace streamd::gguf {
namespace {

struct SupportedType {
  TensorType type;
  TensorTypeTraits traits;
};
constexpr SupportedType kSupportedTypes[] = {
    {TensorType::kF32, {"F32", 1, 4}},
    {TensorType::kF16, {"F16", 1, 2}},
    {TensorType::kBF16, {"BF16", 1, 2}},
    {TensorType::kQ4_0, {"Q4_0", 32, 18}},  // f16 scale + 16 bytes of nibbles
    {TensorType::kQ4_1, {"Q4_1", 32, 20}},  // f16 scale + f16 min + 16 bytes of nibbles
    {TensorType::kQ8_0, {"Q8_0", 32, 34}},  // f16 scale + 32 int8
    // Converted at load; layouts in kernels/cpu/dequantize_reference.h.
    {TensorType::kQ4_K, {"Q4_K", 256, 144}},
    {TensorType::kQ5_K, {"Q5_K", 256, 176}},
    {TensorType::kQ6_K, {"Q6_K", 256, 210}},
    {TensorType::kQ3_K, {"Q3_K", 256, 110}},
    {TensorType::kQ2_K, {"Q2_K", 256, 84}},
    {TensorType::kQ5_0, {"Q5_0", 32, 22}},
    {TensorType::kQ5_1, {"Q5_1", 32, 24}},
    {TensorType::kIQ4_NL, {"IQ4_NL", 32, 18}},
    {TensorType::kIQ4_XS, {"IQ4_XS", 256, 136}},
};

// Indexed by ValueType. min_bytes is the size of one encoded element, for strings and arrays
// of its fixed-size prefix (u64 length; u32 type + u64 count): the floor used to reject counts.
struct ValueTypeInfo {
  std::string_view name;
  uint64_t min_bytes;
};
constexpr ValueTypeInfo kValueTypes[] = {
    {"u8", 1},   {"i8", 1},     {"u16", 2},    {"i16", 2}, {"u32", 4}, {"i32", 4}, {"f32", 4},
    {"bool", 1}, {"string", 8}, {"array", 12}, {"u64", 8}, {"i64", 8}, {"f64", 8},
};

// Every ggml type id, including ones ggml removed, so old files get a meaningful name.
constexpr std::array<std::string_view, 43> kGgmlTypeNames = {
    "F32",   "F16",        "Q4_0",       "Q4_1",       "Q4_2",     "Q4_3",     "Q5_0",
    "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
    "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
    "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
    "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
    "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",    "NVFP4",    "Q1_0",
    "Q2_0"};

}  // namespace

namespace internal {

bool IsKnownValueType(uint32_t t) { return t < std::size(kValueTypes); }

uint64_t ValueTypeMinBytes(uint32_t t) { return kValueTypes[t].min_bytes; }

bool IsGgmlTypeId(uint32_t type_id) { return type_id < kGgmlTypeNames.size(); }

}  // namespace internal

std::string_view ValueTypeName(ValueType type) {
  const auto id = static_cast<uint32_t>(type);
  return internal::IsKnownValueType(id) ? kValueTypes[id].name : "unknown";
}

const TensorTypeTraits* FindTensorTypeTraits(uint32_t type_id) {
  for (const SupportedType& t : kSupportedTypes) {
    if (static_cast<uint32_t>(t.type) == type_id) return &t.traits;
  }
  return nullptr;
}

std::string SupportedTensorTypeNames() {
  std::string names;
  for (const SupportedType& t : kSupportedTypes) {
    if (!names.empty()) names += ", ";
    names += t.traits.name;
  }
  return names;
}

std::string TensorTypeName(uint32_t type_id) {
  if (type_id < kGgmlTypeNames.size()) return std::string(kGgmlTypeNames[type_id]);
  return internal::Cat("type ", type_id);
}

}  // namespace streamd::gguf
