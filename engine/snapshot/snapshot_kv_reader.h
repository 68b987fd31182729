// The snapshot reader's K/V sections (snapshot_reader.cc reads the rest): the f16 values (KV16),
// or an int8 cache's scales (KVSC) and values (KVI8). Internal to engine/snapshot, shared with
// nothing else; the layout is snapshot_layout.h's.
//
// Every payload must hold exactly the bytes META's dimensions declare (bounded by the reader, so
// the sizes below do not overflow), and every scale must be a finite number >= 1e-30 (what
// KvInt8Scales takes: 1 / scale must not overflow). Errors are DATA_LOSS naming the section and
// the first bad entry by (layer, K or V, head, channel).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "engine/cache/kv_image.h"
#include "engine/cache/kv_scales.h"
#include "engine/util/status.h"

namespace streamd::snapshot_internal {

// The K/V META declares.
struct KvDeclared {
  int32_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
  int64_t n_tokens = 0;
  kernels::KvDtype dtype = kernels::KvDtype::kF16;

  uint64_t value_bytes() const {
    return static_cast<uint64_t>(n_layers) * 2 * static_cast<uint64_t>(n_kv_heads) *
           static_cast<uint64_t>(n_tokens) * static_cast<uint64_t>(head_dim) *
           static_cast<uint64_t>(kernels::KvDtypeBytes(dtype));
  }
  // KVSC: K's and V's [n_layers][n_kv_heads][head_dim] f32 scales.
  uint64_t scale_bytes() const {
    return 2 * static_cast<uint64_t>(n_layers) * static_cast<uint64_t>(n_kv_heads) *
           static_cast<uint64_t>(head_dim) * sizeof(float);
  }
};

// KVSC's payload as scales of the declared shape.
StatusOr<std::shared_ptr<const KvInt8Scales>> ReadKvScales(std::span<const uint8_t> p,
                                                           const KvDeclared& d);

// KV16's or KVI8's payload into `kv` (dimensions, dtype and `scales` set, the values copied),
// or, with `in_place`, viewed where they lie (kv's vectors left empty; f16 values need `p`
// 2-byte aligned).
Status ReadKvValues(std::span<const uint8_t> p, const KvDeclared& d,
                    std::shared_ptr<const KvInt8Scales> scales, KvImage* kv, KvView* in_place);

}  // namespace streamd::snapshot_internal
