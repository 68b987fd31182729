#include "server/serve_command.h"

#include <absl/debugging/failure_signal_handler.h>
#include <absl/debugging/symbolize.h>
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/api/engine_host.h"
#include "engine/util/version.h"
#include "server/config/logging.h"
#include "server/config/server_config.h"
#include "server/grpc_server.h"
#include "server/http/http_server.h"
#include "server/listen_security.h"
#include "server/metrics/metrics_endpoint.h"
#include "server/metrics/snapshot_metrics.h"
#include "server/metrics/streamd_metrics.h"
#include "server/metrics_wiring.h"
#include "server/serve_options.h"
#include "server/tls_credentials.h"

namespace streamd::server {
namespace {

constexpr const char* kUsage =
    "usage: streamd serve [--config PATH] [--plan PATH] [--port-file PATH] [--section.key=value "
    "...]\n"
    "Runs the gRPC daemon until SIGTERM or SIGINT, then shuts down gracefully (exit 0).\n"
    "\n"
    "  --config PATH      YAML config (config/streamd.yaml documents every key); without it the\n"
    "                     built-in defaults apply\n"
    "  --plan PATH|auto   a build plan of the model for this machine (streamd build); auto:\n"
    "                     the one beside the model (M.plan) when current, else the defaults;\n"
    "                     the same as --model.plan=PATH\n"
    "  --port-file PATH   write the bound gRPC port there once listening (for port 0)\n"
    "  --section.key=V    override one config key, e.g. --server.listen_address=127.0.0.1:0\n"
    "                     --model.path=M.gguf --sessions.idle_timeout=1m\n"
    "The model is model.path, or $STREAMD_MODEL when neither the file nor a flag sets it.\n";

int Fail(const std::string& message) {
  std::fprintf(stderr, "streamd: error: %s\n", message.c_str());
  return 1;
}

// "host:port" or "[v6]:port" -> host, port.
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

bool WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

int ServeCommand(int argc, char** argv) {
  std::string config_path, port_file;
  std::vector<std::string> overrides;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::string plan;
    std::string* dest = arg.rfind("--config", 0) == 0      ? &config_path
                        : arg.rfind("--port-file", 0) == 0 ? &port_file
                        : arg.rfind("--plan", 0) == 0      ? &plan
                                                           : nullptr;
    const std::string name = arg.substr(0, arg.find('='));
    if (dest != nullptr && (name == "--config" || name == "--port-file" || name == "--plan")) {
      if (arg.find('=') != std::string::npos) {
        *dest = arg.substr(arg.find('=') + 1);
      } else if (i + 1 < argc) {
        *dest = argv[++i];
      } else {
        std::fprintf(stderr, "streamd: error: %s needs a value\n", arg.c_str());
        return 2;
      }
      if (dest == &plan) overrides.push_back("--model.plan=" + plan);
    } else if (LooksLikeConfigOverride(arg)) {
      overrides.push_back(arg);
    } else {
      std::fprintf(stderr, "streamd: error: unknown flag \"%s\" (see streamd serve --help)\n",
                   arg.c_str());
      return 2;
    }
  }

  // Signals are taken synchronously by this thread (sigwait); every thread started from here
  // on inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  // A file-size limit (ulimit -f) must fail a snapshot write with EFBIG, not kill the daemon.
  std::signal(SIGXFSZ, SIG_IGN);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // A daemon that dies (a fatal signal, a failed STREAMD_CHECK's abort, glibc finding its heap
  // corrupted) first prints the stack of the thread it died on to stderr, then ends with the
  // same signal: its log says where. SIGTERM is blocked above, so it still reaches sigwait.
  // Sanitizer builds keep their own, better reports.
  absl::InitializeSymbolizer(argv[0]);
  absl::InstallFailureSignalHandler(absl::FailureSignalHandlerOptions{});
  // Abseil's handler takes SIGTERM too; here SIGTERM and SIGINT are the graceful shutdown
  // (sigwait below), never a crash: their default disposition comes back.
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
#endif

  auto config = LoadServerConfig(config_path, overrides);
  if (!config.ok()) return Fail(config.status().message());
  if (const char* env = std::getenv("STREAMD_MODEL");
      env != nullptr && *env != '\0' && config->model.path == DefaultServerConfig().model.path) {
    config->model.path = env;
  }
  if (Status s = SetupLogging(config->logging.level, config->logging.format); !s.ok()) {
    return Fail(s.message());
  }
  auto options = ToServerOptions(*config);
  if (!options.ok()) return Fail(options.status().message());
  // Before the model loads (seconds): who may connect, and the TLS files, fail the start early.
  if (Status s = CheckListenSecurity(*options); !s.ok()) return Fail(s.message());
  if (Status s = CheckTlsFiles(options->tls); !s.ok()) return Fail(s.message());
  const std::string& http_address = config->server.http_address;
  if (!http_address.empty()) {
    // The HTTP port follows the gRPC port's policy: off loopback only with client
    // authentication (keys, or mTLS with the same files) or auth.allow_insecure.
    ServerOptions http_policy = *options;
    http_policy.listen_address = http_address;
    if (Status s = CheckListenSecurity(http_policy); !s.ok()) {
      return Fail("server.http_address: " + s.message());
    }
  }
  std::string metrics_host;
  int metrics_port = 0;
  if (!SplitHostPort(config->server.metrics_address, &metrics_host, &metrics_port)) {
    return Fail("config: server.metrics_address = \"" + config->server.metrics_address +
                "\" is not host:port");
  }
  spdlog::info("effective config:\n{}", EffectiveConfigYaml(*config));

  api::HostSetup setup;
  setup.model_path = config->model.path;
  setup.plan_path = config->model.plan;
  setup.k_quant_activation_bits = config->model.k_quant_activation_bits;
  setup.backend = config->engine.backend == Backend::kCuda  ? api::BackendChoice::kCuda
                  : config->engine.backend == Backend::kCpu ? api::BackendChoice::kCpu
                                                            : api::BackendChoice::kAuto;
  setup.engine = ToEngineSettings(*config);
  setup.streamd_version = kStreamdVersion;
  setup.options = HostOptionsOf(*options);
  // Before the engine: its scheduler reports every step to the metrics from the first one.
  metrics::StreamdMetrics metrics;
  std::unique_ptr<metrics::SnapshotMetrics> snapshot_metrics;
  if (!options->persistence.snapshot_dir.empty()) {
    snapshot_metrics = std::make_unique<metrics::SnapshotMetrics>(*metrics.registry);
  }
  setup.hooks = MakeHostHooks(&metrics, snapshot_metrics.get());
  auto engine_host = api::LoadEngineHost(setup);
  if (!engine_host.ok()) return Fail(engine_host.status().message());
  const api::HostInfo& engine = (*engine_host)->info();
  LogHostNotes(engine.notes);
  spdlog::info("model runs on {}; model fingerprint {}", engine.device, engine.model_fingerprint);
  metrics.SetBuildInfo(kStreamdVersion, engine.backend_name, engine.model_name);
  AddScrapeHooks(metrics, **engine_host, snapshot_metrics.get());
  const ServerConfig::Server::MetricsTls& mt = config->server.metrics_tls;
  std::string error;
  auto metrics_endpoint =
      metrics::MetricsEndpoint::Start(metrics_host, metrics_port, metrics.source,
                                      {mt.cert_file, mt.key_file, mt.client_ca_file}, &error);
  if (metrics_endpoint == nullptr) return Fail(error);
  const std::string metrics_url = std::string(metrics_endpoint->tls() ? "https" : "http") + "://" +
                                  metrics_host + ":" + std::to_string(metrics_endpoint->port()) +
                                  "/metrics";

  auto server = GrpcServer::Start(**engine_host, *options, &metrics);
  if (!server.ok()) return Fail(server.status().message());
  std::unique_ptr<http::HttpSessions> http_sessions;
  std::unique_ptr<http::HttpServer> http_server;
  if (!http_address.empty()) {
    http::HttpServerOptions h;
    h.address = http_address;
    h.cert_file = options->tls.cert_file;
    h.key_file = options->tls.key_file;
    h.client_ca_file = options->tls.client_ca_file;
    h.max_body_bytes = static_cast<size_t>(options->limits.max_message_bytes);
    h.limits.max_tokens = options->limits.max_tokens;
    h.limits.max_content_bytes = options->limits.max_append_bytes;
    h.limits.max_stop_strings = api::MaxStopStrings();
    h.limits.max_stop_bytes = api::MaxStopBytes();
    h.max_queued_tokens = static_cast<size_t>(options->limits.max_queued_tokens);
    h.on_answered = [&metrics](std::string_view route, int status) {
      metrics.RecordHttpRequest(route, status);
    };
    http_sessions = http::MakeServerSessions({(*server)->sessions(), (*server)->authenticator(),
                                              &metrics, options->session_defaults.admission_timeout,
                                              options->persistence.resume_wait});
    auto started = http::HttpServer::Start(h, *http_sessions);
    if (!started.ok()) return Fail(started.status().message());
    http_server = std::move(started).value();
    const std::string http_host = http_address.substr(0, http_address.rfind(':'));
    const std::string http_url = std::string(http_server->tls() ? "https" : "http") + "://" +
                                 http_host + ":" + std::to_string(http_server->port()) + "/v1";
    // Its own line, before the "listening" line that tests and scripts wait for.
    std::printf("streamd: OpenAI-compatible HTTP API on %s\n", http_url.c_str());
    spdlog::info("OpenAI-compatible HTTP API on {}", http_url);
  }
  const std::string host = options->listen_address.substr(0, options->listen_address.rfind(':'));
  std::printf("streamd: listening on %s:%d (metrics %s)\n", host.c_str(), (*server)->port(),
              metrics_url.c_str());
  std::fflush(stdout);
  spdlog::info("serving {} on {}:{}; metrics on {}", engine.model_name, host, (*server)->port(),
               metrics_url);
  if (!port_file.empty() && !WritePortFile(port_file, (*server)->port())) {
    return Fail("--port-file: cannot write \"" + port_file + "\"");
  }

  int signal = 0;
  sigwait(&signals, &signal);
  spdlog::info("{}: shutting down (grace period {} ms)", signal == SIGTERM ? "SIGTERM" : "SIGINT",
               options->grace_period.count());
  // HTTP answers get the same grace period as gRPC streams, side by side: no new ones (503),
  // those in flight finish or are cancelled after server.shutdown_grace, then the port closes.
  // Their sessions are detached (and written) while the persister still runs.
  std::thread http_drain;
  if (http_server != nullptr) {
    (*server)->sessions().Drain();
    http_drain = std::thread([&http_server, grace = options->grace_period] {
      if (!http_server->Drain(grace)) {
        spdlog::warn("shutdown: HTTP answers still running after the grace period were cancelled");
      }
      http_server->Stop();
    });
  }
  (*server)->Shutdown();  // metrics are served while it drains
  if (http_drain.joinable()) http_drain.join();
  metrics_endpoint.reset();  // before the server and the host: scrape hooks read them
  server->reset();
  spdlog::info("stopped");
  return 0;
}

}  // namespace streamd::server
