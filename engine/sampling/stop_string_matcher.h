// StopStringMatcher: finds stop strings in streamed, decoded text and decides what is safe to
// emit to the client so far.
//
// Invariants:
//   - Output is independent of how the text is split into chunks: the stop reported is the one
//     that byte-by-byte feeding would complete first (earliest end; on a tie, the longest).
//   - The concatenation of all emitted text is the input up to (not including) that stop, or
//     the whole input if no stop completes and Flush() is called.
//   - Text is held back only while it could still become a stop string (a suffix that is a
//     proper prefix of some stop) or ends in an incomplete UTF-8 sequence, so every emitted
//     piece of valid UTF-8 input is itself valid UTF-8 (proto3 strings must be).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/util/status.h"

namespace streamd {

class StopStringMatcher {
 public:
  static constexpr size_t kMaxStops = 16;
  static constexpr size_t kMaxStopBytes = 256;

  struct FeedResult {
    std::string text;         // safe to emit now; may be empty
    bool stopped = false;     // a stop string completed; the stream is over
    int32_t stop_index = -1;  // which stop (index into the constructor's vector), or -1
  };

  // INVALID_ARGUMENT naming the limit: more than kMaxStops stops, an empty stop, or one
  // longer than kMaxStopBytes bytes.
  static Status Validate(const std::vector<std::string>& stops);
  // The entry point for stops taken from a request.
  static StatusOr<StopStringMatcher> Create(std::vector<std::string> stops);

  // stops must pass Validate(); a violation aborts. No stops: text passes through (still
  // holding back incomplete UTF-8).
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Appends newly decoded text. After a stop, returns {"", true, index} and ignores the text.
  FeedResult Feed(std::string_view text);

  // Returns the held-back text at the end of generation (empty after a stop).
  std::string Flush();

  bool stopped() const { return stop_index_ >= 0; }

 private:
  // Length of the longest suffix of pending_ that is a proper prefix of some stop.
  size_t PartialStopLength() const;

  std::vector<std::string> stops_;
  std::string pending_;  // held-back text, at most kMaxStopBytes - 1 + 3 bytes between calls
  int32_t stop_index_ = -1;
};

}  // namespace streamd
