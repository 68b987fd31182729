// A deliberately plain forward pass of every family of model_family.h for tests, written from
// the definitions (biases, per-head q/k norms, either RoPE layout, Gemma 3's scaled embedding,
// sandwich norms, GELU and local layers): one token at a time, weights
// dequantized to float and every sum in double, no SIMD, no threads, no paging. Its attention
// rebuilds each query's cache explicitly as StreamingLLM defines it: the visible sinks, then the
// query's window, laid out at positions 0 .. len - 1, keys rotated by those positions and the
// query by len - 1; a local layer's cache is the part of it within its native window (text
// positions past p - sliding_window). Un-rotated keys and values are kept per text position
// (rounded to f16 as the real cache stores them), each computed once, when its token was processed.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/backends/cpu/llama_model.h"

namespace streamd {

class PlainReferenceLlama {
 public:
  // sinks = 0, window >= every length: dense attention.
  PlainReferenceLlama(const LlamaModel& model, int64_t sinks, int64_t window);

  // Appends `token` and returns its logits [vocab].
  std::vector<double> Step(int32_t token);

 private:
  // [rows, cols] row-major. Float holds every dequantized weight exactly, at half the memory of
  // double (a 0.5B-parameter model: 2 GB).
  using Matrix = std::vector<float>;
  Matrix Dequantize(const WeightMatrix& w) const;
  std::vector<double> MatVec(const Matrix& w, int64_t rows, const std::vector<double>& x) const;
  std::vector<double> RmsNorm(const std::vector<double>& x, const float* weight) const;
  // One head, in place, the family's layout; local: a local layer's base, unscaled.
  void Rope(double* v, int64_t position, bool local) const;
  double Activation(double gate) const;  // the FFN gate's: SiLU or GELU (tanh)
  static void AddBias(std::vector<double>& x, const float* bias);  // null: no bias
  // RMSNorm of each head_dim-wide head of x with `weight` (null: none).
  void NormHeads(std::vector<double>& x, const float* weight) const;

  const LlamaConfig& c_;
  int64_t sinks_, window_;
  struct Layer {
    Matrix wq, wk, wv, wo, gate, up, down;
    const float* attn_norm;
    const float* ffn_norm;
    const float *q_bias, *k_bias, *v_bias, *q_norm, *k_norm;  // the family's extras, or null
    const float *post_attn_norm, *post_ffn_norm;              // gemma3's, or null
    bool local;                                     // sees only its last sliding_window tokens
    std::vector<std::vector<double>> keys, values;  // per text position: [kv_dim]
  };
  std::vector<Layer> layers_;
  Matrix embedding_, output_;
  const float* output_norm_;
  int64_t position_ = 0;
};

}  // namespace streamd
