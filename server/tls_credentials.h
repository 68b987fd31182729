// The gRPC port's credentials: plaintext, TLS, or mTLS (docs/SECURITY.md).
//
// TLS credentials come from gRPC's FileWatcherCertificateProvider: it reads the certificate,
// the key and the client CA bundle every `reload_interval`, and the handshakes after a change
// use the new files. Established connections (and the streams on them) are not touched, since
// their keys were agreed at their handshake. gRPC 1.51 offers no minimum-version setting; its
// TLS stack negotiates TLS 1.2 or 1.3 only (grpc_tls_version has no older value), so 1.0 and
// 1.1 clients are refused at the handshake.
//
// The provider reads the files on its own thread and, when they are missing or broken, only
// logs and fails each handshake. So the files are read and parsed here first, with OpenSSL:
// a daemon with an unusable certificate refuses to start, naming the key and the path.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>

#include "engine/util/status.h"
#include "server/server_options.h"

namespace streamd::server {

// Reads the files `tls` names and checks them: the certificate file holds at least one PEM
// certificate, valid now; the key file holds an unencrypted PEM private key that is the
// certificate's; the client CA file (when set) holds at least one PEM certificate.
// NOT_FOUND (no such file) or INVALID_ARGUMENT, naming the config key and the path. OK when
// TLS is off.
Status CheckTlsFiles(const TlsOptions& tls);

// Insecure credentials when TLS is off; otherwise CheckTlsFiles, then TLS credentials over a
// file-watching provider (mTLS: a client certificate is required and verified against
// client_ca_file).
StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsOptions& tls);

}  // namespace streamd::server
