#include "engine/model/rope.h"

#include <cmath>
#include <numbers>

#include "kernels/cpu/vec_ops.h"

namespace streamd {

RopeTable::RopeTable(const LlamaConfig& config, bool local) : style_(config.family.rope_style) {
  const int32_t half = config.rope_dim / 2;
  inv_freq_.resize(half);
  const double linear =
      !local && config.rope_scaling == RopeScaling::kLinear ? config.rope_scaling_factor : 1.0;
  const double base = local ? config.family.local_rope_base : config.rope_base;
  for (int32_t i = 0; i < half; ++i) {
    double theta = std::pow(base, -2.0 * i / static_cast<double>(config.rope_dim));
    if (!local && !config.rope_freq_factors.empty()) theta /= config.rope_freq_factors[i];
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

void RopeTable::Rotate(float* x, int64_t n_vectors, int64_t dim, const float* cos,
                       const float* sin) const {
  if (style_ == RopeStyle::kNeox) {
    kernels::cpu::RotateHalves(x, n_vectors, dim, cos, sin);
  } else {
    kernels::cpu::RotatePairs(x, n_vectors, dim, cos, sin);
  }
}

}  // namespace streamd
