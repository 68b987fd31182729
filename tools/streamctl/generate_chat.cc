// `streamctl generate` and `streamctl chat`: drive one Session stream.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "engine/util/session_id.h"
#include "tools/streamctl/commands.h"
#include "tools/streamctl/session_client.h"

namespace streamd::streamctl {
namespace {

std::atomic<int> g_interrupts{0};
extern "C" void OnSigint(int) { g_interrupts.fetch_add(1); }

// SIGINT without SA_RESTART: a blocking read of stdin returns, so the prompt can quit.
void InstallSigint() {
  struct sigaction sa = {};
  sa.sa_handler = OnSigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}

// While alive, Ctrl-C cancels the running generation instead of ending the program.
class CancelOnInterrupt {
 public:
  explicit CancelOnInterrupt(SessionClient& client)
      : client_(client), seen_(g_interrupts.load()), thread_([this] { Run(); }) {}
  ~CancelOnInterrupt() {
    stop_ = true;
    thread_.join();
  }

 private:
  void Run() {
    while (!stop_) {
      if (g_interrupts.load() != seen_) {
        seen_ = g_interrupts.load();
        client_.Cancel();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  SessionClient& client_;
  int seen_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Flags of a session and its generations.
struct SessionFlags {
  CommonFlags common;
  std::string session;  // resume this session (its 32-hex-digit id) instead of opening one
  std::string cache_mode, system;
  int64_t sinks = -1, window = -1, max_tokens = 0, top_k = -1, seed = -1;
  double temperature = -1, top_p = -1;
  std::vector<std::string> stops;
  std::string request_id;

  void Register(tools::FlagParser& f) {
    common.Register(f);
    f.String("session", &session, "resume this session: its id, 32 hex digits (default: open one)");
    f.String("cache-mode", &cache_mode, "new session's cache: sink, window or dense");
    f.Int("sinks", &sinks, -1, 1 << 20, "new session's attention sinks (-1: server default)");
    f.Int("window", &window, -1, 1 << 24, "new session's window (-1: server default)");
    f.String("system", &system, "a system turn appended first");
    f.Int("max-tokens", &max_tokens, 0, 1 << 24, "tokens per answer (0: server default)");
    f.Alias("-n", "max-tokens");
    f.Float("temperature", &temperature, -1, 1000, "sampling temperature (-1: session default)");
    f.Int("top-k", &top_k, -1, 1 << 24, "top-k (-1: session default)");
    f.Float("top-p", &top_p, -1, 10, "top-p (-1: session default)");
    f.Int("seed", &seed, -1, INT64_MAX, "sampling seed (-1: session default)");
    f.Strings("stop", &stops, "stop string");
    f.String("request-id", &request_id, "request id echoed by the server");
  }

  // The session-affinity key of the stream: the session it resumes, if any (a malformed
  // --session is refused by Attach, and sends nothing here).
  std::string AffinityKey() const {
    auto id = SessionId::Parse(session, "--session");
    return id.ok() ? id->ToString() : "";
  }

  StatusOr<v1::Opened> Attach(SessionClient& client) const {
    if (!session.empty()) {
      STREAMD_ASSIGN_OR_RETURN(const SessionId id, SessionId::Parse(session, "--session"));
      return client.Resume(id.ToString());
    }
    v1::Open open;
    if (cache_mode == "sink") open.set_cache_mode(v1::CACHE_MODE_SINK);
    if (cache_mode == "window") open.set_cache_mode(v1::CACHE_MODE_WINDOW);
    if (cache_mode == "dense") open.set_cache_mode(v1::CACHE_MODE_DENSE);
    if (!cache_mode.empty() && open.cache_mode() == v1::CACHE_MODE_UNSPECIFIED) {
      return InvalidArgumentError("--cache-mode = \"" + cache_mode +
                                  "\" is not one of sink, window, dense");
    }
    if (sinks >= 0) open.set_sinks(static_cast<int32_t>(sinks));
    if (window >= 0) open.set_window(static_cast<int32_t>(window));
    return client.Open(open);
  }

  v1::Generate MakeGenerate() const {
    v1::Generate g;
    if (max_tokens > 0) g.set_max_tokens(static_cast<int32_t>(max_tokens));
    for (const std::string& s : stops) g.add_stop(s);
    g.set_request_id(request_id);
    v1::SamplingParams* p = g.mutable_sampling();
    if (temperature >= 0) p->set_temperature(static_cast<float>(temperature));
    if (top_k >= 0) p->set_top_k(static_cast<int32_t>(top_k));
    if (top_p >= 0) p->set_top_p(static_cast<float>(top_p));
    if (seed >= 0) p->set_seed(static_cast<uint64_t>(seed));
    if (p->ByteSizeLong() == 0) g.clear_sampling();
    return g;
  }
};

const char* ReasonName(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_END_OF_GENERATION:
      return "end_of_generation";
    case v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    case v1::FINISH_REASON_ERROR:
      return "error";
    default:
      return "unspecified";
  }
}

nlohmann::json DoneJson(const std::string& session, const v1::GenerationDone& d,
                        const std::string& text, const std::vector<int32_t>& ids) {
  nlohmann::json j = {{"session_id", session},
                      {"request_id", d.request_id()},
                      {"reason", ReasonName(d.reason())},
                      {"text", text},
                      {"token_ids", ids},
                      {"input_tokens", d.usage().input_tokens()},
                      {"output_tokens", d.usage().output_tokens()},
                      {"time_to_first_token_s", d.usage().time_to_first_token_s()},
                      {"total_s", d.usage().total_s()}};
  if (d.has_error()) j["error"] = {{"code", d.error().code()}, {"message", d.error().message()}};
  return j;
}

// Appends `input` (text as a chat turn or raw, or token ids) and streams one answer to stdout.
Status Turn(SessionClient& client, const SessionFlags& f, const std::string& session,
            const std::string& input, v1::ChatRole role, bool parse_special = false) {
  v1::Append append;
  if (f.common.tokens) {
    STREAMD_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseTokenIds(input));
    for (int32_t id : ids) append.add_tokens(id);
  } else {
    append.set_text(input);
    append.set_role(role);
    append.set_parse_special(parse_special && role == v1::CHAT_ROLE_UNSPECIFIED);
  }
  STREAMD_RETURN_IF_ERROR(client.Append(append).status());
  std::string text;
  std::vector<int32_t> ids;
  CancelOnInterrupt cancel(client);
  auto done = client.Generate(f.MakeGenerate(), [&](const v1::TokenDelta& d) {
    text += d.text();
    ids.insert(ids.end(), d.token_ids().begin(), d.token_ids().end());
    if (f.common.json) {
      std::cout << nlohmann::json({{"index", d.index()},
                                   {"text", d.text()},
                                   {"token_ids", std::vector<int32_t>(d.token_ids().begin(),
                                                                      d.token_ids().end())}})
                       .dump()
                << "\n";
    } else if (f.common.tokens) {
      for (int32_t id : d.token_ids()) std::cout << id << " ";
    } else {
      std::cout << d.text();
    }
    std::cout.flush();
  });
  if (!done.ok()) return done.status();
  text += done->tail_text();
  if (f.common.json) {
    std::cout << DoneJson(session, *done, text, ids).dump() << std::endl;
  } else {
    std::cout << done->tail_text() << std::endl;
    if (done->reason() == v1::FINISH_REASON_CANCELLED) std::cerr << "[cancelled]\n";
  }
  if (done->has_error()) {
    return Status(static_cast<StatusCode>(done->error().code()), done->error().message());
  }
  return OkStatus();
}

}  // namespace

int GenerateCommand(int argc, char** argv) {
  SessionFlags f;
  std::string prompt;
  bool chat = false, keep = false, special = false;
  tools::FlagParser flags(
      "streamctl generate --prompt TEXT [--chat] [-n N] [--session ID] [--json] [--tokens]\n"
      "Appends TEXT (token ids with --tokens) and streams one completion. Ctrl-C cancels it.");
  f.Register(flags);
  flags.String("prompt", &prompt, "input text, or token ids \"1,2,3\" with --tokens (required)");
  flags.Bool("chat", &chat, "wrap the prompt as a user turn of the model's chat template");
  flags.Bool("special", &special, "raw prompt: parse special-token texts such as <|im_start|>");
  flags.Bool("keep", &keep, "leave the session open (resumable) instead of closing it");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (prompt.empty()) return Fail(InvalidArgumentError("--prompt is required"));
  InstallSigint();
  auto channel = f.common.Connect();
  if (!channel.ok()) return Fail(channel.status());
  SessionClient client(*channel, f.AffinityKey());
  auto opened = f.Attach(client);
  if (!opened.ok()) return Fail(opened.status());
  const std::string id = opened->session_id();
  if (!f.system.empty()) {
    v1::Append sys;
    sys.set_text(f.system);
    sys.set_role(v1::CHAT_ROLE_SYSTEM);
    if (auto r = client.Append(sys); !r.ok()) return Fail(r.status());
  }
  const v1::ChatRole role = chat ? v1::CHAT_ROLE_USER : v1::CHAT_ROLE_UNSPECIFIED;
  const Status turn = Turn(client, f, id, prompt, role, special);
  const bool leave = keep || !f.session.empty();
  const Status end = leave ? client.Detach() : client.Close();
  if (!turn.ok()) return Fail(turn);
  if (!end.ok()) return Fail(end);
  if (leave && !f.common.json) std::cerr << "session " << id << " left open\n";
  return 0;
}

int ChatCommand(int argc, char** argv) {
  SessionFlags f;
  bool close = false;
  tools::FlagParser flags(
      "streamctl chat [--session ID] [--system TEXT] [-n N] [--json] [--tokens]\n"
      "Interactive chat: each line is a user turn; the answer streams back. Ctrl-C cancels the\n"
      "answer (the session goes on); Ctrl-C at the prompt or end of input quits, leaving the\n"
      "session resumable with --session ID until the server's idle timeout.");
  f.Register(flags);
  flags.Bool("close", &close, "close the session when quitting instead of leaving it resumable");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  InstallSigint();
  auto channel = f.common.Connect();
  if (!channel.ok()) return Fail(channel.status());
  SessionClient client(*channel, f.AffinityKey());
  auto opened = f.Attach(client);
  if (!opened.ok()) return Fail(opened.status());
  const std::string id = opened->session_id();
  std::cerr << "session " << id << (opened->resumed() ? " (resumed)" : "") << ", model "
            << opened->model().name() << "; Ctrl-C cancels an answer, Ctrl-D quits\n";
  if (!f.system.empty()) {
    v1::Append sys;
    sys.set_text(f.system);
    sys.set_role(v1::CHAT_ROLE_SYSTEM);
    if (auto r = client.Append(sys); !r.ok()) return Fail(r.status());
  }
  std::string line;
  while (true) {
    std::cerr << "> " << std::flush;
    const int before = g_interrupts.load();
    if (!std::getline(std::cin, line) || g_interrupts.load() != before) break;
    if (line.empty()) continue;
    const Status turn =
        Turn(client, f, id, line, f.common.tokens ? v1::CHAT_ROLE_UNSPECIFIED : v1::CHAT_ROLE_USER);
    if (!turn.ok()) {
      std::fprintf(stderr, "streamctl: error: %s\n", turn.ToString().c_str());
      // A stream that ended cannot go on; a rejected request can.
      if (turn.code() == StatusCode::kUnavailable || turn.code() == StatusCode::kAborted ||
          turn.code() == StatusCode::kCancelled) {
        return 1;
      }
    }
  }
  const Status end = close ? client.Close() : client.Detach();
  if (!end.ok()) return Fail(end);
  if (!close)
    std::cerr << "\nsession " << id << " left open: streamctl chat --session " << id << "\n";
  return 0;
}

}  // namespace streamd::streamctl
