#include "server/tls_credentials.h"

#include <fcntl.h>
#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace streamd::server {
namespace {

constexpr char kCertKey[] = "server.tls.cert_file";
constexpr char kKeyKey[] = "server.tls.key_file";
constexpr char kClientCaKey[] = "server.tls.client_ca_file";
// PEM files are small; a bigger one is a wrong path (a model file), not a certificate.
constexpr size_t kMaxPemBytes = 1 << 20;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// "key = path" as the messages name a file.
std::string Named(const char* key, const std::string& path) {
  return std::string(key) + " = \"" + path + "\"";
}

// OpenSSL's reason for the last failure (its queue emptied), or "" when it gave none.
std::string OpenSslReason() {
  const unsigned long e = ERR_peek_last_error();
  ERR_clear_error();
  if (e == 0) return "";
  const char* reason = ERR_reason_error_string(e);
  return reason != nullptr ? std::string(" (OpenSSL: ") + reason + ")" : "";
}

StatusOr<std::string> ReadSmallFile(const char* key, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Status(err == ENOENT ? StatusCode::kNotFound : StatusCode::kInvalidArgument,
                  Named(key, path) + ": cannot open: " + std::strerror(err));
  }
  std::string data;
  char buf[8192];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return InvalidArgumentError(Named(key, path) + ": cannot read: " + std::strerror(err));
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > kMaxPemBytes) {
      ::close(fd);
      return InvalidArgumentError(Named(key, path) + " is larger than 1 MiB: not a PEM file");
    }
  }
  ::close(fd);
  return data;
}

// Every PEM certificate in `pem`, in order; an error when there is none.
StatusOr<std::vector<X509Ptr>> ParseCertificates(const char* key, const std::string& path,
                                                 const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return InternalError("OpenSSL: BIO_new_mem_buf failed");
  std::vector<X509Ptr> certs;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) certs.emplace_back(x);
  // The loop ends at the end of the input ("no start line") or at a damaged block.
  const unsigned long last = ERR_peek_last_error();
  const bool clean_end =
      ERR_GET_LIB(last) == ERR_LIB_PEM && ERR_GET_REASON(last) == PEM_R_NO_START_LINE;
  const std::string reason = OpenSslReason();
  if (!clean_end && last != 0) {
    return InvalidArgumentError(Named(key, path) + ": certificate " +
                                std::to_string(certs.size() + 1) + " does not parse" + reason);
  }
  if (certs.empty()) {
    return InvalidArgumentError(Named(key, path) +
                                " holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
  }
  return certs;
}

// A passphrase callback that has none: an encrypted key fails instead of prompting on a tty.
int NoPassphrase(char*, int, int, void*) { return 0; }

StatusOr<PkeyPtr> ParsePrivateKey(const std::string& path, const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return InternalError("OpenSSL: BIO_new_mem_buf failed");
  PkeyPtr pkey(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (pkey == nullptr) {
    return InvalidArgumentError(Named(kKeyKey, path) +
                                " holds no unencrypted PEM private key (gRPC takes no "
                                "passphrase)" +
                                OpenSslReason());
  }
  return pkey;
}

std::string Subject(X509* cert) {
  char buf[512];
  X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof(buf));
  return buf;
}

// A certificate outside its validity period fails every handshake with a verifying client.
Status CheckValidNow(const std::string& path, X509* cert) {
  if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
    return InvalidArgumentError(Named(kCertKey, path) + ": the certificate " + Subject(cert) +
                                " is not valid yet (check the clock)");
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
    return InvalidArgumentError(Named(kCertKey, path) + ": the certificate " + Subject(cert) +
                                " has expired");
  }
  return OkStatus();
}

}  // namespace

Status CheckTlsFiles(const TlsOptions& tls) {
  if (!tls.enabled()) return OkStatus();
  if (tls.key_file.empty()) {
    return InvalidArgumentError(std::string(kCertKey) + " is set but " + kKeyKey + " is not");
  }
  STREAMD_ASSIGN_OR_RETURN(const std::string cert_pem, ReadSmallFile(kCertKey, tls.cert_file));
  STREAMD_ASSIGN_OR_RETURN(std::vector<X509Ptr> chain,
                           ParseCertificates(kCertKey, tls.cert_file, cert_pem));
  STREAMD_RETURN_IF_ERROR(CheckValidNow(tls.cert_file, chain.front().get()));
  STREAMD_ASSIGN_OR_RETURN(const std::string key_pem, ReadSmallFile(kKeyKey, tls.key_file));
  STREAMD_ASSIGN_OR_RETURN(PkeyPtr key, ParsePrivateKey(tls.key_file, key_pem));
  if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgumentError(
        Named(kKeyKey, tls.key_file) + " is not the private key of the certificate in " +
        Named(kCertKey, tls.cert_file) + " (" + Subject(chain.front().get()) + ")");
  }
  if (tls.mutual()) {
    STREAMD_ASSIGN_OR_RETURN(const std::string ca_pem,
                             ReadSmallFile(kClientCaKey, tls.client_ca_file));
    STREAMD_RETURN_IF_ERROR(ParseCertificates(kClientCaKey, tls.client_ca_file, ca_pem).status());
  }
  return OkStatus();
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsOptions& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  STREAMD_RETURN_IF_ERROR(CheckTlsFiles(tls));
  if (tls.reload_interval.count() < 1) {
    return InvalidArgumentError("server.tls.reload_interval must be at least 1s");
  }
  // An empty root path: the provider watches the identity pair only (no mTLS).
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      tls.key_file, tls.cert_file, tls.mutual() ? tls.client_ca_file : std::string(),
      static_cast<unsigned int>(tls.reload_interval.count()));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (tls.mutual()) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::experimental::TlsServerCredentials(options);
  if (credentials == nullptr) {
    return InternalError("gRPC refused the TLS options of " + Named(kCertKey, tls.cert_file));
  }
  spdlog::info("TLS on the gRPC port: {} and {}{}, read again every {} s", tls.cert_file,
               tls.key_file,
               tls.mutual() ? "; mTLS: client certificates required, CAs " + tls.client_ca_file
                            : std::string("; client certificates not asked for"),
               tls.reload_interval.count());
  return credentials;
}

}  // namespace streamd::server
