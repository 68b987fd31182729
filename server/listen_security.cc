#include "server/listen_security.h"

#include <arpa/inet.h>

#include <cstring>
#include <string>

namespace streamd::server {
namespace {

// The host of "host:port" / "[v6]:port", without brackets; the whole text when it has no port.
std::string HostOf(std::string_view address) {
  if (address.starts_with("[")) {
    const size_t close = address.find(']');
    return std::string(
        address.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
  }
  const size_t colon = address.rfind(':');
  return std::string(colon == std::string_view::npos ? address : address.substr(0, colon));
}

}  // namespace

bool IsLoopbackAddress(std::string_view address) {
  if (address.starts_with("unix:")) return true;  // a file: this machine's processes only
  const std::string host = HostOf(address);
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

Status CheckListenSecurity(const ServerOptions& options) {
  if (IsLoopbackAddress(options.listen_address)) return OkStatus();
  if (options.tls.mutual()) return OkStatus();  // every client holds a certificate of our CA
  if (!options.auth.keys_file.empty()) return OkStatus();  // every call carries a key
  if (options.auth.allow_insecure) return OkStatus();
  const std::string why =
      options.tls.enabled()
          ? "TLS is on but does not authenticate clients (no server.tls.client_ca_file)"
          : "clients are not authenticated (no TLS client certificates: "
            "server.tls.client_ca_file)";
  return FailedPreconditionError(
      "config: server.listen_address = " + options.listen_address +
      " is not a loopback address and " + why +
      " and there are no API keys (auth.keys_file). Anyone who can reach the port could list, "
      "resume and close every session. Set auth.keys_file, or server.tls.cert_file, key_file "
      "and client_ca_file (mTLS), or "
      "set auth.allow_insecure: true to serve it anyway (behind a firewall or an "
      "authenticating proxy)");
}

}  // namespace streamd::server
