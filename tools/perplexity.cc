#include "tools/perplexity.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/common/check.h"

namespace streamd::tools {

double TokenNll(const float* logits, int32_t vocab, int32_t target) {
  STREAMD_CHECK(target >= 0 && target < vocab);
  double max = -std::numeric_limits<double>::infinity();
  for (int32_t j = 0; j < vocab; ++j) max = std::max(max, static_cast<double>(logits[j]));
  double sum = 0.0;
  for (int32_t j = 0; j < vocab; ++j) sum += std::exp(static_cast<double>(logits[j]) - max);
  return max + std::log(sum) - static_cast<double>(logits[target]);
}

double NllAccumulator::Segment::Perplexity() const {
  return count > 0 ? std::exp(sum / count) : std::numeric_limits<double>::quiet_NaN();
}

NllAccumulator::NllAccumulator(int64_t segment_len)
    : segment_len_(std::max<int64_t>(1, segment_len)) {}

void NllAccumulator::Add(int64_t index, double nll) {
  STREAMD_CHECK(indices_.empty() || index > indices_.back());
  const int64_t begin = index / segment_len_ * segment_len_;
  if (segments_.empty() || segments_.back().begin != begin) {
    segments_.push_back({begin, begin + segment_len_, 0, 0.0});
  }
  segments_.back().count += 1;
  segments_.back().sum += nll;
  count_ += 1;
  sum_ += nll;
  indices_.push_back(index);
  nlls_.push_back(nll);
}

double NllAccumulator::Perplexity() const {
  return count_ > 0 ? std::exp(sum_ / count_) : std::numeric_limits<double>::quiet_NaN();
}

double NllAccumulator::PerplexityFrom(int64_t first) const {
  double sum = 0.0;
  int64_t count = 0;
  for (size_t i = 0; i < indices_.size(); ++i) {
    if (indices_[i] >= first) {
      sum += nlls_[i];
      ++count;
    }
  }
  return count > 0 ? std::exp(sum / count) : std::numeric_limits<double>::quiet_NaN();
}

int64_t NllAccumulator::CountFrom(int64_t first) const {
  return std::count_if(indices_.begin(), indices_.end(), [first](int64_t i) { return i >= first; });
}

}  // namespace streamd::tools
