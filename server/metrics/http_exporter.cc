#include "server/metrics/http_exporter.h"

#include <httplib.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "server/metrics/exposition.h"

namespace streamd::metrics {
namespace {

// Two workers: one for a scraper's keep-alive connection, one for anyone else (a curl).
constexpr size_t kWorkerThreads = 2;
// Short, so Stop() is not held up by an idle keep-alive connection for long.
constexpr time_t kKeepAliveSeconds = 1;
constexpr time_t kIoTimeoutSeconds = 5;

}  // namespace

struct MetricsHttpServer::Impl {
  httplib::Server server;
  std::thread thread;
  std::atomic<bool> listen_returned{false};
  std::atomic<int> port{0};
};

MetricsHttpServer::MetricsHttpServer(const Registry& registry) : registry_(registry) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

bool MetricsHttpServer::Start(const std::string& host, int port, std::string* error) {
  const std::string address = host + ":" + std::to_string(port);
  if (impl_ != nullptr) {
    *error = "the metrics endpoint is already running on port " + std::to_string(this->port());
    return false;
  }
  if (host.empty() || port < 0 || port > 65535) {
    *error = "invalid metrics endpoint address \"" + address +
             "\": need a host and a port in [0, 65535]";
    return false;
  }

  auto impl = std::make_unique<Impl>();
  httplib::Server& server = impl->server;
  server.new_task_queue = [] { return new httplib::ThreadPool(kWorkerThreads); };
  server.set_keep_alive_timeout(kKeepAliveSeconds);
  server.set_read_timeout(kIoTimeoutSeconds);
  server.set_write_timeout(kIoTimeoutSeconds);
  // httplib's default sets SO_REUSEPORT, which lets a second daemon bind the same port and
  // silently take half the scrapes. SO_REUSEADDR alone still allows a restart while old
  // connections linger in TIME_WAIT, and makes a port in use a bind error.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry_.Serialize(), std::string(kTextContentType));
  });
  // Unknown paths and methods: httplib answers 404; give it a body a person can read.
  server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404) {
      res.set_content("404 not found: metrics are at /metrics\n", "text/plain");
    }
  });

  errno = 0;
  int bound = -1;
  if (port == 0) {
    bound = server.bind_to_any_port(host);
  } else if (server.bind_to_port(host, port)) {
    bound = port;
  }
  if (bound < 0) {
    const int err = errno;
    *error = "cannot bind the metrics endpoint to " + address;
    if (err != 0) *error += std::string(": ") + std::strerror(err);
    return false;
  }
  impl->port.store(bound);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    raw->server.listen_after_bind();
    raw->listen_returned.store(true);
  });
  impl_ = std::move(impl);
  return true;
}

void MetricsHttpServer::Stop() {
  if (impl_ == nullptr) return;
  // httplib's stop() is a no-op until the listening loop has started: wait for it (it starts
  // at once), unless the loop has already ended on its own.
  while (!impl_->server.is_running() && !impl_->listen_returned.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->server.stop();
  impl_->thread.join();
  impl_.reset();
}

bool MetricsHttpServer::running() const {
  return impl_ != nullptr && !impl_->listen_returned.load();
}

int MetricsHttpServer::port() const { return impl_ != nullptr ? impl_->port.load() : 0; }

}  // namespace streamd::metrics
