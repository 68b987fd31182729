// streamctl's connection to the daemon: plaintext, TLS (--tls-ca, or the system's CAs with
// --tls) or mTLS (--tls-cert and --tls-key: the client's identity), and an API key sent as
// `authorization: Bearer <key>` metadata on every call (docs/SECURITY.md).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "engine/util/status.h"
#include "proto/streamd/v1/session_affinity.h"

namespace streamd::streamctl {

struct ConnectionOptions {
  std::string address;          // host:port (or unix:/path)
  bool tls = false;             // TLS even without any of the files below
  std::string tls_ca;           // PEM CAs that the server's certificate must chain to
  std::string tls_cert;         // PEM client certificate chain (mTLS); with tls_key
  std::string tls_key;          // its private key
  std::string tls_server_name;  // the name checked against the server's certificate (and SNI)
  std::string api_key;          // sent with every call when not empty
  bool uses_tls() const {
    return tls || !tls_ca.empty() || !tls_cert.empty() || !tls_key.empty() ||
           !tls_server_name.empty();
  }
};

// Sends the session-affinity key (proto/streamd/v1/session_affinity.h) on a call that names a
// session, so that a proxy in front of many replicas routes it to the replica that holds it.
inline void SetSessionAffinity(grpc::ClientContext* context, const std::string& session_id) {
  if (!session_id.empty()) context->AddMetadata(v1::kSessionAffinityHeader, session_id);
}

// The channel, or INVALID_ARGUMENT/NOT_FOUND naming the flag whose file cannot be read or whose
// value cannot be sent. Nothing is dialled here: connection errors come with the first call.
StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ConnectionOptions& options);

}  // namespace streamd::streamctl
