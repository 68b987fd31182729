#include "engine/sampling/stop_string_matcher.h"

#include <algorithm>
#include <utility>

#include "kernels/common/check.h"

namespace streamd {
namespace {

// Bytes in the UTF-8 sequence that `lead` starts; 1 for bytes that cannot start one, so
// invalid input is passed through rather than held forever.
size_t Utf8SequenceLength(unsigned char lead) {
  if (lead < 0xC0) return 1;  // ASCII, or a stray continuation byte
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF8) return 4;
  return 1;
}

// Largest cut <= end such that text[0, cut) does not end inside a UTF-8 sequence.
size_t Utf8SafeCut(std::string_view text, size_t end) {
  // A sequence is at most 4 bytes, so its lead byte is among the last 4 before `end`.
  const size_t lowest = end >= 4 ? end - 4 : 0;
  for (size_t i = end; i > lowest; --i) {
    const unsigned char byte = static_cast<unsigned char>(text[i - 1]);
    if ((byte & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    return i - 1 + Utf8SequenceLength(byte) > end ? i - 1 : end;
  }
  return end;
}

}  // namespace

Status StopStringMatcher::Validate(const std::vector<std::string>& stops) {
  if (stops.size() > kMaxStops) {
    return InvalidArgumentError("stop: " + std::to_string(stops.size()) +
                                " stop strings exceed the limit of " + std::to_string(kMaxStops));
  }
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) {
      return InvalidArgumentError("stop[" + std::to_string(i) + "] is empty");
    }
    if (stops[i].size() > kMaxStopBytes) {
      return InvalidArgumentError("stop[" + std::to_string(i) + "] is " +
                                  std::to_string(stops[i].size()) + " bytes, over the limit of " +
                                  std::to_string(kMaxStopBytes) + " bytes");
    }
  }
  return OkStatus();
}

StatusOr<StopStringMatcher> StopStringMatcher::Create(std::vector<std::string> stops) {
  STREAMD_RETURN_IF_ERROR(Validate(stops));
  return StopStringMatcher(std::move(stops));
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  STREAMD_CHECK_MSG(Validate(stops_).ok(), "invalid stop strings; use StopStringMatcher::Create");
}

StopStringMatcher::FeedResult StopStringMatcher::Feed(std::string_view text) {
  if (stopped()) return {"", true, stop_index_};
  pending_.append(text);

  // The match byte-by-byte feeding would see first: earliest end, then earliest start. For
  // one stop, its first occurrence has its earliest end, so find() per stop suffices.
  size_t best_end = std::string::npos;
  size_t best_start = std::string::npos;
  int32_t best_index = -1;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t start = pending_.find(stops_[i]);
    if (start == std::string::npos) continue;
    const size_t end = start + stops_[i].size();
    if (end < best_end || (end == best_end && start < best_start)) {
      best_end = end;
      best_start = start;
      best_index = static_cast<int32_t>(i);
    }
  }
  if (best_index >= 0) {
    FeedResult result{pending_.substr(0, best_start), true, best_index};
    stop_index_ = best_index;
    pending_.clear();
    return result;
  }

  const size_t cut = Utf8SafeCut(pending_, pending_.size() - PartialStopLength());
  FeedResult result{pending_.substr(0, cut), false, -1};
  pending_.erase(0, cut);
  return result;
}

std::string StopStringMatcher::Flush() {
  if (stopped()) return "";
  return std::exchange(pending_, std::string());
}

size_t StopStringMatcher::PartialStopLength() const {
  const std::string_view pending(pending_);
  size_t longest = 0;
  for (const std::string& stop : stops_) {
    // Proper prefixes only: a whole stop would have matched above.
    const size_t max_len = std::min(stop.size() - 1, pending.size());
    for (size_t len = max_len; len > longest; --len) {
      if (pending.substr(pending.size() - len) == std::string_view(stop).substr(0, len)) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

}  // namespace streamd
