// Rotary position embedding: dimension pairs of each head, (2i, 2i+1) in the Llama ("normal")
// layout or (i, i + d/2) in the NEOX one (RopeStyle, model_family.h), are rotated by angle
// pos * theta_i, theta_i = base^(-2i/d) / freq_factor_i (Llama 3 factors
// when the model has them) and pos divided by the linear scaling factor when it asks.
//
// Angles are computed in double and reduced modulo 2*pi before the sin/cos, so a position of
// 10^9 rotates as precisely as position 10: the streaming cache may hand out large positions.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/llama_config.h"

namespace streamd {

// The rotation itself is kernels::cpu::RotatePairs or RotateHalves (vec_ops.h) on the CPU.
class RopeTable {
 public:
  // local: the table of the family's local (sliding-window) layers: local_rope_base, without
  // the global layers' scaling (Gemma 3 scales only its global layers).
  explicit RopeTable(const LlamaConfig& config, bool local = false);

  RopeStyle style() const { return style_; }
  // Rotates n_vectors consecutive heads of `dim` values in place by one position's angles
  // (cos, sin: [half_dim], from Angles), in the model's pair layout.
  void Rotate(float* x, int64_t n_vectors, int64_t dim, const float* cos, const float* sin) const;

  int32_t half_dim() const { return static_cast<int32_t>(inv_freq_.size()); }
  // theta_i with every scaling applied (the CUDA backend computes the same angles on device).
  const std::vector<double>& inv_freq() const { return inv_freq_; }
  // cos_out, sin_out: [half_dim]
  void Angles(int64_t position, float* cos_out, float* sin_out) const;

 private:
  std::vector<double> inv_freq_;  // theta_i, already divided by every scaling factor
  RopeStyle style_;
};

}  // namespace streamd
