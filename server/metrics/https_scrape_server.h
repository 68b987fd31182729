// HttpsScrapeServer: GET /metrics over TLS 1.2+ (optionally mTLS), for MetricsEndpoint when
// server.metrics_tls is set. cpp-httplib's SSLServer serves what prometheus-cpp's text
// serializer makes of the ScrapeSource.
//
// Why not the Exposer here too: Debian 12's civetweb (1.15, under prometheus-cpp's Exposer)
// loads OpenSSL at run time by its 1.1 function names and fails against Debian's OpenSSL 3
// ("load_tls_dll: libssl.so: cannot find SSL_get_peer_certificate"), so it cannot serve TLS on
// this platform. Plain HTTP stays on the Exposer.
#pragma once

#include <memory>
#include <string>

#include "server/metrics/scrape_source.h"

namespace streamd::metrics {

struct MetricsTls;

class HttpsScrapeServer {
 public:
  // Null and *error naming the key or the address on failure.
  static std::unique_ptr<HttpsScrapeServer> Start(const std::string& host, int port,
                                                  std::shared_ptr<ScrapeSource> source,
                                                  const MetricsTls& tls, std::string* error);
  ~HttpsScrapeServer();  // stops listening, finishes requests in flight, joins
  HttpsScrapeServer(const HttpsScrapeServer&) = delete;
  HttpsScrapeServer& operator=(const HttpsScrapeServer&) = delete;

  int port() const;

 private:
  struct Impl;
  explicit HttpsScrapeServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace streamd::metrics
