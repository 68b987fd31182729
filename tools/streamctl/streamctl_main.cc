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
  ConnectionOptions& c = connection;
  c.address = env != nullptr && *env != '\0' ? env : "127.0.0.1:50051";
  flags.String("address", &c.address, "the daemon's gRPC address host:port ($STREAMD_ADDRESS)");
  flags.Bool("tls", &c.tls, "connect with TLS, trusting the system's CAs unless --tls-ca");
  flags.String("tls-ca", &c.tls_ca,
               "TLS: PEM file of the CAs the server's certificate must "
               "chain to (implies --tls)");
  flags.String("tls-cert", &c.tls_cert, "mTLS: PEM file of this client's certificate");
  flags.String("tls-key", &c.tls_key, "mTLS: PEM file of this client's private key");
  flags.String("tls-server-name", &c.tls_server_name,
               "TLS: the name the server's certificate must hold, when it is not the address's "
               "host");
  // Not shown as a default in --help: the environment's key is read at connect time.
  flags.String("api-key", &c.api_key,
               "sent as `authorization: Bearer KEY` on every call (default $STREAMD_API_KEY)");
  flags.Bool("json", &json, "machine-readable output: one JSON object per line");
  flags.Bool("tokens", &tokens, "token ids in and out instead of text");
}

StatusOr<std::shared_ptr<grpc::Channel>> CommonFlags::Connect() const {
  ConnectionOptions c = connection;
  if (c.api_key.empty()) {  // the flag wins over the environment
    const char* env = std::getenv("STREAMD_API_KEY");
    if (env != nullptr) c.api_key = env;
  }
  return MakeChannel(c);
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
    "  sessions truncate ID --keep N [--request-id R]\n"
    "                             keeps N output tokens of its last generation R\n"
    "  sessions fork ID           a copy-on-write copy of a session; prints the new id\n"
    "  health                     the daemon's health (exit 0 when SERVING)\n"
    "\n"
    "Common flags: --address HOST:PORT, --json, --tokens. `streamctl <command> --help` lists\n"
    "a command's flags.\n"
    "\n"
    "Security (docs/SECURITY.md): --tls-ca FILE connects with TLS (--tls alone trusts the\n"
    "system's CAs); --tls-cert FILE --tls-key FILE present a client certificate (mTLS);\n"
    "--tls-server-name NAME when the certificate's name is not the address's host;\n"
    "--api-key KEY or $STREAMD_API_KEY sends `authorization: Bearer KEY` with every call.\n";

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
