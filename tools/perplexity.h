// Perplexity bookkeeping for `streamd eval`: the negative log-likelihood of one next-token
// prediction, and its running sums over a whole run and over fixed-size segments.
//
//   nll_i = -log softmax(logits_{i-1})[t_i] = logsumexp(logits_{i-1}) - logits_{i-1}[t_i]
//   ppl   = exp(mean nll) over the tokens scored
//
// Everything is summed in double: the logits are f32, but 20,000 terms of ~3 nats summed in
// float would lose the last digits that tell two cache modes apart.
#pragma once

#include <cstdint>
#include <vector>

namespace streamd::tools {

// -log softmax(logits)[target] over `vocab` f32 logits, computed in double.
double TokenNll(const float* logits, int32_t vocab, int32_t target);

// Sums of nll over the tokens scored; token i falls in segment i / segment_len.
class NllAccumulator {
 public:
  struct Segment {
    int64_t begin = 0;  // first token index of the segment
    int64_t end = 0;    // one past its last token index
    int64_t count = 0;  // tokens scored in it
    double sum = 0.0;   // their nll
    double MeanNll() const { return count > 0 ? sum / count : 0.0; }
    double Perplexity() const;
  };

  explicit NllAccumulator(int64_t segment_len);

  // Scores token `index` (indices must be added in increasing order).
  void Add(int64_t index, double nll);

  int64_t count() const { return count_; }
  double sum() const { return sum_; }
  double MeanNll() const { return count_ > 0 ? sum_ / count_ : 0.0; }
  double Perplexity() const;
  // Segments that received at least one token, in order.
  const std::vector<Segment>& segments() const { return segments_; }
  // Perplexity over the tokens with index >= `first` (0 tokens: NaN).
  double PerplexityFrom(int64_t first) const;
  int64_t CountFrom(int64_t first) const;
  // Every (index, nll) added, in order.
  const std::vector<int64_t>& indices() const { return indices_; }
  const std::vector<double>& nlls() const { return nlls_; }

 private:
  int64_t segment_len_;
  int64_t count_ = 0;
  double sum_ = 0.0;
  std::vector<Segment> segments_;
  std::vector<int64_t> indices_;
  std::vector<double> nlls_;
};

}  // namespace streamd::tools
