#include "server/http/http_server.h"

#include <httplib.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "server/http/http_errors.h"
#include "server/http/openai_response.h"
#include "server/http/socket_aware_server.h"
#include "server/https_tls.h"

namespace streamd::http {
namespace {

constexpr time_t kKeepAliveSeconds = 5;

void WriteHttpError(httplib::Response& res, const HttpError& e) {
  res.status = e.status;
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  res.set_content(e.body, "application/json");
}

// "host:port" / "[v6]:port".
bool SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) return false;
  *host = address.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  char* end = nullptr;
  const long p = std::strtol(address.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || p < 0 || p > 65535) return false;
  *port = static_cast<int>(p);
  return true;
}

}  // namespace

std::string_view HttpRouteLabel(std::string_view path) {
  for (std::string_view route : {"/v1/models", "/v1/chat/completions", "/v1/responses"}) {
    if (path == route) return route;
  }
  if (path.size() > 11 && path.substr(0, 11) == "/v1/models/") return "/v1/models/{model}";
  return "other";
}

struct HttpServer::Impl {
  Impl(const HttpServerOptions& o, HttpSessions& sessions, std::string* tls_error)
      : options(o),
        server(o.cert_file.empty() ? std::make_unique<SocketAwareServer>()
                                   : std::unique_ptr<httplib::Server>(server::MakeHttpsServer(
                                         {o.cert_file, o.key_file, o.client_ca_file}, tls_error))),
        ctx{sessions, o.limits, o.max_queued_tokens, UnixSeconds(), &in_flight} {}

  // The caller of a request, or the 401 to send.
  StatusOr<HttpCaller> Authenticate(const httplib::Request& req) const {
    const bool has = req.has_header("Authorization");
    const std::string value = req.get_header_value("Authorization");
    STREAMD_ASSIGN_OR_RETURN(HttpCaller caller, ctx.sessions.Authenticate(has ? &value : nullptr));
    caller.client = "peer " + req.remote_addr;
    return caller;
  }

  // Authenticated, serving (not draining), then `handler`.
  template <typename Handler>
  httplib::Server::Handler Guarded(Handler handler, bool needs_serving) {
    return [this, handler, needs_serving](const httplib::Request& req, httplib::Response& res) {
      auto caller = Authenticate(req);
      if (!caller.ok()) return WriteError(res, caller.status());
      if (needs_serving) {
        if (Status s = ctx.sessions.Serving(); !s.ok()) {
          return WriteError(res, Status(StatusCode::kUnavailable, s.message()));
        }
      }
      handler(*caller, req, res);
    };
  }

  void GetModel(const httplib::Request& req, httplib::Response& res) const {
    const std::string name = ctx.sessions.ModelName();
    const std::string asked = req.matches[1];
    if (asked != name) {
      return WriteHttpError(
          res,
          MakeHttpError(
              404, "model \"" + asked + "\" does not exist; this daemon serves \"" + name + "\"",
              "model"));
    }
    res.set_content(ModelJson(name, ctx.created), "application/json");
  }

  void AddRoutes() {
    httplib::Server& s = *server;
    s.Get("/v1/models",
          Guarded(
              [this](const HttpCaller&, const httplib::Request&, httplib::Response& res) {
                res.set_content(ModelListJson(ctx.sessions.ModelName(), ctx.created),
                                "application/json");
              },
              false));
    s.Get(R"(/v1/models/(.+))", Guarded([this](const HttpCaller&, const httplib::Request& req,
                                               httplib::Response& res) { GetModel(req, res); },
                                        false));
    s.Post("/v1/chat/completions",
           Guarded([this](const HttpCaller& c, const httplib::Request& req,
                          httplib::Response& res) { HandleChatCompletions(ctx, c, req, res); },
                   true));
    s.Post("/v1/responses",
           Guarded([this](const HttpCaller& c, const httplib::Request& req,
                          httplib::Response& res) { HandleResponses(ctx, c, req, res); },
                   true));
    // A declared body over the limit is refused before it is read: httplib would otherwise read
    // (and discard) all of it first, or wait for bytes a lying client never sends.
    // So is a caller without a valid key: nobody unauthenticated makes the server read a body.
    s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      const std::string length = req.get_header_value("Content-Length");
      const size_t max = options.max_body_bytes;
      char* end = nullptr;
      const unsigned long long n = std::strtoull(length.c_str(), &end, 10);
      if (!length.empty() && (*end != '\0' || n > max)) {
        WriteHttpError(
            res,
            MakeHttpError(413, "the request body of " + length + " bytes is over the limit of " +
                                   std::to_string(max) + " (server.max_receive_message_bytes)"));
        res.set_header("Connection", "close");
        return httplib::Server::HandlerResponse::Handled;
      }
      if (auto caller = Authenticate(req); !caller.ok()) {
        WriteError(res, caller.status());
        if (!length.empty() && n > 0) res.set_header("Connection", "close");
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    // httplib's own refusals (no route, body over the limit) get a JSON body too.
    s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string message;
      switch (res.status) {
        case 404:
          message = "no such endpoint: " + req.method + " " + req.path;
          break;
        case 413:
          message = "the request body is over the limit (server.max_receive_message_bytes)";
          break;
        case 400:
          message = "malformed HTTP request";
          break;
        default:
          message = "HTTP " + std::to_string(res.status);
          break;
      }
      WriteHttpError(res, MakeHttpError(res.status, message));
    });
    s.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
          WriteHttpError(res, MakeHttpError(500, "internal error"));
        });
  }

  HttpServerOptions options;
  InFlight in_flight;  // before ctx, which points to it
  std::unique_ptr<httplib::Server> server;
  HttpContext ctx;
  std::thread thread;
  std::atomic<bool> listen_returned{false};
  int port = 0;
  bool stopped = false;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& o,
                                                        HttpSessions& sessions) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(o.address, &host, &port)) {
    return InvalidArgumentError("server.http_address = \"" + o.address + "\" is not host:port");
  }
  std::string tls_error;
  auto impl = std::make_unique<Impl>(o, sessions, &tls_error);
  if (!impl->server->is_valid()) {
    return InvalidArgumentError(
        "server.http_address " + o.address + ": " +
        (tls_error.empty() ? "the TLS context could not be made" : tls_error));
  }
  httplib::Server& server = *impl->server;
  const int threads = o.threads;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server.set_keep_alive_timeout(kKeepAliveSeconds);
  server.set_read_timeout(o.read_timeout);
  server.set_write_timeout(o.write_timeout);
  server.set_payload_max_length(o.max_body_bytes);
  // No SO_REUSEPORT (httplib's default): a second daemon must fail to bind, not share the port.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  impl->AddRoutes();
  // httplib calls its logger once per request, after the answer was written: every answer is
  // seen there, the refusals of the pre-routing handler and of httplib itself included.
  if (o.on_answered) {
    server.set_logger(
        [f = o.on_answered](const httplib::Request& req, const httplib::Response& res) {
          f(HttpRouteLabel(req.path), res.status);
        });
  }
  errno = 0;
  int bound = -1;
  if (port == 0) {
    bound = server.bind_to_any_port(host);
  } else if (server.bind_to_port(host, port)) {
    bound = port;
  }
  if (bound < 0) {
    const int err = errno;
    return UnavailableError("server.http_address: cannot listen on \"" + o.address + "\"" +
                            (err != 0 ? std::string(": ") + std::strerror(err) : std::string()));
  }
  impl->port = bound;
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    raw->server->listen_after_bind();
    raw->listen_returned.store(true);
  });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::~HttpServer() { Stop(); }

int HttpServer::port() const { return impl_->port; }
bool HttpServer::tls() const { return !impl_->options.cert_file.empty(); }

bool HttpServer::Drain(std::chrono::milliseconds grace) {
  const auto wait = [&](std::chrono::steady_clock::time_point deadline) {
    while (impl_->in_flight.answers.load() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return impl_->in_flight.answers.load() == 0;
  };
  if (wait(std::chrono::steady_clock::now() + grace)) return true;
  impl_->in_flight.cancel.store(true);
  // A cancelled generation ends within a step; its answer within a poll of its writer.
  wait(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  return false;
}

void HttpServer::Stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  // httplib's stop() does nothing until its loop has started: wait for that (it starts at once),
  // unless the loop already ended on its own.
  while (!impl_->server->is_running() && !impl_->listen_returned.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->server->stop();
  impl_->thread.join();
}

}  // namespace streamd::http
