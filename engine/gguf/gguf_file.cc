// GGUF parsing and validation. Layout (little-endian; spec: docs/gguf.md in the ggml repo):
//   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x (string key | u32 value_type | value)            string = u64 length + bytes
//   n_tensors x (string name | u32 n_dims | u64 dims[n_dims] | u32 ggml_type | u64 offset)
//   padding to general.alignment | tensor data (offsets are relative to this point)
// Every read goes through Cursor, which checks the remaining bytes first, so a truncated or
// corrupt file yields a Status and never reads out of bounds. Counts are checked against the
// bytes that remain before anything is reserved, so no allocation is sized by an unchecked count.
// The typed metadata getters are in gguf_metadata.cc, the type tables in gguf_types.cc.
#include "engine/gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "engine/gguf/gguf_internal.h"

namespace streamd::gguf {

using internal::Cat;
using internal::IsGgmlTypeId;
using internal::IsKnownValueType;
using internal::Quote;
using internal::ValueTypeMinBytes;

namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF is little-endian and the reader copies integers as they are stored");

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(v));
  return buf;
}

constexpr uint32_t kMagic = 0x46554747;       // "GGUF" read as a little-endian u32
constexpr uint64_t kMaxKeyBytes = 65535;      // spec: keys are at most 2^16-1 bytes
constexpr uint64_t kMaxTensorNameBytes = 64;  // spec: tensor names are at most 64 bytes
constexpr uint32_t kMaxDims = 4;              // GGML_MAX_DIMS
// Arrays of arrays are legal GGUF; the cap bounds recursion depth on hostile input.
constexpr int kMaxArrayDepth = 4;
// Each stored value costs ~48 bytes in memory however small it is in the file, so the total is
// capped; the largest known vocabularies need ~1.5M values (tokens + scores + types + merges).
constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 24;
// Smallest possible encodings, used to reject counts that cannot fit in the remaining bytes.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;                  // key len, 1-byte key, type, u8
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name, n_dims, 1 dim, type, off

// Bounds-checked little-endian reader over the whole file.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t pos() const { return pos_; }
  size_t size() const { return size_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  bool Read(T* out) {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool ReadBytes(uint64_t n, std::string_view* out) {
    if (remaining() < n) return false;
    *out = std::string_view(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return true;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

Status Truncated(const Cursor& c, uint64_t need, std::string_view what) {
  return DataLossError(Cat("truncated GGUF: ", what, " at byte ", c.pos(), " needs ", need,
                           " bytes but the file ends at byte ", c.size()));
}

// Parses into the caller's vectors; GgufFile::Parse owns the results.
class Parser {
 public:
  Parser(const uint8_t* data, size_t size) : base_(data), c_(data, size) {}

  Status Header(uint32_t* version, uint64_t* n_tensors, uint64_t* n_kv);
  // Decodes `count` elements of `type` (not kArray) from the start, for ForEachElement.
  bool Elements(ValueType type, uint64_t count,
                const std::function<bool(uint64_t, const Value&)>& fn);
  Status Metadata(uint64_t n_kv, std::vector<std::pair<std::string, Value>>* out);
  Status TensorInfos(uint64_t n_tensors, std::vector<TensorInfo>* out);
  Status PlaceTensors(uint64_t alignment, std::vector<TensorInfo>* tensors, uint64_t* data_offset);

 private:
  Status ReadString(std::string_view what, uint64_t max_len, std::string_view* out);
  Status ReadValue(uint32_t type, std::string_view key, int depth, Value* out);
  Status ReadArray(std::string_view key, int depth, Value* out);
  template <typename Stored, typename Held>
  Status ReadScalar(std::string_view key, Value* out);
  Status ReadTensorInfo(uint64_t index, TensorInfo* out);
  Status ReadDims(const std::string& name, TensorInfo* out);

  // Known ggml types streamd cannot load, in order of first appearance: gathered over every
  // tensor so that one error names them all (a user re-encoding a file learns every type to
  // avoid at once), not only the first.
  struct UnsupportedType {
    uint32_t type_id;
    uint64_t tensors;
    std::string first;  // the first tensor of this type
  };
  Status UnsupportedTypesError() const;

  const uint8_t* base_;
  Cursor c_;
  uint64_t values_left_ = kMaxMetadataValues;
  std::vector<UnsupportedType> unsupported_;
};

Status Parser::Header(uint32_t* version, uint64_t* n_tensors, uint64_t* n_kv) {
  uint32_t magic = 0;
  if (!c_.Read(&magic)) {
    return InvalidArgumentError(Cat("not a GGUF file: it is ", c_.size(),
                                    " bytes long, too short for the 4-byte magic 'GGUF'"));
  }
  if (magic != kMagic) {
    std::string_view text(reinterpret_cast<const char*>(base_), 4);
    return InvalidArgumentError(
        Cat("not a GGUF file: magic is ", Quote(text), " (0x", Hex(magic), "), expected 'GGUF'"));
  }
  if (!c_.Read(version)) return Truncated(c_, 4, "the version");
  if (*version != 2 && *version != 3) {
    // Only the top byte set means a small version stored big-endian (allowed since v3).
    const uint32_t top = *version >> 24;
    const bool big_endian = (*version & 0x00ffffff) == 0 && top >= 1 && top <= 3;
    const char* hint = big_endian      ? "; this looks like a big-endian file"
                       : *version == 1 ? "; re-convert the model with a current llama.cpp"
                                       : "";
    return UnimplementedError(
        Cat("GGUF version ", *version, " is not supported (supported: 2, 3)", hint));
  }
  if (!c_.Read(n_tensors)) return Truncated(c_, 8, "the tensor count");
  if (!c_.Read(n_kv)) return Truncated(c_, 8, "the metadata key count");
  // Reject counts that cannot fit before anything is reserved based on them.
  const uint64_t rest = c_.remaining();
  if (*n_kv > rest / kMinKvBytes) {
    return DataLossError(Cat("header claims ", *n_kv, " metadata keys, which need at least ",
                             kMinKvBytes, " bytes each, but only ", rest,
                             " bytes follow the header at byte ", c_.pos()));
  }
  if (*n_tensors > (rest - *n_kv * kMinKvBytes) / kMinTensorInfoBytes) {
    return DataLossError(Cat("header claims ", *n_tensors, " tensors and ", *n_kv,
                             " metadata keys, which cannot fit in the ", rest,
                             " bytes that follow the header at byte ", c_.pos()));
  }
  return OkStatus();
}

Status Parser::ReadString(std::string_view what, uint64_t max_len, std::string_view* out) {
  const size_t start = c_.pos();
  uint64_t len = 0;
  if (!c_.Read(&len)) return Truncated(c_, 8, Cat("length of ", what));
  if (len > max_len) {
    return InvalidArgumentError(
        Cat(what, " at byte ", start, " is ", len, " bytes long, over the limit of ", max_len));
  }
  if (!c_.ReadBytes(len, out)) return Truncated(c_, len, what);
  return OkStatus();
}

template <typename Stored, typename Held>
Status Parser::ReadScalar(std::string_view key, Value* out) {
  Stored v{};
  if (!c_.Read(&v)) return Truncated(c_, sizeof(Stored), Cat("value of key ", Quote(key)));
  out->data = static_cast<Held>(v);
  return OkStatus();
}

Status Parser::ReadValue(uint32_t raw_type, std::string_view key, int depth, Value* out) {
  if (!IsKnownValueType(raw_type)) {
    return InvalidArgumentError(Cat("metadata key ", Quote(key), " has unknown value type ",
                                    raw_type, " at byte ", c_.pos()));
  }
  const auto type = static_cast<ValueType>(raw_type);
  out->type = type;
  switch (type) {
    case ValueType::kUint8:
      return ReadScalar<uint8_t, uint64_t>(key, out);
    case ValueType::kInt8:
      return ReadScalar<int8_t, int64_t>(key, out);
    case ValueType::kUint16:
      return ReadScalar<uint16_t, uint64_t>(key, out);
    case ValueType::kInt16:
      return ReadScalar<int16_t, int64_t>(key, out);
    case ValueType::kUint32:
      return ReadScalar<uint32_t, uint64_t>(key, out);
    case ValueType::kInt32:
      return ReadScalar<int32_t, int64_t>(key, out);
    case ValueType::kUint64:
      return ReadScalar<uint64_t, uint64_t>(key, out);
    case ValueType::kInt64:
      return ReadScalar<int64_t, int64_t>(key, out);
    case ValueType::kFloat32:
      return ReadScalar<float, double>(key, out);
    case ValueType::kFloat64:
      return ReadScalar<double, double>(key, out);
    case ValueType::kBool: {
      uint8_t b = 0;
      if (!c_.Read(&b)) return Truncated(c_, 1, Cat("value of key ", Quote(key)));
      if (b > 1) {
        return InvalidArgumentError(Cat("metadata key ", Quote(key), " has bool byte ", b,
                                        " at byte ", c_.pos() - 1, " (must be 0 or 1)"));
      }
      out->data = b == 1;
      return OkStatus();
    }
    case ValueType::kString: {
      std::string_view s;
      STREAMD_RETURN_IF_ERROR(ReadString(Cat("string value of key ", Quote(key)),
                                         std::numeric_limits<uint64_t>::max(), &s));
      out->data = std::string(s);
      return OkStatus();
    }
    case ValueType::kArray:
      return ReadArray(key, depth, out);
  }
  return InternalError("unreachable value type");
}

Status Parser::ReadArray(std::string_view key, int depth, Value* out) {
  if (depth >= kMaxArrayDepth) {
    return InvalidArgumentError(Cat("metadata key ", Quote(key), " nests arrays deeper than ",
                                    kMaxArrayDepth, " levels at byte ", c_.pos()));
  }
  uint32_t elem_type = 0;
  uint64_t count = 0;
  if (!c_.Read(&elem_type)) return Truncated(c_, 4, Cat("element type of key ", Quote(key)));
  if (!IsKnownValueType(elem_type)) {
    return InvalidArgumentError(Cat("metadata key ", Quote(key),
                                    " is an array of unknown value type ", elem_type, " at byte ",
                                    c_.pos() - 4));
  }
  if (!c_.Read(&count)) return Truncated(c_, 8, Cat("array length of key ", Quote(key)));
  const auto type = static_cast<ValueType>(elem_type);
  const uint64_t min_bytes = ValueTypeMinBytes(elem_type);
  if (count > c_.remaining() / min_bytes) {
    return DataLossError(Cat("metadata key ", Quote(key), " claims ", count, " ",
                             ValueTypeName(type), " elements at byte ", c_.pos(),
                             ", more than the ", c_.remaining(), " remaining bytes can hold"));
  }
  if (count > values_left_) {
    return InvalidArgumentError(Cat("metadata key ", Quote(key), " has ", count,
                                    " elements; metadata may hold at most ", kMaxMetadataValues,
                                    " values in total"));
  }
  values_left_ -= count;
  out->array_type = type;
  if (type == ValueType::kArray) {
    std::vector<Value> elems(count);
    for (Value& e : elems) STREAMD_RETURN_IF_ERROR(ReadValue(elem_type, key, depth + 1, &e));
    out->data = std::move(elems);
    return OkStatus();
  }
  // Scalars and strings: each element is read (so checked) now and decoded again when read
  // (ForEachElement); only where they lie is kept.
  const size_t start = c_.pos();
  Value e;
  for (uint64_t i = 0; i < count; ++i) {
    STREAMD_RETURN_IF_ERROR(ReadValue(elem_type, key, depth + 1, &e));
  }
  out->data = RawArray{base_ + start, c_.pos() - start, count};
  return OkStatus();
}

bool Parser::Elements(ValueType type, uint64_t count,
                      const std::function<bool(uint64_t, const Value&)>& fn) {
  Value e;
  for (uint64_t i = 0; i < count; ++i) {
    // The array was read once already when the file was parsed: this cannot fail.
    if (!ReadValue(static_cast<uint32_t>(type), "", 1, &e).ok()) return false;
    if (!fn(i, e)) return false;
  }
  return true;
}

Status Parser::Metadata(uint64_t n_kv, std::vector<std::pair<std::string, Value>>* out) {
  out->reserve(n_kv);  // n_kv was checked against the file size in Header()
  std::unordered_set<std::string_view> seen;
  for (uint64_t i = 0; i < n_kv; ++i) {
    const size_t start = c_.pos();
    std::string_view key;
    STREAMD_RETURN_IF_ERROR(ReadString(Cat("metadata key #", i), kMaxKeyBytes, &key));
    if (key.empty())
      return InvalidArgumentError(Cat("metadata key #", i, " at byte ", start, " is empty"));
    if (!seen.insert(key).second) {
      return InvalidArgumentError(
          Cat("duplicate metadata key ", Quote(key), " (key #", i, " at byte ", start, ")"));
    }
    uint32_t type = 0;
    if (!c_.Read(&type)) return Truncated(c_, 4, Cat("value type of key ", Quote(key)));
    Value value;
    STREAMD_RETURN_IF_ERROR(ReadValue(type, key, 0, &value));
    out->emplace_back(std::string(key), std::move(value));
  }
  return OkStatus();
}

Status Parser::ReadDims(const std::string& name, TensorInfo* out) {
  uint32_t n_dims = 0;
  if (!c_.Read(&n_dims)) return Truncated(c_, 4, Cat("dimension count of tensor ", Quote(name)));
  if (n_dims < 1 || n_dims > kMaxDims) {
    return InvalidArgumentError(Cat("tensor ", Quote(name), " has ", n_dims, " dimensions at byte ",
                                    c_.pos() - 4, " (must be 1..4)"));
  }
  out->dims.resize(n_dims);
  int64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t dim = 0;
    if (!c_.Read(&dim)) return Truncated(c_, 8, Cat("dims of tensor ", Quote(name)));
    if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidArgumentError(Cat("tensor ", Quote(name), " dim ", d, " is ", dim, " at byte ",
                                      c_.pos() - 8, " (must be 1..2^63-1)"));
    }
    out->dims[d] = static_cast<int64_t>(dim);
    if (out->dims[d] > std::numeric_limits<int64_t>::max() / elements) {
      return InvalidArgumentError(Cat("tensor ", Quote(name), " element count overflows int64 at",
                                      " dim ", d, " (", dim, ")"));
    }
    elements *= out->dims[d];
  }
  out->num_elements = elements;
  return OkStatus();
}

Status Parser::ReadTensorInfo(uint64_t index, TensorInfo* out) {
  std::string_view name;
  const size_t start = c_.pos();
  STREAMD_RETURN_IF_ERROR(ReadString(Cat("name of tensor #", index), kMaxTensorNameBytes, &name));
  if (name.empty())
    return InvalidArgumentError(Cat("tensor #", index, " at byte ", start, " has an empty name"));
  out->name = std::string(name);
  STREAMD_RETURN_IF_ERROR(ReadDims(out->name, out));
  uint32_t type_id = 0;
  if (!c_.Read(&type_id)) return Truncated(c_, 4, Cat("type of tensor ", Quote(name)));
  const TensorTypeTraits* traits = FindTensorTypeTraits(type_id);
  if (traits == nullptr) {
    if (!IsGgmlTypeId(type_id)) {
      return InvalidArgumentError(Cat("tensor ", Quote(name), " has unknown ggml type id ", type_id,
                                      " at byte ", c_.pos() - 4));
    }
    auto it = std::find_if(unsupported_.begin(), unsupported_.end(),
                           [&](const UnsupportedType& u) { return u.type_id == type_id; });
    if (it == unsupported_.end()) {
      unsupported_.push_back({type_id, 1, out->name});
    } else {
      ++it->tensors;
    }
    // Not placed: the file is refused after the last tensor info (UnsupportedTypesError).
    if (!c_.Read(&out->offset)) return Truncated(c_, 8, Cat("offset of tensor ", Quote(name)));
    out->data = nullptr;
    return OkStatus();
  }
  out->type = static_cast<TensorType>(type_id);
  if (out->dims[0] % traits->block_size != 0) {
    return InvalidArgumentError(Cat("tensor ", Quote(name), " of type ", traits->name,
                                    " has row length ", out->dims[0],
                                    ", not a multiple of the block size ", traits->block_size));
  }
  const uint64_t blocks = static_cast<uint64_t>(out->num_elements / traits->block_size);
  const uint64_t type_size = static_cast<uint64_t>(traits->type_size);
  if (blocks > std::numeric_limits<uint64_t>::max() / type_size) {
    return InvalidArgumentError(Cat("tensor ", Quote(name), " byte size overflows 64 bits (",
                                    out->num_elements, " elements of ", traits->name, ")"));
  }
  out->size_bytes = blocks * type_size;
  if (!c_.Read(&out->offset)) return Truncated(c_, 8, Cat("offset of tensor ", Quote(name)));
  out->data = nullptr;
  return OkStatus();
}

Status Parser::TensorInfos(uint64_t n_tensors, std::vector<TensorInfo>* out) {
  out->resize(n_tensors);  // n_tensors was checked against the file size in Header()
  std::unordered_set<std::string_view> seen;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    STREAMD_RETURN_IF_ERROR(ReadTensorInfo(i, &(*out)[i]));
    if (!seen.insert((*out)[i].name).second) {
      return InvalidArgumentError(
          Cat("duplicate tensor name ", Quote((*out)[i].name), " (tensor #", i, ")"));
    }
  }
  return unsupported_.empty() ? OkStatus() : UnsupportedTypesError();
}

// "tensor types streamd does not support: Q5_0 (1 tensor: 'token_embd.weight'), IQ2_XXS
// (24 tensors, first 'blk.0.attn_q.weight') (supported: F32, ...)".
Status Parser::UnsupportedTypesError() const {
  std::string list;
  for (const UnsupportedType& u : unsupported_) {
    if (!list.empty()) list += ", ";
    list += u.tensors == 1 ? Cat(TensorTypeName(u.type_id), " (1 tensor: ", Quote(u.first), ")")
                           : Cat(TensorTypeName(u.type_id), " (", u.tensors, " tensors, first ",
                                 Quote(u.first), ")");
  }
  return UnimplementedError(Cat("tensor types streamd does not support: ", list,
                                " (supported: ", SupportedTensorTypeNames(), ")"));
}

Status Parser::PlaceTensors(uint64_t alignment, std::vector<TensorInfo>* tensors,
                            uint64_t* data_offset) {
  // pos <= size, so adding alignment - 1 (< 2^32) cannot overflow 64 bits.
  const uint64_t infos_end = c_.pos();
  *data_offset = (infos_end + alignment - 1) / alignment * alignment;
  if (tensors->empty()) return OkStatus();
  if (*data_offset > c_.size()) {
    return DataLossError(Cat("truncated GGUF: tensor data would start at byte ", *data_offset,
                             " (tensor infos end at byte ", infos_end, ", alignment ", alignment,
                             ") but the file is ", c_.size(), " bytes"));
  }
  const uint64_t data_size = c_.size() - *data_offset;
  for (TensorInfo& t : *tensors) {
    if (t.offset % alignment != 0) {
      return InvalidArgumentError(Cat("tensor ", Quote(t.name), " offset ", t.offset,
                                      " is not a multiple of general.alignment ", alignment));
    }
    if (t.offset > data_size || t.size_bytes > data_size - t.offset) {
      return DataLossError(Cat("tensor ", Quote(t.name), " data (offset ", t.offset, ", ",
                               t.size_bytes, " bytes) runs past the end of the ", data_size,
                               "-byte data section at file byte ", *data_offset, " (file is ",
                               c_.size(), " bytes; truncated?)"));
    }
    t.data = base_ + *data_offset + t.offset;
  }
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors->size());
  for (const TensorInfo& t : *tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& a = *by_offset[i - 1];
    const TensorInfo& b = *by_offset[i];
    if (a.offset + a.size_bytes > b.offset) {  // both ranges are inside the file: no overflow
      return InvalidArgumentError(Cat("tensors ", Quote(a.name), " [", a.offset, ", ",
                                      a.offset + a.size_bytes, ") and ", Quote(b.name), " [",
                                      b.offset, ", ", b.offset + b.size_bytes, ") overlap"));
    }
  }
  return OkStatus();
}

// general.alignment must be a u32 power of two; absent means the spec's default of 32.
Status ReadAlignment(const std::vector<std::pair<std::string, Value>>& kvs, uint64_t* out) {
  *out = 32;
  for (const auto& [key, value] : kvs) {
    if (key != "general.alignment") continue;
    if (value.type != ValueType::kUint32) {
      return InvalidArgumentError(
          Cat("general.alignment has type ", ValueTypeName(value.type), ", expected u32"));
    }
    const uint64_t a = std::get<uint64_t>(value.data);
    if (a == 0 || !std::has_single_bit(a)) {
      return InvalidArgumentError(
          Cat("general.alignment is ", a, ", must be a nonzero power of two"));
    }
    *out = a;
  }
  return OkStatus();
}

Status OpenError(const std::string& path, std::string_view what, int err) {
  std::string msg = Cat("cannot ", what, " GGUF file ", Quote(path), ": ",
                        std::error_code(err, std::generic_category()).message());
  if (err == ENOENT || err == ENOTDIR) return NotFoundError(std::move(msg));
  return InvalidArgumentError(std::move(msg));
}

}  // namespace

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path, GgufRead read) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OpenError(path, "open", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return OpenError(path, "stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError(
        Cat("cannot open GGUF file ", Quote(path), ": ",
            S_ISDIR(st.st_mode) ? "it is a directory" : "it is not a regular file"));
  }
  if (st.st_size == 0) {  // mmap rejects length 0
    ::close(fd);
    return InvalidArgumentError(Cat("not a GGUF file: ", Quote(path), " is empty (0 bytes)"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  if (map == MAP_FAILED) {
    ::close(fd);
    return OpenError(path, "mmap", map_err);
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->mapping_ = map;
  file->mapping_size_ = size;
  file->fd_ = fd;
  Status s = file->Parse(static_cast<const uint8_t*>(map), size, read);
  if (!s.ok()) return Status(s.code(), Cat(path, ": ", s.message()));
  return file;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBuffer(const uint8_t* data, size_t size,
                                                         GgufRead read) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  STREAMD_RETURN_IF_ERROR(file->Parse(data, size, read));
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
  if (fd_ >= 0) ::close(fd_);
}

bool GgufFile::CopyOut(const uint8_t* at, size_t n, void* dst) const {
  if (at < bytes_ || at > bytes_ + file_size_ ||
      n > static_cast<size_t>(bytes_ + file_size_ - at)) {
    return false;
  }
  if (fd_ < 0) {
    std::memcpy(dst, at, n);
    return true;
  }
  auto* out = static_cast<uint8_t*>(dst);
  auto offset = static_cast<off_t>(at - bytes_);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, out, n, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    offset += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

Status GgufFile::Parse(const uint8_t* data, size_t size, GgufRead read) {
  static constexpr uint8_t kEmpty[1] = {0};
  if (data == nullptr) data = kEmpty;  // lets size == 0 take the ordinary "too short" path
  Parser parser(data, size);
  uint64_t n_tensors = 0, n_kv = 0;
  STREAMD_RETURN_IF_ERROR(parser.Header(&version_, &n_tensors, &n_kv));
  STREAMD_RETURN_IF_ERROR(parser.Metadata(n_kv, &metadata_));
  STREAMD_RETURN_IF_ERROR(ReadAlignment(metadata_, &alignment_));
  if (read == GgufRead::kAll) {
    STREAMD_RETURN_IF_ERROR(parser.TensorInfos(n_tensors, &tensors_));
    STREAMD_RETURN_IF_ERROR(parser.PlaceTensors(alignment_, &tensors_, &data_offset_));
  }
  file_size_ = size;
  bytes_ = data;
  // Views into the stored strings: neither vector changes after this point.
  key_index_.reserve(metadata_.size());
  for (size_t i = 0; i < metadata_.size(); ++i) key_index_.emplace(metadata_[i].first, i);
  tensor_index_.reserve(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) tensor_index_.emplace(tensors_[i].name, i);
  return OkStatus();
}

const Value* GgufFile::Find(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
}

const TensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

uint64_t ArrayCount(const Value& v) {
  if (v.type != ValueType::kArray) return 0;
  if (const auto* raw = std::get_if<RawArray>(&v.data)) return raw->count;
  const auto* elems = std::get_if<std::vector<Value>>(&v.data);
  return elems == nullptr ? 0 : elems->size();
}

bool ForEachElement(const Value& v, const std::function<bool(uint64_t, const Value&)>& fn) {
  if (v.type != ValueType::kArray) return true;
  if (const auto* raw = std::get_if<RawArray>(&v.data)) {
    Parser parser(raw->begin, raw->bytes);
    return parser.Elements(v.array_type, raw->count, fn);
  }
  if (const auto* elems = std::get_if<std::vector<Value>>(&v.data)) {
    for (size_t i = 0; i < elems->size(); ++i) {
      if (!fn(i, (*elems)[i])) return false;
    }
  }
  return true;
}

std::vector<Value> ArrayElements(const Value& v) {
  std::vector<Value> out;
  out.reserve(ArrayCount(v));
  ForEachElement(v, [&out](uint64_t, const Value& e) {
    out.push_back(e);
    return true;
  });
  return out;
}

}  // namespace streamd::gguf
