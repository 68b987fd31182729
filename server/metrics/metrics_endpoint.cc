#include "server/metrics/metrics_endpoint.h"

#include <CivetServer.h>
#include <prometheus/exposer.h>

#include <exception>
#include <string>
#include <vector>

#include "server/metrics/https_scrape_server.h"

namespace streamd::metrics {
namespace {

// civetweb's own account of a failed start (the bind error), which it logs on the starting
// thread before the Exposer's constructor throws a vaguer exception.
thread_local std::string* start_error = nullptr;

int CaptureStartError(const mg_connection*, const char* message) {
  if (start_error != nullptr && start_error->empty() && message != nullptr) {
    *start_error = message;
  }
  return 1;  // not printed to stderr
}

std::string HostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

std::unique_ptr<MetricsEndpoint> MetricsEndpoint::Start(const std::string& host, int port,
                                                        std::shared_ptr<ScrapeSource> source,
                                                        const MetricsTls& tls, std::string* error) {
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  e->source_ = std::move(source);
  if (tls.enabled()) {
    e->https_ = HttpsScrapeServer::Start(host, port, e->source_, tls, error);
    if (e->https_ == nullptr) return nullptr;
    e->port_ = e->https_->port();
    return e;
  }
  // Two threads: scrapes are rare and quick; a third scraper waits its turn.
  const std::vector<std::string> options = {"listening_ports", HostPort(host, port), "num_threads",
                                            "2"};
  CivetCallbacks callbacks{};
  callbacks.log_message = &CaptureStartError;
  std::string problem;
  start_error = &problem;
  try {
    e->exposer_ = std::make_unique<prometheus::Exposer>(options, &callbacks);
  } catch (const std::exception& ex) {
    start_error = nullptr;
    *error = "cannot serve metrics on " + HostPort(host, port) + ": " +
             (problem.empty() ? std::string(ex.what()) : problem);
    return nullptr;
  }
  start_error = nullptr;
  const std::vector<int> ports = e->exposer_->GetListeningPorts();
  if (ports.empty()) {
    *error = "cannot serve metrics on " + HostPort(host, port) + ": no port was bound";
    return nullptr;
  }
  e->port_ = ports.front();
  e->exposer_->RegisterCollectable(e->source_);
  return e;
}

MetricsEndpoint::~MetricsEndpoint() = default;

}  // namespace streamd::metrics
