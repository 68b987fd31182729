// Entry points of streamd's subcommands and the error-reporting helpers they share.
#pragma once

#include <string>

#include "engine/util/status.h"
#include "tools/flags.h"

namespace streamd::tools {

int GenerateCommand(int argc, char** argv);
int TokenizeCommand(int argc, char** argv);
int BenchCommand(int argc, char** argv);
int EvalCommand(int argc, char** argv);
int BenchMemoryCommand(int argc, char** argv);
int BuildCommand(int argc, char** argv);
int PlanCommand(int argc, char** argv);

// Prints "streamd: error: <message>" (prefixed by `context` when given) and returns exit code 1.
int Fail(const Status& status, const std::string& context = "");
// Prints the flags' help to stdout and returns 0.
int PrintHelp(const FlagParser& flags);

}  // namespace streamd::tools
