#include "server/metrics/https_scrape_server.h"

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <prometheus/text_serializer.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "server/metrics/metrics_endpoint.h"

namespace streamd::metrics {
namespace {

// Two workers: one for a scraper's keep-alive connection, one for anyone else (a curl).
constexpr size_t kWorkerThreads = 2;
// Short, so that stopping is not held up by an idle keep-alive connection for long.
constexpr time_t kKeepAliveSeconds = 1;
constexpr time_t kIoTimeoutSeconds = 5;

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// The context: TLS 1.2 and up, our chain and key (checked to match), the client CA for mTLS.
bool SetUpContext(SSL_CTX& ctx, const MetricsTls& tls, std::string* error) {
  const auto fail = [&](const std::string& what) {
    *error = what + ": " + OpenSslError();
    return false;
  };
  if (SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION) != 1) return fail("TLS 1.2 minimum");
  if (SSL_CTX_use_certificate_chain_file(&ctx, tls.cert_file.c_str()) != 1) {
    return fail("server.metrics_tls.cert_file \"" + tls.cert_file + "\"");
  }
  if (SSL_CTX_use_PrivateKey_file(&ctx, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return fail("server.metrics_tls.key_file \"" + tls.key_file + "\"");
  }
  if (SSL_CTX_check_private_key(&ctx) != 1) {
    return fail("server.metrics_tls.key_file does not match server.metrics_tls.cert_file");
  }
  if (!tls.client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(&ctx, tls.client_ca_file.c_str(), nullptr) != 1) {
      return fail("server.metrics_tls.client_ca_file \"" + tls.client_ca_file + "\"");
    }
    SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return true;
}

}  // namespace

struct HttpsScrapeServer::Impl {
  Impl(const MetricsTls& tls, std::string* error)
      : server([&](SSL_CTX& ctx) { return SetUpContext(ctx, tls, error); }) {}
  httplib::SSLServer server;
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
  if (!impl->server.is_valid()) {
    *error = "cannot serve metrics on " + address + ": " +
             (tls_error.empty() ? "the TLS context could not be made" : tls_error);
    return nullptr;
  }
  impl->source = std::move(source);
  httplib::SSLServer& server = impl->server;
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
    raw->server.listen_after_bind();
    raw->listen_returned.store(true);
  });
  return std::unique_ptr<HttpsScrapeServer>(new HttpsScrapeServer(std::move(impl)));
}

HttpsScrapeServer::~HttpsScrapeServer() {
  // httplib's stop() is a no-op until its listening loop has started: wait for it (it starts
  // at once), unless the loop has already ended on its own.
  while (!impl_->server.is_running() && !impl_->listen_returned.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->server.stop();
  impl_->thread.join();
}

int HttpsScrapeServer::port() const { return impl_->port; }

}  // namespace streamd::metrics
