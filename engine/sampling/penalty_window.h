// PenaltyWindow: the last N accepted tokens and their counts, and the penalties they imply.
//
// Invariant: counts_[t] == number of occurrences of t in ring_ (the window), for every t.
// Counts are kept incrementally in Accept() so that Apply() costs O(window), not O(vocab).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace streamd {

class PenaltyWindow {
 public:
  // last_n == 0 makes an empty window that allocates nothing and whose Apply() is a no-op.
  PenaltyWindow(int32_t last_n, int32_t vocab_size);

  // Records a token (0 <= token < vocab_size, else abort); evicts the oldest beyond last_n.
  void Accept(int32_t token);
  void Reset();

  // For each distinct token t in the window with count c, in place (llama.cpp's order):
  //   logit = logit > 0 ? logit / repetition : logit * repetition   (CTRL-style)
  //   logit -= c * frequency + presence
  // logits: [vocab_size].
  void Apply(std::span<float> logits, float repetition, float presence, float frequency);

  size_t size() const { return size_; }

 private:
  int32_t last_n_;
  int32_t vocab_size_;
  std::vector<int32_t> ring_;    // [min(accepted, last_n)]; grows until last_n, then wraps
  size_t next_ = 0;              // slot of the oldest token once the ring is full
  size_t size_ = 0;              // tokens currently in the window
  std::vector<int32_t> counts_;  // [vocab_size], allocated on the first Accept()
};

}  // namespace streamd
