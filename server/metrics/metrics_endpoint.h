// MetricsEndpoint: GET /metrics over HTTP(S) on an address of its own, apart from the gRPC port:
// prometheus-cpp's Exposer (civetweb) serving a ScrapeSource over HTTP, or HttpsScrapeServer
// over TLS (https_scrape_server.h says why the Exposer cannot do TLS on Debian 12).
//
//   GET /metrics  -> 200, text exposition format 0.0.4, collected at the time of the request
//   other paths   -> 404
//
// Port 0 binds a free port, which port() reports (tests bind port 0). With a certificate the
// endpoint speaks only TLS 1.2+ (a Prometheus scrape config with `scheme: https`); with a
// client CA as well, scrapers must present a certificate it signed (mTLS). The files are read
// once, at Start: rotating them takes a restart (the gRPC port reloads its own, see
// server/tls_credentials.h).
//
// Requests are served on civetweb's threads, which only collect the source: a slow scraper
// never touches the engine.
#pragma once

#include <memory>
#include <string>

#include "server/metrics/scrape_source.h"

namespace prometheus {
class Exposer;
}

namespace streamd::metrics {
class HttpsScrapeServer;
}

namespace streamd::metrics {

struct MetricsTls {
  std::string cert_file;       // PEM chain, leaf first; empty = plain HTTP
  std::string key_file;        // PEM private key, unencrypted
  std::string client_ca_file;  // PEM CAs; set = a client certificate is required
  bool enabled() const { return !cert_file.empty(); }
};

class MetricsEndpoint {
 public:
  // Binds `host`:`port` (an IPv4 or IPv6 literal, or a name) and starts serving `source`. On
  // failure returns null and sets *error to a message naming the address or file, e.g.
  // "cannot serve metrics on 127.0.0.1:9464: Address already in use".
  static std::unique_ptr<MetricsEndpoint> Start(const std::string& host, int port,
                                                std::shared_ptr<ScrapeSource> source,
                                                const MetricsTls& tls, std::string* error);
  ~MetricsEndpoint();  // stops accepting, finishes requests in flight, joins its threads
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const { return port_; }
  bool tls() const { return https_ != nullptr; }

 private:
  MetricsEndpoint() = default;

  std::shared_ptr<ScrapeSource> source_;          // the Exposer holds it weakly
  std::unique_ptr<prometheus::Exposer> exposer_;  // plain HTTP
  std::unique_ptr<HttpsScrapeServer> https_;      // or TLS
  std::string host_;                              // as bound: the stop's wake-up connects to it
  int port_ = 0;
};

}  // namespace streamd::metrics
