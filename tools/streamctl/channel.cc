#include "tools/streamctl/channel.h"

#include <grpcpp/support/client_interceptor.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

namespace streamd::streamctl {
namespace {

// Adds the API key to the initial metadata of every call. An interceptor rather than call
// credentials: gRPC sends call credentials over TLS only, and a key must also reach a daemon on
// plaintext loopback.
class ApiKeyInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit ApiKeyInterceptor(std::string header) : header_(std::move(header)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", header_});
    }
    methods->Proceed();
  }

 private:
  const std::string header_;
};

class ApiKeyInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ApiKeyInterceptorFactory(const std::string& key) : header_("Bearer " + key) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new ApiKeyInterceptor(header_);
  }

 private:
  const std::string header_;
};

// The PEM file of `flag`, which must hold a block of `kind` ("CERTIFICATE", "PRIVATE KEY"): gRPC
// would only log why it cannot use it and fail every call with "empty address list".
StatusOr<std::string> ReadPemFlag(const char* flag, const std::string& path,
                                  const std::string& kind) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    return Status(err == ENOENT ? StatusCode::kNotFound : StatusCode::kInvalidArgument,
                  std::string(flag) + " " + path + ": cannot open: " + std::strerror(err));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) {
    return InvalidArgumentError(std::string(flag) + " " + path + ": cannot read");
  }
  std::string pem = text.str();
  const size_t begin = pem.find("-----BEGIN ");
  const size_t end = pem.find("-----", begin == std::string::npos ? 0 : begin + 11);
  if (begin == std::string::npos || end == std::string::npos ||
      !pem.substr(begin + 11, end - begin - 11).ends_with(kind)) {
    return InvalidArgumentError(std::string(flag) + " " + path + " holds no PEM " + kind +
                                " (-----BEGIN ..." + kind + "-----)");
  }
  return pem;
}

// A header value gRPC can send: printable ASCII, no spaces (a key pasted with its newline would
// otherwise fail every call with an obscure error).
Status CheckApiKey(const std::string& key) {
  for (const char c : key) {
    if (c < 0x21 || c > 0x7e) {
      return InvalidArgumentError(
          "--api-key / $STREAMD_API_KEY holds a character that is not printable ASCII (a "
          "trailing newline?); a key is printable ASCII without spaces");
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ConnectionOptions& options) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args;
  if (options.uses_tls()) {
    if (options.tls_cert.empty() != options.tls_key.empty()) {
      return InvalidArgumentError(options.tls_cert.empty()
                                      ? "--tls-key needs --tls-cert (the client certificate)"
                                      : "--tls-cert needs --tls-key (its private key)");
    }
    grpc::SslCredentialsOptions ssl;  // empty roots: the system's CAs
    if (!options.tls_ca.empty()) {
      STREAMD_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                               ReadPemFlag("--tls-ca", options.tls_ca, "CERTIFICATE"));
    }
    if (!options.tls_cert.empty()) {
      STREAMD_ASSIGN_OR_RETURN(ssl.pem_cert_chain,
                               ReadPemFlag("--tls-cert", options.tls_cert, "CERTIFICATE"));
      STREAMD_ASSIGN_OR_RETURN(ssl.pem_private_key,
                               ReadPemFlag("--tls-key", options.tls_key, "PRIVATE KEY"));
    }
    credentials = grpc::SslCredentials(ssl);
    if (!options.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls_server_name);
    }
  }
  if (options.api_key.empty()) return grpc::CreateCustomChannel(options.address, credentials, args);
  STREAMD_RETURN_IF_ERROR(CheckApiKey(options.api_key));
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<ApiKeyInterceptorFactory>(options.api_key));
  return grpc::experimental::CreateCustomChannelWithInterceptors(options.address, credentials, args,
                                                                 std::move(factories));
}

}  // namespace streamd::streamctl
