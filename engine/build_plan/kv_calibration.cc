#include "engine/build_plan/kv_calibration.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cpu/quant_blocks.h"

namespace streamd {

KvRangeTracker::KvRangeTracker(int32_t n_layers, int32_t n_kv_heads, int32_t head_dim)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      k_range_(static_cast<size_t>(n_layers) * n_kv_heads * head_dim, 0.0f),
      v_range_(k_range_.size(), 0.0f) {}

Status KvRangeTracker::Observe(const KvImage& image) {
  if (image.dtype != kernels::KvDtype::kF16) {
    // An int8 cache's image is already quantized with scales of its own: calibration reads
    // the f16 K/V of a cache without them (CalibrateInt8Kv clears the model's first).
    return InvalidArgumentError("int8 KV calibration observes f16 K/V; this image is int8");
  }
  if (image.n_layers != n_layers_ || image.n_kv_heads != n_kv_heads_ ||
      image.head_dim != head_dim_ || static_cast<int64_t>(image.data.size()) != image.elements()) {
    return InvalidArgumentError("K/V image of " + std::to_string(image.n_layers) + " x " +
                                std::to_string(image.n_kv_heads) + " x " +
                                std::to_string(image.head_dim) + " does not fit a tracker of " +
                                std::to_string(n_layers_) + " x " + std::to_string(n_kv_heads_) +
                                " x " + std::to_string(head_dim_));
  }
  const int32_t hd = head_dim_;
  std::vector<float> row(static_cast<size_t>(hd));
  for (int32_t l = 0; l < n_layers_; ++l) {
    for (int32_t kv = 0; kv < 2; ++kv) {
      for (int32_t h = 0; h < n_kv_heads_; ++h) {
        float* range = (kv == 0 ? k_range_ : v_range_).data() +
                       (static_cast<int64_t>(l) * n_kv_heads_ + h) * hd;
        const uint16_t* rows = image.data.data() + KvView::Of(image).Offset(l, kv, h, 0);
        for (int64_t t = 0; t < image.n_tokens; ++t) {
          for (int32_t c = 0; c < hd; ++c) row[c] = kernels::HalfToFloat(rows[t * hd + c]);
          for (int32_t c = 0; c < hd; ++c) {
            float r = std::fabs(row[c]);
            if (kv == 0) {
              const int32_t mate = c ^ 1;  // the other channel of c's rotary pair
              if (mate < hd) r = std::hypot(row[c], row[mate]);
            }
            // NaN (a broken model) is left out rather than poisoning the range.
            if (r > range[c]) range[c] = r;
          }
        }
      }
    }
  }
  tokens_ += image.n_tokens;
  return OkStatus();
}

StatusOr<std::shared_ptr<const KvInt8Scales>> KvRangeTracker::Scales() const {
  if (tokens_ == 0) {
    return FailedPreconditionError("int8 KV calibration observed no token");
  }
  const auto scales = [](const std::vector<float>& range) {
    std::vector<float> s(range.size());
    for (size_t i = 0; i < range.size(); ++i) {
      const float r = std::isfinite(range[i]) ? range[i] : 65504.0f;  // f16's largest
      s[i] = std::max(r / 127.0f, 1e-20f);
    }
    return s;
  };
  return KvInt8Scales::Make(n_layers_, n_kv_heads_, head_dim_, scales(k_range_), scales(v_range_));
}

}  // namespace streamd
