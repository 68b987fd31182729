// streamctl's subcommands and what they share.
#pragma once

#include <string>

#include "engine/util/status.h"
#include "tools/flags.h"

namespace streamd::streamctl {

// Flags every command takes.
struct CommonFlags {
  std::string address;  // --address, default $STREAMD_ADDRESS or 127.0.0.1:50051
  bool json = false;    // --json: machine-readable output, one JSON object per line
  bool tokens = false;  // --tokens: token ids in and out instead of text
  void Register(tools::FlagParser& flags);
};

int ChatCommand(int argc, char** argv);
int GenerateCommand(int argc, char** argv);
int SessionsCommand(int argc, char** argv);
int HealthCommand(int argc, char** argv);

// "streamctl: error: CODE: message" on stderr; exit code 1.
int Fail(const Status& status);
// Parses "1,2,3" or "1 2 3".
StatusOr<std::vector<int32_t>> ParseTokenIds(const std::string& text);

}  // namespace streamd::streamctl
