// GGUF reader: a memory-mapped model file, validated before anything reads it.
//
// Invariants after Open()/FromBuffer() succeed: magic and version are known; every key is
// unique; every string and array lies inside the file; every tensor has a known type, a shape
// whose element count is a multiple of the type's block size, and a data range that is
// aligned to general.alignment and lies inside the file. Readers may therefore index tensor
// data without further checks. Nothing in here aborts on bad input: every failure is a Status
// whose message names the key or tensor and the offending value.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "engine/util/status.h"

namespace streamd::gguf {

enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
std::string_view ValueTypeName(ValueType type);

// ggml tensor type ids as stored in the file: the ones streamd supports. The products run F32,
// F16, BF16, Q4_0, Q4_1 and Q8_0 as stored; the others are converted at load
// (kernels/cpu/repack_quant.h).
enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kBF16 = 30,
};

struct TensorTypeTraits {
  std::string_view name;  // "Q4_1"
  int64_t block_size;     // values per block
  int64_t type_size;      // bytes per block
};
// Traits of a supported type; nullptr for an id this reader does not support.
const TensorTypeTraits* FindTensorTypeTraits(uint32_t type_id);
// Name of any ggml type id (known-but-unsupported ones too, e.g. "IQ2_XXS"), or "type N".
std::string TensorTypeName(uint32_t type_id);
// The supported types' names, comma-separated ("F32, F16, ..."): what errors list.
std::string SupportedTensorTypeNames();

// An array of scalars or strings as the file stores it, validated when the file was parsed and
// decoded element by element when read (ForEachElement): a Value per element would cost ~48 bytes
// each, 38 MiB for a 262144-token vocabulary's tokens, scores and types, held while the file is.
// It points into the file's bytes: it is valid while its GgufFile is.
struct RawArray {
  const uint8_t* begin = nullptr;
  uint64_t bytes = 0;
  uint64_t count = 0;
};

// One metadata value. Integers keep their stored width in `type`; arrays hold their elements.
// `data` holds unsigned integers as uint64_t, signed ones as int64_t, f32/f64 as double; an
// array read from a file as a RawArray (unless its elements are arrays), one built in memory
// (GgufWriter) as its elements.
struct Value {
  ValueType type = ValueType::kUint8;
  ValueType array_type = ValueType::kUint8;  // element type when type == kArray
  std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<Value>, RawArray> data;
};

// An array's length (0 for a non-array).
uint64_t ArrayCount(const Value& v);
// Calls fn(i, element) for each element of an array in order, until fn returns false; returns
// whether every call returned true. A RawArray's elements are decoded one at a time.
bool ForEachElement(const Value& v, const std::function<bool(uint64_t, const Value&)>& fn);
// An array's elements as Values (a copy; decoded for a RawArray); empty for a non-array.
std::vector<Value> ArrayElements(const Value& v);

struct TensorInfo {
  std::string name;
  TensorType type;
  std::vector<int64_t> dims;  // dims[0] is the innermost (contiguous) dimension: row length
  int64_t num_elements;
  uint64_t offset;      // from the start of the tensor data section
  uint64_t size_bytes;  // num_elements / block_size * type_size
  const uint8_t* data;  // inside the mapping

  int64_t rows() const { return num_elements / dims[0]; }
  uint64_t row_bytes() const { return size_bytes / static_cast<uint64_t>(rows()); }
};

// How much of a file Open()/FromBuffer() read and validate.
enum class GgufRead {
  kAll,
  // The header and the metadata only: tensor infos are not read, so a file whose tensors this
  // reader cannot use (an unsupported type) still opens; tensors() is empty and data_offset()
  // is 0. For tools that need only metadata, such as the vocabulary (`streamd tokenize`).
  kMetadataOnly,
};

class GgufFile {
 public:
  // Maps `path` read-only and validates it.
  static StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path,
                                                  GgufRead read = GgufRead::kAll);
  // Parses a caller-owned buffer in place (tests, fuzzing); the buffer must outlive the file.
  // Tensor data is aligned relative to `data`, so only as aligned in memory as `data` is.
  static StatusOr<std::unique_ptr<GgufFile>> FromBuffer(const uint8_t* data, size_t size,
                                                        GgufRead read = GgufRead::kAll);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // File byte where the tensor data section starts (TensorInfo::offset is relative to it);
  // with no tensors it may lie past the end of the file.
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return file_size_; }
  // Every byte of the file (the mapping, or the caller's buffer): what the model fingerprint
  // hashes (header, metadata and tensor infos before data_offset(), samples of tensor data).
  std::span<const uint8_t> bytes() const { return {bytes_, file_size_}; }
  // True when bytes() is Open()'s read-only private mapping of the file (pages of it may be
  // dropped and are read back from the file), false for FromBuffer()'s caller-owned memory.
  bool is_file_mapping() const { return mapping_ != nullptr; }
  // Copies the n bytes at `at` (inside bytes()) to dst. From a file mapping they are read with
  // pread, so the pages never enter this process's mapping: a lookup of a few rows of a large
  // table (the token embeddings) would otherwise map up to 16 pages around each touched one
  // (the kernel's fault-around) and grow the RSS by most of the table. Returns false when the
  // range is outside bytes() or the read fails (the caller may then read the mapping).
  bool CopyOut(const uint8_t* at, size_t n, void* dst) const;

  // Metadata, in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* Find(std::string_view key) const;

  // Typed getters. Integer getters accept any integer type whose value fits the result;
  // errors name the key: NOT_FOUND when absent, INVALID_ARGUMENT when of the wrong type/range.
  StatusOr<uint32_t> GetU32(std::string_view key) const;
  StatusOr<int64_t> GetI64(std::string_view key) const;
  StatusOr<float> GetF32(std::string_view key) const;  // float32 or float64
  StatusOr<bool> GetBool(std::string_view key) const;
  StatusOr<std::string> GetString(std::string_view key) const;
  StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  StatusOr<std::vector<int32_t>> GetI32Array(std::string_view key) const;  // any int elements
  StatusOr<std::vector<float>> GetF32Array(std::string_view key) const;
  // Absent key -> fallback; present but wrong type -> error.
  StatusOr<uint32_t> GetU32Or(std::string_view key, uint32_t fallback) const;
  StatusOr<float> GetF32Or(std::string_view key, float fallback) const;
  StatusOr<bool> GetBoolOr(std::string_view key, bool fallback) const;
  StatusOr<std::string> GetStringOr(std::string_view key, std::string fallback) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* FindTensor(std::string_view name) const;

 private:
  GgufFile() = default;
  Status Parse(const uint8_t* data, size_t size, GgufRead read);
  // The value of `key`, or NOT_FOUND naming it.
  StatusOr<const Value*> Require(std::string_view key) const;

  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  int fd_ = -1;  // the mapped file, kept open for CopyOut
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<TensorInfo> tensors_;
  uint64_t data_offset_ = 0;
  uint64_t file_size_ = 0;
  const uint8_t* bytes_ = nullptr;  // the parsed buffer, file_size_ bytes
  // Views into the names stored above, which never change after Parse().
  std::unordered_map<std::string_view, size_t> key_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace streamd::gguf
