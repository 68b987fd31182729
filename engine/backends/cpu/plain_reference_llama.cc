#include "engine/backends/cpu/plain_reference_llama.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numbers>

#include "kernels/cpu/quant_blocks.h"

namespace streamd {
namespace {

double RoundToHalf(double x) {
  return kernels::HalfToFloat(kernels::FloatToHalf(static_cast<float>(x)));
}

}  // namespace

PlainReferenceLlama::PlainReferenceLlama(const LlamaModel& model, int64_t sinks, int64_t window)
    : c_(model.config()), sinks_(sinks), window_(window) {
  const LlamaWeights& w = model.weights();
  const EmbeddingTable& e = w.token_embedding;
  embedding_.resize(e.rows * e.cols);
  for (int64_t r = 0; r < e.rows; ++r) e.DequantizeRow(r, &embedding_[r * e.cols]);
  output_ = Dequantize(w.output);
  output_norm_ = w.output_norm;
  for (const LlamaLayerWeights& lw : w.layers) {
    Layer l;
    l.wq = Dequantize(lw.wq);
    l.wk = Dequantize(lw.wk);
    l.wv = Dequantize(lw.wv);
    l.wo = Dequantize(lw.wo);
    l.gate = Dequantize(lw.w_gate);
    l.up = Dequantize(lw.w_up);
    l.down = Dequantize(lw.w_down);
    l.attn_norm = lw.attn_norm;
    l.ffn_norm = lw.ffn_norm;
    l.q_bias = lw.q_bias;
    l.k_bias = lw.k_bias;
    l.v_bias = lw.v_bias;
    l.q_norm = lw.q_norm;
    l.k_norm = lw.k_norm;
    l.post_attn_norm = lw.post_attn_norm;
    l.post_ffn_norm = lw.post_ffn_norm;
    l.local = c_.IsLocalLayer(static_cast<int32_t>(layers_.size()));
    layers_.push_back(std::move(l));
  }
}

PlainReferenceLlama::Matrix PlainReferenceLlama::Dequantize(const WeightMatrix& w) const {
  Matrix out(w.rows * w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    kernels::cpu::DequantizeRow(w.type, w.data + r * w.row_bytes, w.cols, &out[r * w.cols]);
  }
  return out;
}

std::vector<double> PlainReferenceLlama::MatVec(const Matrix& w, int64_t rows,
                                                const std::vector<double>& x) const {
  // Each row's sum in double, in kLanes partial sums combined at the end: as exact as one
  // running sum for a reference, and the lanes are independent, so the loop does not wait on
  // one add's latency per weight (one running sum took 2 s per token on a 1.5B model).
  constexpr int64_t kLanes = 8;
  const int64_t cols = static_cast<int64_t>(x.size());
  std::vector<double> y(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = &w[r * cols];
    double lanes[kLanes] = {};
    int64_t k = 0;
    for (; k + kLanes <= cols; k += kLanes) {
      for (int64_t j = 0; j < kLanes; ++j) lanes[j] += static_cast<double>(row[k + j]) * x[k + j];
    }
    double sum = 0.0;
    for (; k < cols; ++k) sum += static_cast<double>(row[k]) * x[k];
    for (double lane : lanes) sum += lane;
    y[r] = sum;
  }
  return y;
}

std::vector<double> PlainReferenceLlama::RmsNorm(const std::vector<double>& x,
                                                 const float* weight) const {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double scale = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + c_.rms_eps);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * scale * weight[i];
  return out;
}

void PlainReferenceLlama::Rope(double* v, int64_t position, bool local) const {
  const int32_t half = c_.head_dim / 2;
  const double linear =
      !local && c_.rope_scaling == RopeScaling::kLinear ? c_.rope_scaling_factor : 1.0;
  const double base = local ? c_.family.local_rope_base : c_.rope_base;
  for (int32_t i = 0; i < half; ++i) {
    double freq = std::pow(base, -2.0 * i / static_cast<double>(c_.head_dim)) / linear;
    if (!local && !c_.rope_freq_factors.empty()) freq /= c_.rope_freq_factors[i];
    const double theta = static_cast<double>(position) * freq;
    // Which two dimensions form pair i: adjacent (Llama) or half a head apart (NEOX).
    const int32_t ia = c_.family.rope_style == RopeStyle::kNeox ? i : 2 * i;
    const int32_t ib = c_.family.rope_style == RopeStyle::kNeox ? i + half : 2 * i + 1;
    const double a = v[ia], b = v[ib];
    v[ia] = a * std::cos(theta) - b * std::sin(theta);
    v[ib] = a * std::sin(theta) + b * std::cos(theta);
  }
}

double PlainReferenceLlama::Activation(double g) const {
  if (c_.family.ffn_activation == FfnActivation::kGeluTanh) {
    // GELU's tanh approximation, as defined (the kernels use an equal exp form).
    const double u = std::sqrt(2.0 / std::numbers::pi) * (g + 0.044715 * g * g * g);
    return 0.5 * g * (1.0 + std::tanh(u));
  }
  return g / (1.0 + std::exp(-g));  // SiLU
}

void PlainReferenceLlama::AddBias(std::vector<double>& x, const float* bias) {
  if (bias == nullptr) return;
  for (size_t i = 0; i < x.size(); ++i) x[i] += bias[i];
}

void PlainReferenceLlama::NormHeads(std::vector<double>& x, const float* weight) const {
  if (weight == nullptr) return;
  const int64_t hd = c_.head_dim;
  for (size_t h = 0; h * hd < x.size(); ++h) {
    const std::vector<double> head(x.begin() + h * hd, x.begin() + (h + 1) * hd);
    const std::vector<double> normed = RmsNorm(head, weight);
    std::copy(normed.begin(), normed.end(), x.begin() + h * hd);
  }
}

std::vector<double> PlainReferenceLlama::Step(int32_t token) {
  const int64_t p = position_++;
  const int64_t hd = c_.head_dim, group = c_.n_heads / c_.n_kv_heads;
  std::vector<double> x(embedding_.begin() + token * c_.dim,
                        embedding_.begin() + (token + 1) * c_.dim);
  if (c_.family.embedding_scaled) {
    for (double& e : x) e *= std::sqrt(static_cast<double>(c_.dim));
  }
  // The explicit cache of this query: visible sinks, then its window; a local layer's, the part
  // of that within its native window.
  std::vector<int64_t> global;
  for (int64_t j = 0; j < std::min(sinks_, p + 1); ++j) global.push_back(j);
  for (int64_t j = std::max(sinks_, p - window_ + 1); j <= p; ++j) global.push_back(j);
  std::vector<int64_t> local;
  std::copy_if(global.begin(), global.end(), std::back_inserter(local),
               [&](int64_t j) { return j > p - c_.sliding_window; });
  // Adds a block's output to the residual stream, after the family's sandwich norm if it has one.
  const auto add_to_stream = [&](const std::vector<double>& out, const float* post_norm) {
    const std::vector<double> o = post_norm != nullptr ? RmsNorm(out, post_norm) : out;
    for (int32_t i = 0; i < c_.dim; ++i) x[i] += o[i];
  };

  for (Layer& l : layers_) {
    const std::vector<int64_t>& visible = l.local ? local : global;
    const int64_t len = static_cast<int64_t>(visible.size());
    const std::vector<double> h = RmsNorm(x, l.attn_norm);
    std::vector<double> q = MatVec(l.wq, c_.q_dim(), h);
    std::vector<double> k = MatVec(l.wk, c_.kv_dim(), h);
    std::vector<double> v = MatVec(l.wv, c_.kv_dim(), h);
    AddBias(q, l.q_bias);
    AddBias(k, l.k_bias);
    AddBias(v, l.v_bias);
    NormHeads(q, l.q_norm);
    NormHeads(k, l.k_norm);
    for (double& e : k) e = RoundToHalf(e);
    for (double& e : v) e = RoundToHalf(e);
    l.keys.push_back(k);
    l.values.push_back(v);

    std::vector<double> attn(c_.q_dim(), 0.0);
    for (int32_t head = 0; head < c_.n_heads; ++head) {
      const int64_t kvh = head / group;
      std::vector<double> qh(q.begin() + head * hd, q.begin() + (head + 1) * hd);
      Rope(qh.data(), len - 1, l.local);
      std::vector<double> scores(len);
      for (int64_t c = 0; c < len; ++c) {
        std::vector<double> kc(l.keys[visible[c]].begin() + kvh * hd,
                               l.keys[visible[c]].begin() + (kvh + 1) * hd);
        Rope(kc.data(), c, l.local);
        double dot = 0.0;
        for (int64_t i = 0; i < hd; ++i) dot += qh[i] * kc[i];
        scores[c] = dot * c_.attention_scale;
      }
      const double max = *std::max_element(scores.begin(), scores.end());
      double sum = 0.0;
      for (double& s : scores) sum += (s = std::exp(s - max));
      for (int64_t c = 0; c < len; ++c) {
        for (int64_t i = 0; i < hd; ++i) {
          attn[head * hd + i] += scores[c] / sum * l.values[visible[c]][kvh * hd + i];
        }
      }
    }
    add_to_stream(MatVec(l.wo, c_.dim, attn), l.post_attn_norm);
    const std::vector<double> h2 = RmsNorm(x, l.ffn_norm);
    std::vector<double> g = MatVec(l.gate, c_.ffn_dim, h2);
    const std::vector<double> u = MatVec(l.up, c_.ffn_dim, h2);
    for (int32_t i = 0; i < c_.ffn_dim; ++i) g[i] = Activation(g[i]) * u[i];
    add_to_stream(MatVec(l.down, c_.dim, g), l.post_ffn_norm);
  }
  return MatVec(output_, c_.vocab_size, RmsNorm(x, output_norm_));
}

}  // namespace streamd
