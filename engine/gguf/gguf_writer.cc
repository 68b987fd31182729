#include "engine/gguf/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <utility>

namespace streamd::gguf {
namespace {

uint64_t AlignUp(uint64_t v, uint64_t alignment) {
  return (v + alignment - 1) / alignment * alignment;
}

// Little-endian append; every host we build for is little-endian (checked in gguf_file.cc).
template <typename T>
void Put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void PutString(std::vector<uint8_t>& out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

// Numeric content of a value whatever alternative holds it (the writer trusts its caller).
template <typename T>
T NumberOf(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.data)) return static_cast<T>(*u);
  if (const auto* i = std::get_if<int64_t>(&v.data)) return static_cast<T>(*i);
  if (const auto* d = std::get_if<double>(&v.data)) return static_cast<T>(*d);
  if (const auto* b = std::get_if<bool>(&v.data)) return static_cast<T>(*b);
  return T{};
}

// Writes the payload of `v` encoded as `type` (array elements are encoded as the array's
// element type, which the file states once).
void PutPayload(std::vector<uint8_t>& out, ValueType type, const Value& v) {
  switch (type) {
    case ValueType::kUint8:
      return Put(out, NumberOf<uint8_t>(v));
    case ValueType::kInt8:
      return Put(out, NumberOf<int8_t>(v));
    case ValueType::kUint16:
      return Put(out, NumberOf<uint16_t>(v));
    case ValueType::kInt16:
      return Put(out, NumberOf<int16_t>(v));
    case ValueType::kUint32:
      return Put(out, NumberOf<uint32_t>(v));
    case ValueType::kInt32:
      return Put(out, NumberOf<int32_t>(v));
    case ValueType::kFloat32:
      return Put(out, NumberOf<float>(v));
    case ValueType::kBool:
      return Put(out, static_cast<uint8_t>(NumberOf<bool>(v)));
    case ValueType::kUint64:
      return Put(out, NumberOf<uint64_t>(v));
    case ValueType::kInt64:
      return Put(out, NumberOf<int64_t>(v));
    case ValueType::kFloat64:
      return Put(out, NumberOf<double>(v));
    case ValueType::kString: {
      const auto* s = std::get_if<std::string>(&v.data);
      return PutString(out, s ? *s : std::string());
    }
    case ValueType::kArray: {
      Put<uint32_t>(out, static_cast<uint32_t>(v.array_type));
      Put<uint64_t>(out, ArrayCount(v));
      ForEachElement(v, [&](uint64_t, const Value& e) {
        PutPayload(out, v.array_type, e);
        return true;
      });
      return;
    }
  }
  // An id outside the enum (tests of unknown types): Serialize wrote the raw id, no payload.
}

}  // namespace

Value MakeArray(ValueType element_type, std::vector<Value> elements) {
  Value out;
  out.type = ValueType::kArray;
  out.array_type = element_type;
  out.data = std::move(elements);
  return out;
}

void GgufWriter::SetAlignment(uint32_t alignment) {
  alignment_ = alignment;
  Add("general.alignment", MakeValue<uint32_t>(alignment));
}

void GgufWriter::Add(std::string key, Value value) {
  // An array copied from a file's metadata points into that file: own its elements, so the
  // writer does not depend on the file outliving it.
  if (std::holds_alternative<RawArray>(value.data)) value.data = ArrayElements(value);
  metadata_.emplace_back(std::move(key), std::move(value));
}

Status GgufWriter::AddTensor(std::string name, TensorType type, std::vector<int64_t> dims,
                             std::vector<uint8_t> data) {
  const TensorTypeTraits* traits = FindTensorTypeTraits(static_cast<uint32_t>(type));
  if (traits == nullptr || dims.empty()) {
    return InvalidArgumentError("AddTensor: unsupported type or no dims for '" + name + "'");
  }
  int64_t elements = 1;
  for (int64_t d : dims) elements *= d;
  const int64_t want = elements / traits->block_size * traits->type_size;
  if (dims[0] % traits->block_size != 0 || static_cast<int64_t>(data.size()) != want) {
    return InvalidArgumentError("AddTensor: '" + name + "' needs " + std::to_string(want) +
                                " bytes of " + std::string(traits->name) + ", got " +
                                std::to_string(data.size()));
  }
  AddRawTensor(std::move(name), static_cast<uint32_t>(type), std::move(dims), std::move(data));
  return OkStatus();
}

void GgufWriter::AddRawTensor(std::string name, uint32_t type_id, std::vector<int64_t> dims,
                              std::vector<uint8_t> data, std::optional<uint64_t> offset) {
  const uint64_t at = offset.value_or(AlignUp(next_offset_, alignment_));
  if (!offset.has_value()) next_offset_ = at + data.size();
  tensors_.push_back({std::move(name), type_id, std::move(dims), std::move(data), at});
}

std::vector<uint8_t> GgufWriter::Serialize() const {
  std::vector<uint8_t> out;
  Put<uint32_t>(out, 0x46554747);  // "GGUF"
  Put<uint32_t>(out, version_);
  Put<uint64_t>(out, tensors_.size());
  Put<uint64_t>(out, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    PutString(out, key);
    Put<uint32_t>(out, static_cast<uint32_t>(value.type));
    PutPayload(out, value.type, value);
  }
  for (const Tensor& t : tensors_) {
    PutString(out, t.name);
    Put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) Put<int64_t>(out, d);
    Put<uint32_t>(out, t.type_id);
    Put<uint64_t>(out, t.offset);
  }
  if (tensors_.empty()) return out;
  const uint64_t data_start = AlignUp(out.size(), alignment_);
  out.resize(data_start, 0);
  for (const Tensor& t : tensors_) {
    if (t.data.empty()) continue;  // offsets of data-less tensors may point anywhere
    if (out.size() < data_start + t.offset + t.data.size()) {
      out.resize(data_start + t.offset + t.data.size(), 0);
    }
    std::memcpy(out.data() + data_start + t.offset, t.data.data(), t.data.size());
  }
  return out;
}

Status GgufWriter::WriteFile(const std::string& path) const {
  const std::vector<uint8_t> bytes = Serialize();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return InvalidArgumentError("cannot create '" + path +
                                "': " + std::error_code(errno, std::generic_category()).message());
  }
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool closed = std::fclose(f) == 0;
  if (written != bytes.size() || !closed) {
    return InternalError("short write to '" + path + "'");
  }
  return OkStatus();
}

}  // namespace streamd::gguf
