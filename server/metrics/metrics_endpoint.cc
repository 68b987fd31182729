#include "server/metrics/metrics_endpoint.h"

#include <CivetServer.h>
#include <netdb.h>
#include <poll.h>
#include <prometheus/exposer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <thread>
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

using AddressList = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

// The addresses of host:port, for connecting to it; a wildcard address is reached on loopback.
AddressList ResolveForConnect(const std::string& host, int port) {
  const std::string to = host.empty() || host == "0.0.0.0" ? "127.0.0.1"
                         : host == "::" || host == "[::]"  ? "::1"
                                                           : host;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(to.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) found = nullptr;
  return AddressList(found, &freeaddrinfo);
}

// Opens and closes one TCP connection to the first of `addresses` that takes one. Never waits
// more than kConnectWaitMs on one (a firewall that drops the packets would otherwise hold a
// blocking connect, and so the daemon's stop, for minutes).
constexpr int kConnectWaitMs = 50;
void ConnectAndClose(const addrinfo* addresses) {
  for (const addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    bool connected = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!connected && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int error = 0;
      socklen_t size = sizeof error;
      connected = poll(&p, 1, kConnectWaitMs) == 1 &&
                  getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 && error == 0;
    }
    close(fd);
    if (connected) return;
  }
}

}  // namespace

std::unique_ptr<MetricsEndpoint> MetricsEndpoint::Start(const std::string& host, int port,
                                                        std::shared_ptr<ScrapeSource> source,
                                                        const MetricsTls& tls, std::string* error) {
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  e->source_ = std::move(source);
  e->host_ = host;
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

MetricsEndpoint::~MetricsEndpoint() {
  if (exposer_ == nullptr) return;
  // civetweb's listening thread waits on its socket up to 2 s at a time and sees the stop only
  // when that wait ends, so every daemon stop (and so every restart) took up to 2 s more. A
  // connection to our own port ends the wait: one is made every few milliseconds until the
  // Exposer has stopped.
  const AddressList own = ResolveForConnect(host_, port_);
  std::atomic<bool> stopped = false;
  std::thread wake([&own, &stopped] {
    while (!stopped.load()) {
      ConnectAndClose(own.get());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  exposer_.reset();
  stopped = true;
  wake.join();
}

}  // namespace streamd::metrics
