// streamd: the daemon and its tools, one binary with subcommands.
#include <cstdio>
#include <cstring>
#include <iostream>

#include "tools/commands.h"

namespace streamd::tools {

int Fail(const Status& status, const std::string& context) {
  std::fprintf(stderr, "streamd: error: %s%s%s\n", context.c_str(), context.empty() ? "" : ": ",
               status.message().c_str());
  return 1;
}

int PrintHelp(const FlagParser& flags) {
  std::cout << flags.Help();
  return 0;
}

namespace {

constexpr const char* kUsage =
    "usage: streamd <command> [flags]\n"
    "\n"
    "commands:\n"
    "  generate   complete a prompt, streaming tokens as they are sampled\n"
    "  tokenize   print the token ids of a text\n"
    "  bench      measure prefill and decode throughput\n"
    "\n"
    "`streamd <command> --help` lists a command's flags.\n";

}  // namespace
}  // namespace streamd::tools

int main(int argc, char** argv) {
  using namespace streamd::tools;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "generate") return GenerateCommand(argc, argv);
  if (command == "tokenize") return TokenizeCommand(argc, argv);
  if (command == "bench") return BenchCommand(argc, argv);
  std::fprintf(stderr,
               "streamd: error: unknown command \"%s\" (commands: generate, tokenize, bench; "
               "see streamd --help)\n",
               command.c_str());
  return 2;
}
