// HttpServer: the OpenAI-compatible HTTP front door (docs/HTTP.md), a second transport beside
// gRPC over the same sessions (HttpSessions), API keys and limits. cpp-httplib serves it, over
// TLS when a certificate is given (server.tls.*, read once at start).
//
// Routes: GET /v1/models, GET /v1/models/{id}, POST /v1/chat/completions, POST /v1/responses.
// Every request is authenticated first (`authorization: Bearer KEY`, the gRPC port's keys);
// errors are OpenAI-style JSON (http_errors.h): 401 without a valid key, 404 for unknown
// routes, 413 for a body over max_body_bytes (server.max_receive_message_bytes), 503 while
// draining.
//
// Threads: httplib's pool of `threads` workers; a request holds one until it is answered, a
// streamed answer until its last event. A client that sends nothing for read_timeout is
// dropped (slow uploads), and one that does not read for write_timeout too.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "engine/util/status.h"
#include "server/http/handlers.h"

namespace streamd::http {

struct HttpServerOptions {
  std::string address;                              // host:port; port 0 picks a free port
  std::string cert_file, key_file, client_ca_file;  // TLS when cert_file is set; mTLS with a CA
  size_t max_body_bytes = 4 << 20;
  int threads = 64;
  std::chrono::seconds read_timeout{10};
  std::chrono::seconds write_timeout{10};
  RequestLimits limits;
  size_t max_queued_tokens = 1024;
  // Called once per answer, after it was written (a stream: after its last event), with its
  // route (HttpRouteLabel) and HTTP status: the daemon counts them in
  // streamd_http_requests_total. Runs on the worker thread; must be cheap and thread-safe.
  std::function<void(std::string_view route, int status)> on_answered;
};

// The route label of a request path: "/v1/models", "/v1/models/{model}",
// "/v1/chat/completions", "/v1/responses", or "other" (so that clients cannot mint series).
std::string_view HttpRouteLabel(std::string_view path);

class HttpServer {
 public:
  // `sessions` (who calls, and their sessions) must outlive the server. Errors name
  // server.http_address or the TLS file.
  static StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                     HttpSessions& sessions);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  bool tls() const;
  // Shutdown (the sessions already refuse new work: Serving() is UNAVAILABLE): the answers in
  // flight may finish within `grace`; then their generations are cancelled (the client gets an
  // error: 503, or an error event in a stream) and Drain waits a few seconds more for them.
  // True when every answer ended before the grace period was over.
  bool Drain(std::chrono::milliseconds grace);
  // Stops accepting connections and waits for the requests in flight. Idempotent.
  void Stop();

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace streamd::http
