// Translation between the wire contract (streamd.v1) and engine requests, with validation.
//
// Every function that takes a request checks each field against its limit and returns
// INVALID_ARGUMENT (or the engine's code) whose message starts with the field's path in the
// request ("generate.sampling.top_p = 1.5 is out of range (0, 1]"), so FieldOf() recovers it
// for Error.field. Nothing here touches the engine's state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/api/streamd_engine.h"
#include "engine/sessions/session_driver.h"
#include "server/server_options.h"
#include "streamd/v1/streamd.pb.h"

namespace streamd::server {

// Model facts the checks need.
struct ModelLimits {
  int32_t vocab_size = 0;
  int32_t context_length = 0;
};

// Open -> SessionOptions, filling absent fields from `defaults`. Checks the cache mode, sinks
// and window against the engine's limits (sinks <= max_sinks, window <= min(max_window,
// context - sinks)) and the sampling defaults.
StatusOr<SessionOptions> ToSessionOptions(const v1::Open& open, const SessionOptions& defaults,
                                          const EngineConfig& engine, const ModelLimits& model);

// `base` with the fields present in `p` replaced, then validated; `path` prefixes messages.
StatusOr<SamplingParams> MergeSampling(const v1::SamplingParams& p, const SamplingParams& base,
                                       int32_t vocab_size, std::string_view path);

// Generate -> GenerateOptions (sampling merged over the session's defaults).
StatusOr<GenerateOptions> ToGenerateOptions(const v1::Generate& g,
                                            const SamplingParams& session_sampling,
                                            const ServerLimits& limits, int32_t vocab_size);

// Exactly one of text/tokens; text is valid UTF-8 within max_append_bytes; tokens are in the
// vocabulary and within max_append_tokens; the role is known and used with text only.
Status ValidateAppend(const v1::Append& a, const ServerLimits& limits, int32_t vocab_size);

// A validated Append -> the driver's input (a chat turn, raw text or tokens).
SessionInput ToSessionInput(const v1::Append& a);

// Truncate: request_id as Generate's, keep_tokens >= 0 (its upper bound, the generation's
// length, is the engine's check).
Status ValidateTruncate(const v1::Truncate& t, const ServerLimits& limits);

// request_id: at most max_request_id_bytes, printable ASCII.
Status ValidateRequestId(std::string_view id, const ServerLimits& limits, std::string_view path);

// Engine -> wire.
v1::CacheMode ToProto(CacheMode mode);
v1::FinishReason ToProto(FinishReason reason);
v1::SamplingParams ToProto(const SamplingParams& p);  // every field set
v1::CacheState ToCacheState(const SessionInfo& info);
v1::SessionSettings ToSettings(const CacheSpec& spec, const SamplingParams& sampling,
                               int32_t max_blocks);
// The window limit that applies for `sinks` sinks.
int32_t MaxWindow(const EngineConfig& engine, const ModelLimits& model, int32_t sinks);

}  // namespace streamd::server
