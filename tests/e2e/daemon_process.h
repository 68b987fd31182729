// DaemonProcess: the real `streamd serve` as a child process, for end-to-end tests. It binds
// 127.0.0.1 port 0 (gRPC and metrics) and reports its port through --port-file; the default
// model comes from $STREAMD_MODEL.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace streamd::e2e {

class DaemonProcess {
 public:
  // Starts `streamd serve` with the test defaults plus `overrides` ("--sessions.x=y") and
  // waits until it listens. Fails the test (ADD_FAILURE) and returns null when it does not.
  static std::unique_ptr<DaemonProcess> Start(const std::vector<std::string>& overrides = {});
  ~DaemonProcess();  // SIGKILL if still running

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::shared_ptr<grpc::Channel> Channel(const grpc::ChannelArguments& args = {}) const;

  // Sends SIGTERM (graceful shutdown).
  void Terminate() const;
  // Waits for the exit; returns the exit code, or -1 on timeout / death by signal.
  int Wait(std::chrono::seconds timeout);
  // Everything the daemon wrote to stderr so far.
  std::string Stderr() const;

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string dir_;  // temporary directory: port file, logs
};

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string out, err;
};
// Runs the streamd binary with `args` and waits for it.
RunResult RunStreamd(const std::vector<std::string>& args);

// The streamd binary under test (compiled in) and the model ($STREAMD_MODEL).
std::string StreamdBinary();
std::string ModelPath();

}  // namespace streamd::e2e
