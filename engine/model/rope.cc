#include "engine/model/rope.h"

#include <cmath>
#include <numbers>

namespace streamd {

RopeTable::RopeTable(const LlamaConfig& config) {
  const int32_t half = config.rope_dim / 2;
  inv_freq_.resize(half);
  const double linear =
      config.rope_scaling == RopeScaling::kLinear ? config.rope_scaling_factor : 1.0;
  for (int32_t i = 0; i < half; ++i) {
    double theta = std::pow(static_cast<double>(config.rope_base),
                            -2.0 * i / static_cast<double>(config.rope_dim));
    if (!config.rope_freq_factors.empty()) theta /= config.rope_freq_factors[i];
    inv_freq_[i] = theta / linear;
  }
}

void RopeTable::Angles(int64_t position, float* cos_out, float* sin_out) const {
  constexpr double kTwoPi = 2.0 * std::numbers::pi;
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const double angle = std::fmod(static_cast<double>(position) * inv_freq_[i], kTwoPi);
    cos_out[i] = static_cast<float>(std::cos(angle));
    sin_out[i] = static_cast<float>(std::sin(angle));
  }
}

void ApplyRope(float* x, int32_t n_heads, int32_t head_dim, const float* cos, const float* sin) {
  for (int32_t h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int32_t i = 0; i < head_dim / 2; ++i) {
      const float a = v[2 * i];
      const float b = v[2 * i + 1];
      v[2 * i] = a * cos[i] - b * sin[i];
      v[2 * i + 1] = a * sin[i] + b * cos[i];
    }
  }
}

}  // namespace streamd
