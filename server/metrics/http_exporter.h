// MetricsHttpServer: serves a Registry on its own HTTP address, apart from the gRPC port.
//
//   GET /metrics  -> 200, Content-Type "text/plain; version=0.0.4; charset=utf-8", the registry
//                    serialized at the time of the request (HEAD answers the same headers)
//   anything else -> 404
//
// Bound to a configurable host:port; port 0 picks a free port, which port() then reports (tests
// bind port 0). Requests are served by a small pool of threads of cpp-httplib (kept out of this
// header), so a slow scraper never touches the engine: a scrape only reads atomics and runs
// the registry's collect hooks.
//
// Thread-safety: the owner calls every method from one thread; requests are served on
// httplib's threads, which only read the registry.
#pragma once

#include <memory>
#include <string>

#include "server/metrics/registry.h"

namespace streamd::metrics {

class MetricsHttpServer {
 public:
  // `registry` must outlive this server.
  explicit MetricsHttpServer(const Registry& registry);
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Binds `host`:`port` (an IPv4/IPv6 literal or a name; port 0 = any free port) and starts
  // serving. On failure returns false and sets *error to a message naming the address, e.g.
  // "cannot bind the metrics endpoint to 127.0.0.1:9464: Address already in use". Fails if
  // already running.
  bool Start(const std::string& host, int port, std::string* error);

  // Stops accepting, finishes requests in flight and joins the serving threads. Idempotent;
  // Start may be called again afterwards.
  void Stop();

  bool running() const;
  int port() const;  // the bound port while running, else 0

 private:
  struct Impl;
  const Registry& registry_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace streamd::metrics
