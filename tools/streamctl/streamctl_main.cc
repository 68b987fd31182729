// streamctl: the command-line client of the streamd daemon.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "tools/streamctl/commands.h"

namespace streamd::streamctl {

void CommonFlags::Register(tools::FlagParser& flags) {
  const char* env = std::getenv("STREAMD_ADDRESS");
  address = env != nullptr && *env != '\0' ? env : "127.0.0.1:50051";
  flags.String("address", &address, "the daemon's gRPC address host:port ($STREAMD_ADDRESS)");
  flags.Bool("json", &json, "machine-readable output: one JSON object per line");
  flags.Bool("tokens", &tokens, "token ids in and out instead of text");
}

int Fail(const Status& status) {
  std::fprintf(stderr, "streamctl: error: %s\n", status.ToString().c_str());
  return 1;
}

StatusOr<std::vector<int32_t>> ParseTokenIds(const std::string& text) {
  std::string spaced = text;
  for (char& c : spaced) {
    if (c == ',') c = ' ';
  }
  std::istringstream in(spaced);
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    const long v = std::strtol(word.c_str(), &end, 10);
    if (*end != '\0' || v < INT32_MIN || v > INT32_MAX) {
      return InvalidArgumentError("token id \"" + word + "\" is not an integer");
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return InvalidArgumentError("no token ids given");
  return ids;
}

}  // namespace streamd::streamctl

namespace {

constexpr const char* kUsage =
    "usage: streamctl <command> [flags]\n"
    "\n"
    "commands:\n"
    "  chat                       interactive chat: a line in, the answer streamed back;\n"
    "                             Ctrl-C cancels the answer, Ctrl-C at the prompt or EOF quits\n"
    "  generate --prompt TEXT     one completion, streamed\n"
    "  sessions list|get ID|close ID\n"
    "  sessions export ID [--out FILE]   a session's snapshot (stdout must not be a terminal)\n"
    "  sessions import FILE|-     creates the session of a snapshot (same model)\n"
    "  health                     the daemon's health (exit 0 when SERVING)\n"
    "\n"
    "Common flags: --address HOST:PORT, --json, --tokens. `streamctl <command> --help` lists\n"
    "a command's flags.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace streamd::streamctl;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "chat") return ChatCommand(argc, argv);
  if (command == "generate") return GenerateCommand(argc, argv);
  if (command == "sessions") return SessionsCommand(argc, argv);
  if (command == "health") return HealthCommand(argc, argv);
  std::fprintf(stderr,
               "streamctl: error: unknown command \"%s\" (commands: chat, generate, sessions, "
               "health; see streamctl --help)\n",
               command.c_str());
  return 2;
}
