#include "engine/sampling/sampling_params.h"

#include <charconv>
#include <cmath>
#include <string>
#include <string_view>

namespace streamd {
namespace {

// Shortest round-trip form, so the message shows exactly the value the client sent
// ("1.5", not "1.500000").
std::string FormatFloat(float value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, result.ptr);
}

// `lo_open`/`hi_open` select "(" / ")" bounds. Written as !(in range) so NaN fails.
Status CheckFloat(std::string_view field, float value, float lo, bool lo_open, float hi,
                  bool hi_open) {
  const bool lo_ok = lo_open ? value > lo : value >= lo;
  const bool hi_ok = hi_open ? value < hi : value <= hi;
  if (lo_ok && hi_ok) return OkStatus();
  return InvalidArgumentError(std::string(field) + " = " + FormatFloat(value) +
                              " is out of range " + (lo_open ? "(" : "[") + FormatFloat(lo) + ", " +
                              FormatFloat(hi) + (hi_open ? ")" : "]"));
}

Status CheckInt(std::string_view field, int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return OkStatus();
  return InvalidArgumentError(std::string(field) + " = " + std::to_string(value) +
                              " is out of range [" + std::to_string(lo) + ", " +
                              std::to_string(hi) + "]");
}

}  // namespace

Status ValidateSamplingParams(const SamplingParams& params) {
  STREAMD_RETURN_IF_ERROR(
      CheckFloat("temperature", params.temperature, 0.0f, false, kMaxTemperature, false));
  if (params.top_k < 0) {
    return InvalidArgumentError("top_k = " + std::to_string(params.top_k) +
                                " must be >= 0 (0 disables top-k)");
  }
  STREAMD_RETURN_IF_ERROR(CheckFloat("top_p", params.top_p, 0.0f, true, 1.0f, false));
  STREAMD_RETURN_IF_ERROR(CheckFloat("min_p", params.min_p, 0.0f, false, 1.0f, false));
  STREAMD_RETURN_IF_ERROR(CheckFloat("repetition_penalty", params.repetition_penalty, 0.0f, true,
                                     kMaxRepetitionPenalty, false));
  STREAMD_RETURN_IF_ERROR(CheckFloat("presence_penalty", params.presence_penalty,
                                     -kMaxPresenceFrequencyPenalty, false,
                                     kMaxPresenceFrequencyPenalty, false));
  STREAMD_RETURN_IF_ERROR(CheckFloat("frequency_penalty", params.frequency_penalty,
                                     -kMaxPresenceFrequencyPenalty, false,
                                     kMaxPresenceFrequencyPenalty, false));
  return CheckInt("penalty_last_n", params.penalty_last_n, 0, kMaxPenaltyLastN);
}

Status ValidateSamplingParams(const SamplingParams& params, int32_t vocab_size) {
  if (vocab_size <= 0) {
    return InvalidArgumentError("vocab_size = " + std::to_string(vocab_size) + " must be > 0");
  }
  STREAMD_RETURN_IF_ERROR(ValidateSamplingParams(params));
  if (params.top_k > vocab_size) {
    return InvalidArgumentError("top_k = " + std::to_string(params.top_k) + " exceeds vocab_size " +
                                std::to_string(vocab_size));
  }
  return OkStatus();
}

bool PenaltiesAreNeutral(const SamplingParams& params) {
  return params.penalty_last_n == 0 ||
         (params.repetition_penalty == 1.0f && params.presence_penalty == 0.0f &&
          params.frequency_penalty == 0.0f);
}

bool IsPlainArgmax(const SamplingParams& params) {
  return (params.temperature == 0.0f || params.top_k == 1) && PenaltiesAreNeutral(params);
}

}  // namespace streamd
