#include "server/https_tls.h"

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

namespace streamd::server {
namespace {

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

bool SetUpContext(SSL_CTX& ctx, const HttpsFiles& f, std::string* error) {
  const auto fail = [&](const std::string& what) {
    *error = what + ": " + OpenSslError();
    return false;
  };
  const std::string& key = f.config_key;
  if (SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION) != 1) return fail("TLS 1.2 minimum");
  if (SSL_CTX_use_certificate_chain_file(&ctx, f.cert_file.c_str()) != 1) {
    return fail(key + ".cert_file \"" + f.cert_file + "\"");
  }
  if (SSL_CTX_use_PrivateKey_file(&ctx, f.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return fail(key + ".key_file \"" + f.key_file + "\"");
  }
  if (SSL_CTX_check_private_key(&ctx) != 1) {
    return fail(key + ".key_file does not match " + key + ".cert_file");
  }
  if (!f.client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(&ctx, f.client_ca_file.c_str(), nullptr) != 1) {
      return fail(key + ".client_ca_file \"" + f.client_ca_file + "\"");
    }
    SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return true;
}

}  // namespace

std::unique_ptr<httplib::SSLServer> MakeHttpsServer(const HttpsFiles& files, std::string* error) {
  error->clear();
  auto server = std::make_unique<httplib::SSLServer>(
      [&](SSL_CTX& ctx) { return SetUpContext(ctx, files, error); });
  if (!server->is_valid() && error->empty()) *error = "the TLS context could not be made";
  return server;
}

}  // namespace streamd::server
