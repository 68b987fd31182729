#include "server/metrics/https_scrape_server.h"

#include <httplib.h>
#include <prometheus/text_serializer.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "server/https_tls.h"
#include "server/metrics/metrics_endpoint.h"

namespace streamd::metrics {
namespace {

// Two workers: one for a scraper's keep-alive connection, one for anyone else (a curl).
constexpr size_t kWorkerThreads = 2;
// Short, so that stopping is not held up by an idle keep-alive connection for long.
constexpr time_t kKeepAliveSeconds = 1;
constexpr time_t kIoTimeoutSeconds = 5;

}  // namespace

struct HttpsScrapeServer::Impl {
  Impl(const MetricsTls& tls, std::string* error)
      : server(server::MakeHttpsServer(
            {tls.cert_file, tls.key_file, tls.client_ca_file, "server.metrics_tls"}, error)) {}
  std::unique_ptr<httplib::SSLServer> server;
  std::shared_ptr<ScrapeSource> source;
  std::thread thread;
  std::atomic<bool> listen_returned{false};
  int port = 0;
};

HttpsScrapeServer::HttpsScrapeServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<HttpsScrapeServer> HttpsScrapeServer::Start(const std::string& host, int port,
                                                            std::shared_ptr<ScrapeSource> source,
                                                            const MetricsTls& tls,
                                                            std::string* error) {
  const std::string address = host + ":" + std::to_string(port);
  std::string tls_error;
  auto impl = std::make_unique<Impl>(tls, &tls_error);
  if (!impl->server->is_valid()) {
    *error = "cannot serve metrics on " + address + ": " +
             (tls_error.empty() ? "the TLS context could not be made" : tls_error);
    return nullptr;
  }
  impl->source = std::move(source);
  httplib::SSLServer& server = *impl->server;
  server.new_task_queue = [] { return new httplib::ThreadPool(kWorkerThreads); };
  server.set_keep_alive_timeout(kKeepAliveSeconds);
  server.set_read_timeout(kIoTimeoutSeconds);
  server.set_write_timeout(kIoTimeoutSeconds);
  // httplib's default sets SO_REUSEPORT, which would let a second daemon bind the same port and
  // silently take half the scrapes; SO_REUSEADDR alone makes a port in use a bind error.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  ScrapeSource* scraped = impl->source.get();
  server.Get("/metrics", [scraped](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus::TextSerializer().Serialize(scraped->Collect()),
                    "text/plain; version=0.0.4");
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
    *error = "cannot serve metrics on " + address;
    if (err != 0) *error += std::string(": ") + std::strerror(err);
    return nullptr;
  }
  impl->port = bound;
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    raw->server->listen_after_bind();
    raw->listen_returned.store(true);
  });
  return std::unique_ptr<HttpsScrapeServer>(new HttpsScrapeServer(std::move(impl)));
}

HttpsScrapeServer::~HttpsScrapeServer() {
  // httplib's stop() is a no-op until its listening loop has started: wait for it (it starts
  // at once), unless the loop has already ended on its own.
  while (!impl_->server->is_running() && !impl_->listen_returned.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->server->stop();
  impl_->thread.join();
}

int HttpsScrapeServer::port() const { return impl_->port; }

}  // namespace streamd::metrics
