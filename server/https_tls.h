// The TLS side of streamd's two cpp-httplib servers (the HTTP front door, server/http, and the
// metrics endpoint over HTTPS, server/metrics): one SSL context setup for both. TLS 1.2 and up,
// the certificate chain and its key (checked to match), and with a client CA, mTLS (a client
// certificate is required and verified). The files are read once, here; unlike the gRPC port's
// credentials (tls_credentials.h) a rotated certificate needs a restart.
#pragma once

#include <memory>
#include <string>

namespace httplib {
class SSLServer;
}

namespace streamd::server {

struct HttpsFiles {
  std::string cert_file, key_file, client_ca_file;  // client_ca_file empty: no mTLS
  // The config keys' prefix, for the errors: "server.tls" or "server.metrics_tls".
  std::string config_key = "server.tls";
};

// An httplib::SSLServer over `files`. On failure the server is not valid (is_valid() false)
// and `error` says why, naming the config key, the path and OpenSSL's reason.
std::unique_ptr<httplib::SSLServer> MakeHttpsServer(const HttpsFiles& files, std::string* error);

}  // namespace streamd::server
