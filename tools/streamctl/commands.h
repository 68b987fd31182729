// streamctl's subcommands and what they share.
#pragma once

#include <string>

#include "engine/util/status.h"
#include "tools/flags.h"
#include "tools/streamctl/channel.h"

namespace streamd::streamctl {

// Flags every command takes.
struct CommonFlags {
  // --address (default $STREAMD_ADDRESS or 127.0.0.1:50051), --tls, --tls-ca, --tls-cert,
  // --tls-key, --tls-server-name, --api-key (default $STREAMD_API_KEY).
  ConnectionOptions connection;
  bool json = false;    // --json: machine-readable output, one JSON object per line
  bool tokens = false;  // --tokens: token ids in and out instead of text
  void Register(tools::FlagParser& flags);
  // The channel of the connection flags; errors name the flag.
  StatusOr<std::shared_ptr<grpc::Channel>> Connect() const;
};

int ChatCommand(int argc, char** argv);
int GenerateCommand(int argc, char** argv);
int SessionsCommand(int argc, char** argv);
// `sessions truncate ID ...` and `sessions fork ID ...` (argv[2] is the action).
int TruncateCommand(int argc, char** argv);
int ForkCommand(int argc, char** argv);
int HealthCommand(int argc, char** argv);

// "streamctl: error: CODE: message" on stderr; exit code 1.
int Fail(const Status& status);
// Parses "1,2,3" or "1 2 3".
StatusOr<std::vector<int32_t>> ParseTokenIds(const std::string& text);

}  // namespace streamd::streamctl
