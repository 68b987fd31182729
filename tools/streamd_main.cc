// streamd: the daemon and its tools, one binary with subcommands.
#include <cstdio>
#include <cstring>
#include <iostream>

#include "tools/commands.h"
#ifdef STREAMD_WITH_SERVER
#include "server/serve_command.h"
#endif

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
#ifdef STREAMD_WITH_SERVER
    "  serve         run the gRPC daemon (streamctl is its client)\n"
#endif
    "  generate      complete a prompt, streaming tokens as they are sampled\n"
    "  tokenize      print the token ids of a text\n"
    "  bench         measure prefill and decode throughput\n"
    "  eval          streaming perplexity of a text per KV-cache mode "
    "(dense/window/sink/recompute)\n"
    "  bench-memory  stream many tokens through one sink session; record RSS and blocks held\n"
    "  build         compile the model for this machine into a build plan (serve --plan)\n"
    "  plan inspect  print a build plan's choices and measurements\n"
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
#ifdef STREAMD_WITH_SERVER
  if (command == "serve") return streamd::server::ServeCommand(argc, argv);
#endif
  if (command == "generate") return GenerateCommand(argc, argv);
  if (command == "tokenize") return TokenizeCommand(argc, argv);
  if (command == "bench") return BenchCommand(argc, argv);
  if (command == "eval") return EvalCommand(argc, argv);
  if (command == "bench-memory") return BenchMemoryCommand(argc, argv);
  if (command == "build") return BuildCommand(argc, argv);
  if (command == "plan") return PlanCommand(argc, argv);
  std::fprintf(stderr,
               "streamd: error: unknown command \"%s\" (commands: generate, tokenize, bench, eval, "
               "bench-memory, build, plan; "
               "see streamd --help)\n",
               command.c_str());
  return 2;
}
