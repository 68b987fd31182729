// Safe by default: the gRPC port is reachable only from this machine unless clients are
// authenticated. A session's context can be read back through generation and any caller may
// list, resume and close sessions, so serving a network without client authentication is a
// choice the operator has to write down (auth.allow_insecure), never a default.
#pragma once

#include <string_view>

#include "engine/util/status.h"
#include "server/server_options.h"

namespace streamd::server {

// True for an address only this machine can reach: 127.0.0.0/8, ::1 (also as ::ffff:127.x),
// the name "localhost", and unix: sockets. Anything else counts as reachable from the
// network, including other host names (they may resolve to any interface) and wildcards.
bool IsLoopbackAddress(std::string_view address);

// OK when options.listen_address is loopback, when clients are authenticated (mTLS:
// server.tls.client_ca_file), or when auth.allow_insecure is set; otherwise FAILED_PRECONDITION
// naming the address, why it is refused and auth.allow_insecure.
Status CheckListenSecurity(const ServerOptions& options);

}  // namespace streamd::server
