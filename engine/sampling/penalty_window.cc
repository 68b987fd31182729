#include "engine/sampling/penalty_window.h"

#include <algorithm>

#include "kernels/common/check.h"

namespace streamd {

PenaltyWindow::PenaltyWindow(int32_t last_n, int32_t vocab_size)
    : last_n_(last_n), vocab_size_(vocab_size) {
  STREAMD_CHECK_MSG(last_n >= 0 && vocab_size > 0, "bad PenaltyWindow shape");
}

void PenaltyWindow::Accept(int32_t token) {
  STREAMD_CHECK_MSG(token >= 0 && token < vocab_size_, "accepted token id out of vocab range");
  if (last_n_ == 0) return;
  if (counts_.empty()) {
    counts_.assign(static_cast<size_t>(vocab_size_), 0);
    // Typical windows are 64..1024; a huge last_n only grows the ring as tokens arrive.
    ring_.reserve(std::min<size_t>(static_cast<size_t>(last_n_), 1024));
  }
  if (ring_.size() < static_cast<size_t>(last_n_)) {
    ring_.push_back(token);
  } else {
    --counts_[static_cast<size_t>(ring_[next_])];
    ring_[next_] = token;
    next_ = (next_ + 1) % ring_.size();
  }
  ++counts_[static_cast<size_t>(token)];
  size_ = ring_.size();
}

void PenaltyWindow::Reset() {
  // Zero only the touched counts: O(window) instead of O(vocab).
  for (int32_t token : ring_) counts_[static_cast<size_t>(token)] = 0;
  ring_.clear();
  next_ = 0;
  size_ = 0;
}

void PenaltyWindow::Apply(std::span<float> logits, float repetition, float presence,
                          float frequency) {
  STREAMD_CHECK_MSG(logits.size() == static_cast<size_t>(vocab_size_), "logits size != vocab");
  // A token may occur many times in the window but must be penalized once. Negating its count
  // marks it as done without a vocab-sized "seen" array; the second loop restores the sign.
  for (int32_t token : ring_) {
    const size_t t = static_cast<size_t>(token);
    const int32_t count = counts_[t];
    if (count <= 0) continue;
    float logit = logits[t];
    logit = logit > 0.0f ? logit / repetition : logit * repetition;
    logit -= static_cast<float>(count) * frequency + presence;
    logits[t] = logit;
    counts_[t] = -count;
  }
  for (int32_t token : ring_) {
    const size_t t = static_cast<size_t>(token);
    if (counts_[t] < 0) counts_[t] = -counts_[t];
  }
}

}  // namespace streamd
