// DaemonProcess: the real `streamd serve` as a child process, for end-to-end tests. It binds
// 127.0.0.1 port 0 (gRPC and metrics) and reports its port through --port-file; the default
// model comes from $STREAMD_MODEL. Further config (TLS files, another listen address) comes as
// overrides; Channel(credentials) connects with TLS.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace streamd::e2e {

class DaemonProcess {
 public:
  // Starts `streamd serve` with the test defaults plus `overrides` ("--sessions.x=y"; a later
  // flag wins over an earlier one of the same key) and waits until it listens. Fails the test
  // (ADD_FAILURE) and returns null when it does not.
  //
  // `wrap`, when not empty, is a command that the daemon's command line is appended to: the
  // process runs `wrap[0] wrap[1..] streamd serve ...`. It changes the daemon's environment
  // (a private mount namespace: {"unshare", "-m", "sh", "-c", "mount ... && exec \"$@\"",
  // "sh"}) and must exec the daemon in the same process, so that pid() and the signals of
  // Kill/Terminate reach streamd itself.
  static std::unique_ptr<DaemonProcess> Start(const std::vector<std::string>& overrides = {},
                                              const std::vector<std::string>& wrap = {});
  ~DaemonProcess();  // SIGKILL if still running

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // A channel with the credentials of UseCredentials (plaintext until then).
  std::shared_ptr<grpc::Channel> Channel(const grpc::ChannelArguments& args = {}) const;
  // What Channel(args) connects with from now on: a daemon that serves TLS gets
  // grpc::SslCredentials, so that helpers taking a DaemonProcess reach it.
  void UseCredentials(std::shared_ptr<grpc::ChannelCredentials> credentials) {
    credentials_ = std::move(credentials);
  }
  // A channel with `credentials` (TLS: grpc::SslCredentials) on a subchannel of its own, so that
  // each such channel makes its own connection and handshake, never sharing one with another
  // channel to the daemon.
  std::shared_ptr<grpc::Channel> Channel(
      const std::shared_ptr<grpc::ChannelCredentials>& credentials,
      grpc::ChannelArguments args = {}) const;
  // The daemon's temporary directory (removed with it): a place for a test's config files.
  const std::string& dir() const { return dir_; }

  // Sends SIGTERM (graceful shutdown).
  void Terminate() const;
  // SIGKILL (no shutdown at all) and waits for the process to be gone.
  void Kill();
  // Waits for the exit; returns the exit code, or -1 on timeout / death by signal.
  int Wait(std::chrono::seconds timeout);
  // Everything the daemon wrote to stderr (its log) and stdout so far.
  std::string Stderr() const;
  std::string Stdout() const;
  // The metrics HTTP port, from the "listening on ... (metrics http://HOST:PORT/metrics)" line
  // of its stdout; 0 when there is none.
  int MetricsPort() const;
  // The OpenAI-compatible HTTP API's port (server.http_address), from the "OpenAI-compatible
  // HTTP API on http://HOST:PORT/v1" line of its stdout; 0 when it serves none.
  int HttpPort() const;
  // The body of GET /metrics (Prometheus text), or "" when the request fails.
  std::string ScrapeMetrics() const;

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string dir_;  // temporary directory: port file, logs
  std::shared_ptr<grpc::ChannelCredentials> credentials_ = grpc::InsecureChannelCredentials();
};

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string out, err;
};
// Runs the streamd binary with `args` and waits for it.
RunResult RunStreamd(const std::vector<std::string>& args);
// SHA-256 of `text` in hex, computed outside the daemon (`printf %s TEXT | sha256sum`): what an
// auth.keys_file lists for an API key.
std::string Sha256Hex(const std::string& text);
// Runs `argv` (argv[0] is a path: no $PATH lookup) and waits for it.
RunResult RunProgram(const std::vector<std::string>& argv);

// The streamd binary under test (compiled in) and the model ($STREAMD_MODEL).
std::string StreamdBinary();
std::string ModelPath();

// The value of the sample `series` (its name and labels exactly as exposed, e.g.
// `streamd_snapshots_rejected_total{reason="DATA_LOSS"}`) in a Prometheus text body; -1 when
// the series is absent.
double MetricValue(const std::string& body, const std::string& series);

}  // namespace streamd::e2e
