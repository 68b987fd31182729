// `streamd serve`: the daemon. Linked into tools/streamd when built with the server
// (STREAMD_WITH_SERVER); engine/ and the other tools build without gRPC.
#pragma once

namespace streamd::server {

// argv[0] is "streamd", argv[1] "serve". Exit codes: 0 after a graceful shutdown (SIGTERM or
// SIGINT), 1 for a bad config, model or address, 2 for bad usage.
int ServeCommand(int argc, char** argv);

}  // namespace streamd::server
