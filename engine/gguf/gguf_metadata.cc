// GgufFile's typed metadata getters (GetU32 ... GetStringOr): each checks that a key holds a
// value of the requested kind and range, and names the key and what it holds when it does not.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_internal.h"

namespace streamd::gguf {

using internal::Cat;
using internal::Quote;

namespace {

// "u32 7", "string", "array of 3 u8": what a key holds, for type errors.
std::string Describe(const Value& v) {
  if (v.type == ValueType::kArray) {
    return Cat("array of ", ArrayCount(v), " ", ValueTypeName(v.array_type));
  }
  std::string out(ValueTypeName(v.type));
  if (const auto* u = std::get_if<uint64_t>(&v.data)) out += Cat(" ", *u);
  if (const auto* i = std::get_if<int64_t>(&v.data)) out += Cat(" ", *i);
  return out;
}

Status TypeError(std::string_view key, const Value& v, std::string_view expected) {
  return InvalidArgumentError(
      Cat("metadata key ", Quote(key), " holds ", Describe(v), ", expected ", expected));
}

// Integer value of `v` if it is stored as an integer and fits T.
template <typename T>
bool IntegerAs(const Value& v, T* out) {
  if (const auto* u = std::get_if<uint64_t>(&v.data); u && std::in_range<T>(*u)) {
    *out = static_cast<T>(*u);
    return true;
  }
  if (const auto* i = std::get_if<int64_t>(&v.data); i && std::in_range<T>(*i)) {
    *out = static_cast<T>(*i);
    return true;
  }
  return false;
}

// f32 or f64 that is representable as a float (infinities and NaN pass through).
bool FloatAs(const Value& v, float* out) {
  const auto* d = std::get_if<double>(&v.data);
  if (d == nullptr) return false;
  if (std::isfinite(*d) && std::abs(*d) > std::numeric_limits<float>::max()) return false;
  *out = static_cast<float>(*d);
  return true;
}

// Converts every element with `convert`; `expected` describes one element.
template <typename T, typename Convert>
StatusOr<std::vector<T>> ConvertArray(std::string_view key, const Value& v,
                                      std::string_view expected, Convert convert) {
  if (v.type != ValueType::kArray) return TypeError(key, v, Cat("an array of ", expected));
  std::vector<T> out(ArrayCount(v));
  Status error = OkStatus();
  ForEachElement(v, [&](uint64_t i, const Value& e) {
    if (convert(e, &out[i])) return true;
    error = InvalidArgumentError(Cat("metadata key ", Quote(key), " element ", i, " holds ",
                                     Describe(e), ", expected ", expected));
    return false;
  });
  if (!error.ok()) return error;
  return out;
}

}  // namespace

StatusOr<const Value*> GgufFile::Require(std::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return NotFoundError(Cat("metadata key ", Quote(key), " not found"));
  return v;
}

StatusOr<uint32_t> GgufFile::GetU32(std::string_view key) const {
  STREAMD_ASSIGN_OR_RETURN(const Value* v, Require(key));
  uint32_t out = 0;
  if (!IntegerAs(*v, &out)) return TypeError(key, *v, "an integer in u32 range");
  return out;
}

StatusOr<int64_t> GgufFile::GetI64(std::string_view key) const {
  STREAMD_ASSIGN_OR_RETURN(const Value* v, Require(key));
  int64_t out = 0;
  if (!IntegerAs(*v, &out)) return TypeError(key, *v, "an integer in i64 range");
  return out;
}

StatusOr<float> GgufFile::GetF32(std::string_view key) const {
  STREAMD_ASSIGN_OR_RETURN(const Value* v, Require(key));
  float out = 0;
  if (!FloatAs(*v, &out)) return TypeError(key, *v, "f32 or f64 in float range");
  return out;
}

StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  STREAMD_ASSIGN_OR_RETURN(const Value* v, Require(key));
  const auto* b = std::get_if<bool>(&v->data);
  if (b == nullptr) return TypeError(key, *v, "bool");
  return *b;
}

StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  STREAMD_ASSIGN_OR_RETURN(const Value* v, Require(key));
  const auto* s = std::get_if<std::string>(&v->data);
  if (s == nullptr) return TypeError(key, *v, "string");
  return *s;
}

StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  STREAMD_ASSIGN_OR_RETURN(const Value* v, Require(key));
  return ConvertArray<std::string>(key, *v, "string", [](const Value& e, std::string* out) {
    const auto* s = std::get_if<std::string>(&e.data);
    if (s != nullptr) *out = *s;
    return s != nullptr;
  });
}

StatusOr<std::vector<int32_t>> GgufFile::GetI32Array(std::string_view key) const {
  STREAMD_ASSIGN_OR_RETURN(const Value* v, Require(key));
  return ConvertArray<int32_t>(key, *v, "integer in i32 range",
                               [](const Value& e, int32_t* out) { return IntegerAs(e, out); });
}

StatusOr<std::vector<float>> GgufFile::GetF32Array(std::string_view key) const {
  STREAMD_ASSIGN_OR_RETURN(const Value* v, Require(key));
  return ConvertArray<float>(key, *v, "f32/f64 in float range", FloatAs);
}

StatusOr<uint32_t> GgufFile::GetU32Or(std::string_view key, uint32_t fallback) const {
  return Find(key) == nullptr ? StatusOr<uint32_t>(fallback) : GetU32(key);
}

StatusOr<float> GgufFile::GetF32Or(std::string_view key, float fallback) const {
  return Find(key) == nullptr ? StatusOr<float>(fallback) : GetF32(key);
}

StatusOr<bool> GgufFile::GetBoolOr(std::string_view key, bool fallback) const {
  return Find(key) == nullptr ? StatusOr<bool>(fallback) : GetBool(key);
}

StatusOr<std::string> GgufFile::GetStringOr(std::string_view key, std::string fallback) const {
  return Find(key) == nullptr ? StatusOr<std::string>(std::move(fallback)) : GetString(key);
}

}  // namespace streamd::gguf
