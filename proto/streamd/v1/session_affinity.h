// The session-affinity key of the wire contract: HTTP/2 header (gRPC metadata) that names the
// session a call is about, for a proxy in front of many replicas to route by
// (deploy/haproxy/haproxy.cfg, docs/OPERATIONS.md "Scaling out").
//
//   clients send it on every call and stream that names a session: Resume, GetSession,
//   CloseSession, ExportSession (an Open has none: any replica will do);
//   the daemon sends it back in the initial metadata of a Session stream whose first answer
//   is Opened, so that a proxy learns which replica holds a new session (HAProxy:
//   `stick store-response res.hdr(x-streamd-session)`).
#pragma once

namespace streamd::v1 {

inline constexpr char kSessionAffinityHeader[] = "x-streamd-session";

}  // namespace streamd::v1
