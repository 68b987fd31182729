// grpc_load: the closed-loop load of `streamd bench --sessions N`, driven through a running
// `streamd serve` over gRPC instead of inside one process, so that the two side by side measure
// what the daemon's transport costs per token (tools/bench/grpc_overhead.sh).
//
// Per run: N Session streams are opened (each: Open with a sink cache of --sinks S and
// --window W, greedy sampling with seed 1; not timed). Then, at t0, every stream sends the
// same P prompt token ids (Append.tokens) and a Generate of G tokens, and records the arrival
// time of each TokenDelta for every token it carries. Figures are computed by the same code
// and with the same definitions as `streamd bench` (tools/bench/load_metrics.h), from client
// arrival times instead of engine event times:
//   decode tok/s = sum_i (G - 1) / (max_i last_i - min_i first_i)
// The server may coalesce several tokens into one TokenDelta when the client lags; they then
// share the delta's arrival time. A generation that ends before G tokens (end of generation,
// an error) fails the run: there is no way to ignore end-of-generation over gRPC, so the prompt
// must be one the model continues for G tokens (grpc_overhead.sh uses plain prose).
//
// CPU time is reported too, since it is far less sensitive than wall time to other processes on
// a shared machine: client_cpu_s (this process, every thread, getrusage) and, with
// --server-pid, server_cpu_s (the daemon, from /proc/PID/stat at clock-tick resolution), both
// from t0 to the last GenerationDone, like `streamd bench`'s cpu_s.
//
// Usage: grpc_load --address 127.0.0.1:PORT (--prompt-ids IDS.json | --prompt-text FILE)
//          [--sessions 1,16] [--prompt-tokens 128] [--gen-tokens 64] [--sinks 4] [--window 0]
//          [--reps 1] [--server-pid PID] [--json]
// IDS.json is a JSON array of token ids (`streamd tokenize --no-bos --file F`); the first P
// are sent. --prompt-text sends FILE's text instead, as one user turn of the chat template (the
// prompt an OpenAI chat request with that one message makes: tools/bench/http_overhead.sh
// compares the two transports on it); --prompt-tokens is then only the count the figures use.
// One warm-up generation of 2 tokens runs first; with --reps R each figure is the
// median over R runs, session counts taking turns within each repetition.
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <latch>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "streamd/v1/streamd.grpc.pb.h"
#include "tools/bench/load_metrics.h"
#include "tools/flags.h"

namespace streamd::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string address, prompt_ids_path;
  std::string prompt_text;  // non-empty: Append this as a user turn instead of token ids
  std::vector<int64_t> sessions = {1};
  int64_t prompt_tokens = 128, gen_tokens = 64, sinks = 4, window = 0, reps = 1;
  int64_t server_pid = 0;  // 0: do not measure the server's CPU time
  bool json = false;
};

// One session's stream, from Open to Close, on its own thread.
class LoadStream {
 public:
  LoadStream(v1::Streamd::Stub& stub, const Options& o) : o_(o) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(30));
    rw_ = stub.Session(&context_);
  }

  // Open and wait for Opened.
  Status Open() {
    v1::ClientMessage m;
    v1::Open* open = m.mutable_open();
    open->set_cache_mode(v1::CACHE_MODE_SINK);
    open->set_sinks(static_cast<int32_t>(o_.sinks));
    open->set_window(static_cast<int32_t>(o_.window));
    open->mutable_sampling()->set_temperature(0.0f);
    open->mutable_sampling()->set_seed(1);
    if (!rw_->Write(m)) return Finish("Open");
    v1::ServerMessage reply;
    if (!rw_->Read(&reply)) return Finish("Opened");
    if (!reply.has_opened()) {
      return InternalError("expected Opened, got " + reply.ShortDebugString());
    }
    return OkStatus();
  }

  // Append + Generate, then read until GenerationDone; token arrival times relative to t0.
  Status Generate(const std::vector<int32_t>& prompt, int64_t gen_tokens, Clock::time_point t0) {
    v1::ClientMessage append, generate;
    if (o_.prompt_text.empty()) {
      for (int32_t id : prompt) append.mutable_append()->add_tokens(id);
    } else {
      append.mutable_append()->set_text(o_.prompt_text);
      append.mutable_append()->set_role(v1::CHAT_ROLE_USER);
    }
    generate.mutable_generate()->set_max_tokens(static_cast<int32_t>(gen_tokens));
    if (!rw_->Write(append) || !rw_->Write(generate)) return Finish("Append/Generate");
    token_s_.clear();
    token_s_.reserve(static_cast<size_t>(gen_tokens));
    v1::ServerMessage m;
    while (rw_->Read(&m)) {
      if (m.has_token_delta()) {
        const double t = std::chrono::duration<double>(Clock::now() - t0).count();
        token_s_.insert(token_s_.end(), m.token_delta().token_ids_size(), t);
      } else if (m.has_error()) {
        return InternalError("error on the stream: " + m.error().ShortDebugString());
      } else if (m.has_generation_done()) {
        const v1::GenerationDone& d = m.generation_done();
        if (d.reason() != v1::FINISH_REASON_LENGTH ||
            static_cast<int64_t>(token_s_.size()) != gen_tokens) {
          return InternalError("generation ended after " + std::to_string(token_s_.size()) +
                               " of " + std::to_string(gen_tokens) + " tokens (" +
                               v1::FinishReason_Name(d.reason()) +
                               "); use a prompt the model continues for that long");
        }
        return OkStatus();
      }
      // CacheState messages (after the append and after the generation) are not timed.
    }
    return Finish("GenerationDone");
  }

  // Close the session and end the stream.
  Status Close() {
    v1::ClientMessage m;
    m.mutable_close();
    rw_->Write(m);
    rw_->WritesDone();
    v1::ServerMessage ignored;
    while (rw_->Read(&ignored)) {
    }
    const grpc::Status s = rw_->Finish();
    if (!s.ok()) return InternalError("stream ended with " + s.error_message());
    return OkStatus();
  }

  const std::vector<double>& token_s() const { return token_s_; }

 private:
  Status Finish(const std::string& what) {
    const grpc::Status s = rw_->Finish();
    return UnavailableError("the stream ended before " + what + ": " +
                            std::to_string(static_cast<int>(s.error_code())) + " " +
                            s.error_message());
  }

  const Options& o_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ClientMessage, v1::ServerMessage>> rw_;
  std::vector<double> token_s_;
};

// User + system CPU seconds of this process (every thread) so far.
double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// User + system CPU seconds of process `pid` so far (fields 14 and 15 of /proc/PID/stat, after
// the parenthesised command name); -1 when unreadable.
double ProcessCpuSeconds(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(paren + 2));  // field 3 (state) onwards
  std::string skip;
  for (int field = 3; field < 14; ++field) fields >> skip;
  long long utime = 0, stime = 0;
  if (!(fields >> utime >> stime)) return -1;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

struct RunFigures {
  LoadMetrics load;
  double client_cpu_s = 0;
  double server_cpu_s = -1;  // -1: not measured
};

// One closed-loop run of n sessions; every session on its own channel (its own HTTP/2
// connection, as independent clients would have).
StatusOr<RunFigures> RunOnce(const Options& o, const std::vector<int32_t>& prompt, int64_t n,
                             int64_t gen_tokens) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::Streamd::Stub>> stubs;
  std::vector<std::unique_ptr<LoadStream>> streams;
  for (int64_t i = 0; i < n; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // no connection shared with another
    channels.push_back(
        grpc::CreateCustomChannel(o.address, grpc::InsecureChannelCredentials(), args));
    stubs.push_back(v1::Streamd::NewStub(channels.back()));
    streams.push_back(std::make_unique<LoadStream>(*stubs.back(), o));
    STREAMD_RETURN_IF_ERROR(streams.back()->Open());
  }
  std::vector<Status> results(static_cast<size_t>(n));
  std::latch start(n + 1);
  Clock::time_point t0;
  std::vector<std::thread> threads;
  for (int64_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      results[static_cast<size_t>(i)] =
          streams[static_cast<size_t>(i)]->Generate(prompt, gen_tokens, t0);
    });
  }
  RunFigures figures;
  const double server0 = o.server_pid > 0 ? ProcessCpuSeconds(o.server_pid) : -1;
  const double client0 = SelfCpuSeconds();
  t0 = Clock::now();  // written before the latch releases the threads that read it
  start.arrive_and_wait();
  for (std::thread& t : threads) t.join();
  figures.client_cpu_s = SelfCpuSeconds() - client0;
  if (server0 >= 0) {
    const double server1 = ProcessCpuSeconds(o.server_pid);
    if (server1 < 0) {
      return NotFoundError("--server-pid: /proc/" + std::to_string(o.server_pid) + "/stat is gone");
    }
    figures.server_cpu_s = server1 - server0;
  }
  for (auto& s : streams) STREAMD_RETURN_IF_ERROR(s->Close());
  std::vector<std::vector<double>> token_s;
  for (int64_t i = 0; i < n; ++i) {
    STREAMD_RETURN_IF_ERROR(results[static_cast<size_t>(i)]);
    token_s.push_back(streams[static_cast<size_t>(i)]->token_s());
  }
  STREAMD_ASSIGN_OR_RETURN(figures.load,
                           ComputeLoadMetrics(token_s, n * static_cast<int64_t>(prompt.size())));
  return figures;
}

std::vector<NamedFigure> Fields(RunFigures& r) {
  std::vector<NamedFigure> fields = Figures(r.load);
  fields.insert(fields.end(),
                {{"client_cpu_s", &r.client_cpu_s}, {"server_cpu_s", &r.server_cpu_s}});
  return fields;
}

nlohmann::json ToJson(RunFigures m) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : Fields(m)) out[name] = *value;
  return out;
}

RunFigures MedianOf(std::vector<RunFigures> runs) {
  return MedianOfRuns(std::move(runs), [](RunFigures& r) { return Fields(r); });
}

StatusOr<std::vector<int32_t>> ReadPrompt(const std::string& path, int64_t count) {
  std::ifstream in(path);
  if (!in) return NotFoundError("--prompt-ids: cannot read " + path);
  const nlohmann::json ids = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!ids.is_array()) {
    return InvalidArgumentError("--prompt-ids: " + path + " is not a JSON array");
  }
  if (static_cast<int64_t>(ids.size()) < count) {
    return InvalidArgumentError("--prompt-ids: " + path + " has " + std::to_string(ids.size()) +
                                " ids, fewer than --prompt-tokens " + std::to_string(count));
  }
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < count; ++i) {
    if (!ids[static_cast<size_t>(i)].is_number_integer()) {
      return InvalidArgumentError("--prompt-ids: element " + std::to_string(i) + " of " + path +
                                  " is not an integer");
    }
    prompt.push_back(ids[static_cast<size_t>(i)].get<int32_t>());
  }
  return prompt;
}

int Fail(const Status& s) {
  std::fprintf(stderr, "grpc_load: error: %s\n", s.message().c_str());
  return 1;
}

int Run(int argc, char** argv) {
  Options o;
  std::string sessions = "1";
  FlagParser flags(
      "grpc_load --address HOST:PORT --prompt-ids IDS.json [--sessions 1,16] [--prompt-tokens P]\n"
      "          [--gen-tokens G] [--sinks S] [--window W] [--reps R] [--server-pid PID] [--json]\n"
      "Closed-loop load through streamd serve; figures as in `streamd bench --sessions`, from\n"
      "client-side token arrival times (see the header of tools/bench/grpc_load.cc).");
  flags.String("address", &o.address, "streamd serve's gRPC address");
  flags.String("prompt-ids", &o.prompt_ids_path, "JSON array of prompt token ids");
  std::string prompt_text_path;
  flags.String("prompt-text", &prompt_text_path,
               "a file whose text is sent as one user chat turn instead of --prompt-ids");
  flags.String("sessions", &sessions, "session counts, comma-separated, measured in turn");
  flags.Int("prompt-tokens", &o.prompt_tokens, 1, 1 << 20, "prompt tokens per session (P)");
  flags.Int("gen-tokens", &o.gen_tokens, 2, 1 << 20, "generated tokens per session (G)");
  flags.Int("sinks", &o.sinks, 0, 65536, "attention sinks per session");
  flags.Int("window", &o.window, 0, 1 << 20, "window per session (0: P + G, nothing evicted)");
  flags.Int("reps", &o.reps, 1, 1000, "runs after the warm-up; figures are medians");
  flags.Int("server-pid", &o.server_pid, 0, INT32_MAX, "the daemon's pid: report its CPU time");
  flags.Bool("json", &o.json, "print one JSON object as the last line");
  if (Status s = flags.Parse(argc, argv, 1); !s.ok()) return Fail(s);
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (o.address.empty() || o.prompt_ids_path.empty() == prompt_text_path.empty()) {
    return Fail(
        InvalidArgumentError("--address and one of --prompt-ids, --prompt-text are required"));
  }
  o.sessions.clear();
  std::stringstream list(sessions);
  for (std::string item; std::getline(list, item, ',');) {
    char* end = nullptr;
    const long long n = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || n < 1 || n > 4096) {
      return Fail(InvalidArgumentError("--sessions: \"" + item + "\" is not in [1, 4096]"));
    }
    o.sessions.push_back(n);
  }
  if (o.window == 0) o.window = o.prompt_tokens + o.gen_tokens;
  StatusOr<std::vector<int32_t>> prompt = std::vector<int32_t>(o.prompt_tokens, 0);
  if (prompt_text_path.empty()) {
    prompt = ReadPrompt(o.prompt_ids_path, o.prompt_tokens);
  } else {
    std::ifstream in(prompt_text_path);
    if (!in) return Fail(NotFoundError("--prompt-text: cannot read " + prompt_text_path));
    o.prompt_text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (o.prompt_text.empty()) {
      return Fail(InvalidArgumentError("--prompt-text: " + prompt_text_path + " is empty"));
    }
  }
  if (!prompt.ok()) return Fail(prompt.status());

  if (auto warm = RunOnce(o, *prompt, 1, 2); !warm.ok()) return Fail(warm.status());
  std::vector<std::vector<RunFigures>> runs(o.sessions.size());
  for (int64_t rep = 0; rep < o.reps; ++rep) {
    for (size_t k = 0; k < o.sessions.size(); ++k) {
      auto run = RunOnce(o, *prompt, o.sessions[k], o.gen_tokens);
      if (!run.ok()) return Fail(run.status());
      runs[k].push_back(*run);
    }
  }
  std::printf("%8s %12s %10s %20s %20s %12s %12s\n", "sessions", "decode tok/s", "tok/s/sess",
              "ttft p50/p99 (ms)", "itl p50/p99 (ms)", "client cpu s", "server cpu s");
  nlohmann::json results = nlohmann::json::array();
  for (size_t k = 0; k < o.sessions.size(); ++k) {
    const RunFigures f = MedianOf(runs[k]);
    const LoadMetrics& m = f.load;
    std::printf("%8lld %12.1f %10.1f %9.1f %10.1f %9.2f %10.2f %12.2f %12.2f\n",
                static_cast<long long>(o.sessions[k]), m.decode_tokens_per_s,
                m.session_decode_tokens_per_s_p50, m.ttft_ms.p50, m.ttft_ms.p99, m.itl_ms.p50,
                m.itl_ms.p99, f.client_cpu_s, f.server_cpu_s);
    nlohmann::json per_run = nlohmann::json::array();
    for (const RunFigures& r : runs[k]) per_run.push_back(ToJson(r));
    nlohmann::json row = ToJson(f);
    row["sessions"] = o.sessions[k];
    row["runs"] = per_run;
    results.push_back(row);
  }
  if (o.json) {
    const nlohmann::json out = {{"address", o.address},       {"prompt_tokens", o.prompt_tokens},
                                {"gen_tokens", o.gen_tokens}, {"sinks", o.sinks},
                                {"window", o.window},         {"reps", o.reps},
                                {"results", results}};
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace streamd::tools

int main(int argc, char** argv) { return streamd::tools::Run(argc, argv); }
