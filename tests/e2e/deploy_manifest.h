// What the shipped deploy/ files say about starting and probing streamd, read as written: the
// pod's probes and Secret mounts (deployment.yaml), the pod's config paths
// (kubernetes/streamd.yaml), the image's CMD and HEALTHCHECK (Containerfile) and the unit's
// ExecStart and credentials (streamd.service). End-to-end tests run these commands with only
// the host's paths and addresses swapped for their own (Rewrite), so that a probe that cannot
// work fails a test instead of a rollout.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/util/status.h"

namespace streamd::e2e {

// A health probe: a command and how long its runner waits for it.
struct Probe {
  std::string name;               // "startupProbe", ..., "HEALTHCHECK"
  std::vector<std::string> argv;  // as written: argv[0] = "streamctl"
  double timeout_s = 1;           // the kubelet's timeoutSeconds (default 1), Docker's --timeout
};

struct PodManifest {
  std::vector<Probe> probes;                         // startup, readiness, liveness
  std::map<std::string, std::string> secret_mounts;  // mountPath -> secretName
  std::vector<std::string> args;                     // the container's args
  int grpc_port = 0;                                 // containerPort "grpc"
};
// deploy/kubernetes/deployment.yaml's streamd container. Errors name the file and the field.
StatusOr<PodManifest> ReadPodManifest(const std::string& deployment_yaml);

// A string value of a YAML file by its dotted path ("server.tls.cert_file"); "" when absent.
StatusOr<std::string> YamlValue(const std::string& yaml_file, const std::string& dotted_key);

struct ImageManifest {
  std::vector<std::string> cmd;  // CMD: the arguments after `streamd serve`
  Probe healthcheck;
};
// deploy/container/Containerfile.
StatusOr<ImageManifest> ReadImageManifest(const std::string& containerfile);

struct UnitManifest {
  std::vector<std::string> serve_args;             // ExecStart after `streamd serve`
  std::map<std::string, std::string> credentials;  // LoadCredential name -> source path
};
// deploy/systemd/streamd.service.
StatusOr<UnitManifest> ReadUnitManifest(const std::string& unit_file);

// `args` with every occurrence of each `from` replaced by its `to`, in order: the host's
// paths (a mount point, "%d") and addresses ("127.0.0.1:50051") swapped for a test's own.
std::vector<std::string> Rewrite(std::vector<std::string> args,
                                 const std::vector<std::pair<std::string, std::string>>& swaps);

// The value of `--name VALUE` or `--name=VALUE` in `argv`; "" when absent.
std::string FlagValue(const std::vector<std::string>& argv, const std::string& name);

}  // namespace streamd::e2e
