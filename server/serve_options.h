// The daemon's config (server/config, config/streamd.yaml) translated into what the engine and
// the gRPC service take.
#pragma once

#include "engine/api/engine_host.h"
#include "server/config/server_config.h"
#include "server/server_options.h"

namespace streamd::server {

// The engine's settings of `config.engine` and the session limits (a KV budget given as a
// fraction is resolved by the engine against its backend's memory).
api::EngineSettings ToEngineSettings(const ServerConfig& config);
// The gRPC service's options: addresses, limits, session defaults, grace period.
StatusOr<ServerOptions> ToServerOptions(const ServerConfig& config);

}  // namespace streamd::server
