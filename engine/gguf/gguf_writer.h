// GGUF writer: builds GGUF files in memory or on disk, for tests and synthetic models.
//
// It writes what it is told, in order, without validating keys or tensors (beyond AddTensor's
// size check), because tests use it to build corrupt files on purpose: duplicate keys, a bad
// general.alignment, unsupported tensor types, overlapping or misaligned offsets. Files it
// builds from valid input are read back by GgufFile unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/util/status.h"

namespace streamd::gguf {

// GGUF value type of a C++ scalar type; only the exact types below are accepted.
template <typename T>
constexpr ValueType ValueTypeOf() {
  if constexpr (std::is_same_v<T, uint8_t>)
    return ValueType::kUint8;
  else if constexpr (std::is_same_v<T, int8_t>)
    return ValueType::kInt8;
  else if constexpr (std::is_same_v<T, uint16_t>)
    return ValueType::kUint16;
  else if constexpr (std::is_same_v<T, int16_t>)
    return ValueType::kInt16;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return ValueType::kUint32;
  else if constexpr (std::is_same_v<T, int32_t>)
    return ValueType::kInt32;
  else if constexpr (std::is_same_v<T, float>)
    return ValueType::kFloat32;
  else if constexpr (std::is_same_v<T, bool>)
    return ValueType::kBool;
  else if constexpr (std::is_same_v<T, std::string>)
    return ValueType::kString;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return ValueType::kUint64;
  else if constexpr (std::is_same_v<T, int64_t>)
    return ValueType::kInt64;
  else if constexpr (std::is_same_v<T, double>)
    return ValueType::kFloat64;
  else
    static_assert(!sizeof(T), "not a GGUF scalar type");
}

// MakeValue<uint32_t>(30): the explicit type picks the stored width.
template <typename T>
Value MakeValue(T v) {
  Value out;
  out.type = ValueTypeOf<T>();
  if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string>) {
    out.data = std::move(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    out.data = static_cast<double>(v);
  } else if constexpr (std::is_unsigned_v<T>) {
    out.data = static_cast<uint64_t>(v);
  } else {
    out.data = static_cast<int64_t>(v);
  }
  return out;
}
inline Value MakeString(std::string s) { return MakeValue<std::string>(std::move(s)); }

// An array whose elements all have `element_type` (element_type kArray nests arrays).
Value MakeArray(ValueType element_type, std::vector<Value> elements);

template <typename T>
Value MakeArrayOf(const std::vector<T>& elements) {
  std::vector<Value> values;
  values.reserve(elements.size());
  for (const T& e : elements) values.push_back(MakeValue<T>(e));
  return MakeArray(ValueTypeOf<T>(), std::move(values));
}

class GgufWriter {
 public:
  // Tests write versions the reader rejects.
  void set_version(uint32_t version) { version_ = version; }
  // Lays tensors out at multiples of `alignment` and records general.alignment as u32.
  void SetAlignment(uint32_t alignment);

  // Appends one metadata pair; duplicate keys are written as given.
  void Add(std::string key, Value value);

  // Appends a tensor of a supported type, placed after the previous one at the next aligned
  // offset. INVALID_ARGUMENT unless `data` holds exactly the bytes the type and dims need.
  Status AddTensor(std::string name, TensorType type, std::vector<int64_t> dims,
                   std::vector<uint8_t> data);
  // Appends a tensor info with no checks: any type id, any dims, and optionally an explicit
  // offset (otherwise the next aligned one). `data` (possibly empty) is written at the offset.
  void AddRawTensor(std::string name, uint32_t type_id, std::vector<int64_t> dims,
                    std::vector<uint8_t> data, std::optional<uint64_t> offset = std::nullopt);

  std::vector<uint8_t> Serialize() const;
  Status WriteFile(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    uint32_t type_id;
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
    uint64_t offset;  // relative to the data section
  };

  uint32_t version_ = 3;
  uint64_t alignment_ = 32;
  uint64_t next_offset_ = 0;  // where the next tensor without an explicit offset goes
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace streamd::gguf
