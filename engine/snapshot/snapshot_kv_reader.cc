#include "engine/snapshot/snapshot_kv_reader.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace streamd::snapshot_internal {
namespace {

std::string Name(kernels::KvDtype dtype) {
  return dtype == kernels::KvDtype::kInt8 ? "section KV_INT8" : "section KV";
}

}  // namespace

StatusOr<std::shared_ptr<const KvInt8Scales>> ReadKvScales(std::span<const uint8_t> p,
                                                           const KvDeclared& d) {
  if (p.size() != d.scale_bytes()) {
    return DataLossError("snapshot section KV_SCALES holds " + std::to_string(p.size()) +
                         " bytes; the int8 K/V of META's layout need 2 (K, V) x n_layers " +
                         std::to_string(d.n_layers) + " x n_kv_heads " +
                         std::to_string(d.n_kv_heads) + " x head_dim " +
                         std::to_string(d.head_dim) +
                         " x 4 bytes = " + std::to_string(d.scale_bytes()));
  }
  const size_t n = static_cast<size_t>(d.n_layers) * d.n_kv_heads * d.head_dim;
  std::vector<float> k(n), v(n);
  if (n > 0) {
    std::memcpy(k.data(), p.data(), n * sizeof(float));
    std::memcpy(v.data(), p.data() + n * sizeof(float), n * sizeof(float));
  }
  // Checked here, before KvInt8Scales::Make checks the same, so that the message names the
  // entry by where it is and the code says the bytes are damaged.
  for (int kv = 0; kv < 2; ++kv) {
    const std::vector<float>& s = kv == 0 ? k : v;
    for (size_t i = 0; i < n; ++i) {
      if (std::isfinite(s[i]) && s[i] >= 1e-30f) continue;
      const size_t channel = i % d.head_dim, head = i / d.head_dim % d.n_kv_heads,
                   layer = i / d.head_dim / d.n_kv_heads;
      char value[32];
      std::snprintf(value, sizeof(value), "%g", static_cast<double>(s[i]));
      return DataLossError("snapshot section KV_SCALES: the " + std::string(kv == 0 ? "K" : "V") +
                           " scale of layer " + std::to_string(layer) + ", head " +
                           std::to_string(head) + ", channel " + std::to_string(channel) + " is " +
                           value + "; scales are finite numbers >= 1e-30");
    }
  }
  auto scales =
      KvInt8Scales::Make(d.n_layers, d.n_kv_heads, d.head_dim, std::move(k), std::move(v));
  if (!scales.ok()) {
    return DataLossError("snapshot section KV_SCALES: " + scales.status().message());
  }
  return *std::move(scales);
}

Status ReadKvValues(std::span<const uint8_t> p, const KvDeclared& d,
                    std::shared_ptr<const KvInt8Scales> scales, KvImage* kv, KvView* in_place) {
  const bool int8 = d.dtype == kernels::KvDtype::kInt8;
  if (p.size() != d.value_bytes()) {
    return DataLossError("snapshot " + Name(d.dtype) + " holds " + std::to_string(p.size()) +
                         " bytes; META's layout needs n_layers " + std::to_string(d.n_layers) +
                         " x 2 x n_kv_heads " + std::to_string(d.n_kv_heads) + " x n_tokens " +
                         std::to_string(d.n_tokens) + " x head_dim " + std::to_string(d.head_dim) +
                         " x " + (int8 ? "1 byte" : "2 bytes") + " = " +
                         std::to_string(d.value_bytes()));
  }
  kv->n_layers = d.n_layers;
  kv->n_kv_heads = d.n_kv_heads;
  kv->head_dim = d.head_dim;
  kv->n_tokens = d.n_tokens;
  kv->dtype = d.dtype;
  kv->scales = std::move(scales);
  kv->data.clear();
  kv->data_i8.clear();
  const int64_t elements = kv->elements();
  if (in_place != nullptr) {
    if (!int8 && reinterpret_cast<uintptr_t>(p.data()) % alignof(uint16_t) != 0) {
      return InvalidArgumentError("snapshot: the bytes are not 2-byte aligned for an in-place K/V");
    }
    *in_place = KvView::Of(*kv);
    in_place->size = elements;
    if (int8) {
      in_place->data_i8 = reinterpret_cast<const int8_t*>(p.data());
    } else {
      in_place->data = reinterpret_cast<const uint16_t*>(p.data());
    }
    return OkStatus();
  }
  if (int8) {
    const auto* first = reinterpret_cast<const int8_t*>(p.data());
    kv->data_i8.assign(first, first + p.size());
    return OkStatus();
  }
  // One pass: the vector is made from the bytes (no zero fill first).
  const auto* first = reinterpret_cast<const uint16_t*>(p.data());
  if (reinterpret_cast<uintptr_t>(p.data()) % alignof(uint16_t) == 0) {
    kv->data.assign(first, first + p.size() / sizeof(uint16_t));
  } else {
    kv->data.resize(p.size() / sizeof(uint16_t));
    if (!p.empty()) std::memcpy(kv->data.data(), p.data(), p.size());
  }
  return OkStatus();
}

}  // namespace streamd::snapshot_internal
