// The engine's session API values (engine/api/session_api.h) as wire messages (streamd.v1): the
// answers of the unary calls and of the stream's session events.
#pragma once

#include "engine/api/session_api.h"
#include "streamd/v1/streamd.pb.h"

namespace streamd::server {

v1::CacheMode ToProto(api::CacheMode mode);
v1::FinishReason ToProto(api::FinishReason reason);
v1::SamplingParams ToProto(const api::Sampling& p);  // every field set
v1::CacheState ToProto(const api::CacheState& c);
v1::SessionSettings ToProto(const api::SessionSettings& s);
v1::SessionInfo ToProto(const api::SessionInfo& info);
v1::ModelInfo ToProto(const api::ModelInfo& model);

}  // namespace streamd::server
