// Calibration of an int8 KV cache (docs/BUILD.md): the range of every (layer, kv head, channel)
// of K and V over a calibration text, and the static scales an int8 cache stores them with
// (engine/cache/kv_scales.h). `streamd build` streams the text through a sink cache of f16 K/V
// and shows the tracker each chunk's cache; the eval gate then measures the scales it makes.
//
// Keys are cached rotated by their text position (RoPE), so a channel's value depends on where
// the token sat: a rotation moves a pair (2i, 2i + 1)'s mass between its two channels but keeps
// the pair's norm. A key channel's range is therefore taken as the largest norm of its pair,
// which bounds both channels at every position, not only at the positions the text had.
// Values are not rotated: their range is the largest magnitude per channel.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/cache/kv_image.h"
#include "engine/cache/kv_scales.h"
#include "engine/util/status.h"

namespace streamd {

class KvRangeTracker {
 public:
  KvRangeTracker(int32_t n_layers, int32_t n_kv_heads, int32_t head_dim);

  // Widens the ranges by every token of `image` (its shape must be the tracker's).
  Status Observe(const KvImage& image);
  // Tokens observed so far (a token seen in several images counts each time).
  int64_t tokens_observed() const { return tokens_; }

  // scale = range / 127 per channel, so the largest value seen maps to +-127 and larger ones
  // saturate. A channel that was always zero gets a tiny scale (any value there rounds to
  // 0 or saturates at +-127 * scale, next to nothing). FAILED_PRECONDITION before any token.
  StatusOr<std::shared_ptr<const KvInt8Scales>> Scales() const;

 private:
  int32_t n_layers_, n_kv_heads_, head_dim_;
  int64_t tokens_ = 0;
  std::vector<float> k_range_, v_range_;  // [n_layers][n_kv_heads][head_dim]
};

}  // namespace streamd
