// Translation between the wire contract (streamd.v1) and the engine's session API
// (engine/api/session_api.h), with validation.
//
// Every function that takes a request checks each field it can against its limit and returns
// INVALID_ARGUMENT whose message starts with the field's path in the request
// ("generate.sampling.top_p = 1.5 is out of range (0, 1]"), so FieldOf() recovers it for
// Error.field. What needs the engine's state (an Open's window against the model, a quota) the
// engine checks, naming the field the same way. Nothing here touches the engine.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/api/session_api.h"
#include "server/server_options.h"
#include "streamd/v1/streamd.pb.h"

namespace streamd::server {

// Model facts the checks need.
struct ModelLimits {
  int32_t vocab_size = 0;
  int32_t context_length = 0;
};

// Open -> the engine's OpenOptions (absent fields stay absent: the engine applies its defaults
// and checks sinks and window against its limits). Checks the cache mode.
StatusOr<api::OpenOptions> ToOpenOptions(const v1::Open& open);

// The fields present in `p`.
api::SamplingOverrides ToOverrides(const v1::SamplingParams& p);

// Generate -> the engine's request, every field checked: max_tokens within limits (the server's
// default when absent), stop strings, request_id, and sampling merged over the session's
// defaults (`session_sampling`) against the vocabulary.
StatusOr<api::GenerateRequest> ToGenerateRequest(const v1::Generate& g,
                                                 const api::Sampling& session_sampling,
                                                 const ServerLimits& limits, int32_t vocab_size);

// Exactly one of text/tokens; text is valid UTF-8 within max_append_bytes; tokens are in the
// vocabulary and within max_append_tokens; the role is known and used with text only.
Status ValidateAppend(const v1::Append& a, const ServerLimits& limits, int32_t vocab_size);

// A validated Append -> the engine's input (a chat turn, raw text or tokens).
api::AppendInput ToAppendInput(const v1::Append& a);

// Truncate: request_id as Generate's, keep_tokens >= 0 (its upper bound, the generation's
// length, is the engine's check).
Status ValidateTruncate(const v1::Truncate& t, const ServerLimits& limits);

// request_id: at most max_request_id_bytes, printable ASCII.
Status ValidateRequestId(std::string_view id, const ServerLimits& limits, std::string_view path);

}  // namespace streamd::server
