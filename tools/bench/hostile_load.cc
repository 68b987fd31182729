// hostile_load: what hostile clients cost an honest one (issue 14's hostile-load benchmark;
// tools/bench/hostile_load.sh starts the daemon and records the result in PERFORMANCE.md).
//
// An honest session (with --api-key) generates G tokens greedily, alone and then beside the
// attack (after --settle-seconds, so that making the connections is not what is timed), taking
// turns for --reps rounds; its decode rate is (tokens - 1) / (last token arrival
// - first token arrival) on the client. The attack, started before the honest generation and
// kept up through it:
//   - --connections C connections (a channel each, on its own subchannel), each with one
//     Session stream that never sends Open: they hold a connection, a stream and a reactor
//     until the daemon's server.open_timeout ends them;
//   - --bad-keys K unary calls (ListSessions) with a key the daemon does not know, spread
//     evenly over --bad-key-seconds from one thread, each answered UNAUTHENTICATED (the
//     generation must last longer than that; a warning says when it did not).
// Output: the median rate alone, beside the attack, and their ratio (goal >= 0.9), plus how
// many bad-key calls were answered UNAUTHENTICATED and how many idle streams the daemon ended.
//
// Usage: hostile_load --address 127.0.0.1:PORT --api-key KEY --prompt TEXT
//          [--gen-tokens 64] [--connections 1000] [--bad-keys 1000] [--bad-key-seconds 5]
//          [--reps 3] [--json]
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "streamd/v1/streamd.grpc.pb.h"
#include "tools/flags.h"

namespace streamd::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string address, api_key, prompt;
  int64_t gen_tokens = 64, connections = 1000, bad_keys = 1000, bad_key_seconds = 5, reps = 3;
  int64_t settle_seconds = 2;
  bool json = false;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The honest session: one stream, one session, one greedy generation per call.
class Honest {
 public:
  Honest(const std::shared_ptr<grpc::Channel>& channel, const Options& o)
      : o_(o), stub_(v1::Streamd::NewStub(channel)) {
    context_.AddMetadata("authorization", "Bearer " + o.api_key);
    rw_ = stub_->Session(&context_);
  }
  StatusOr<double> Open() {
    v1::ClientMessage open;
    open.mutable_open()->mutable_sampling()->set_temperature(0.0f);
    v1::ServerMessage m;
    if (!rw_->Write(open) || !rw_->Read(&m) || !m.has_opened()) return Ended("Opened", m);
    return 0.0;
  }
  // Tokens per second of one generation, after the prompt (not timed).
  StatusOr<double> Generate() {
    v1::ClientMessage append, generate;
    append.mutable_append()->set_text(o_.prompt);
    generate.mutable_generate()->set_max_tokens(static_cast<int32_t>(o_.gen_tokens));
    v1::ServerMessage m;
    if (!rw_->Write(append) || !rw_->Read(&m) || !m.has_cache_state()) {
      return Ended("the Append's CacheState", m);
    }
    if (!rw_->Write(generate)) return Ended("Generate", m);
    std::vector<Clock::time_point> arrivals;
    while (rw_->Read(&m)) {
      if (m.has_token_delta()) {
        arrivals.insert(arrivals.end(), m.token_delta().token_ids_size(), Clock::now());
      } else if (m.has_generation_done()) {
        rw_->Read(&m);  // the CacheState after it
        if (arrivals.size() < 2) return InternalError("the generation gave under two tokens");
        const double s = std::chrono::duration<double>(arrivals.back() - arrivals.front()).count();
        return static_cast<double>(arrivals.size() - 1) / s;
      } else if (m.has_error()) {
        return InternalError("error: " + m.error().ShortDebugString());
      }
    }
    return Ended("GenerationDone", m);
  }

 private:
  Status Ended(const std::string& what, const v1::ServerMessage& last) {
    return UnavailableError("no " + what + " (last message: " + last.ShortDebugString() + ")");
  }
  const Options& o_;
  std::unique_ptr<v1::Streamd::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ClientMessage, v1::ServerMessage>> rw_;
};

// Connections whose one stream never sends Open.
class IdleStreams {
 public:
  IdleStreams(const std::string& address, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
      auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
      auto& s = streams_.emplace_back(std::make_unique<Stream>());
      s->stub = v1::Streamd::NewStub(channel);
      s->rw = s->stub->Session(&s->context);
    }
  }
  // Cancels what is still open; how many the daemon had ended by itself.
  int64_t Stop() {
    for (auto& s : streams_) s->context.TryCancel();
    int64_t ended_by_daemon = 0;
    for (auto& s : streams_) {
      const grpc::Status st = s->rw->Finish();
      ended_by_daemon += st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    }
    return ended_by_daemon;
  }

 private:
  struct Stream {
    grpc::ClientContext context;
    std::unique_ptr<v1::Streamd::Stub> stub;
    std::unique_ptr<grpc::ClientReaderWriter<v1::ClientMessage, v1::ServerMessage>> rw;
  };
  std::vector<std::unique_ptr<Stream>> streams_;
};

// Bad-key calls at an even pace on one thread; counts the UNAUTHENTICATED answers.
class BadKeys {
 public:
  BadKeys(const std::shared_ptr<grpc::Channel>& channel, int64_t n, int64_t seconds)
      : thread_([this, channel, n, seconds] {
          auto stub = v1::Streamd::NewStub(channel);
          const auto gap = std::chrono::duration<double>(
              static_cast<double>(seconds) / static_cast<double>(std::max<int64_t>(n, 1)));
          const Clock::time_point start = Clock::now();
          for (int64_t i = 0; i < n; ++i) {
            std::this_thread::sleep_until(
                start + std::chrono::duration_cast<Clock::duration>(gap * static_cast<double>(i)));
            grpc::ClientContext c;
            c.AddMetadata("authorization", "Bearer not-a-key-" + std::to_string(i));
            c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
            v1::ListSessionsResponse out;
            refused_ +=
                stub->ListSessions(&c, {}, &out).error_code() == grpc::StatusCode::UNAUTHENTICATED;
          }
        }) {}
  // Waits for the last call (all K are made, over S seconds); the UNAUTHENTICATED answers.
  int64_t Wait() {
    thread_.join();
    return refused_;
  }

 private:
  std::atomic<int64_t> refused_{0};
  std::thread thread_;
};

int Run(const Options& o) {
  auto channel = grpc::CreateChannel(o.address, grpc::InsecureChannelCredentials());
  Honest honest(channel, o);
  if (auto s = honest.Open(); !s.ok()) {
    std::cerr << "hostile_load: " << s.status().message() << "\n";
    return 1;
  }
  if (auto warm = honest.Generate(); !warm.ok()) {
    std::cerr << "hostile_load: " << warm.status().message() << "\n";
    return 1;
  }
  std::vector<double> alone, attacked;
  int64_t refused = 0, ended = 0;
  for (int64_t rep = 0; rep < o.reps; ++rep) {
    auto a = honest.Generate();
    if (!a.ok()) {
      std::cerr << "hostile_load: " << a.status().message() << "\n";
      return 1;
    }
    alone.push_back(*a);
    IdleStreams idle(o.address, o.connections);
    // What is measured is holding the connections, not making them: let the handshakes and
    // the daemon's work for each new stream settle first.
    std::this_thread::sleep_for(std::chrono::seconds(o.settle_seconds));
    BadKeys bad(channel, o.bad_keys, o.bad_key_seconds);
    auto b = honest.Generate();
    const Clock::time_point generated = Clock::now();
    refused += bad.Wait();
    // The attack must cover the generation, not trail it: say so when it did not.
    if (Clock::now() - generated > std::chrono::milliseconds(200)) {
      std::cerr << "hostile_load: the bad-key calls outlasted the generation; use a larger "
                   "--gen-tokens or a smaller --bad-key-seconds\n";
    }
    ended += idle.Stop();
    if (!b.ok()) {
      std::cerr << "hostile_load: beside the attack: " << b.status().message() << "\n";
      return 1;
    }
    attacked.push_back(*b);
  }
  const double ratio = Median(alone) > 0 ? Median(attacked) / Median(alone) : 0;
  if (o.json) {
    nlohmann::json j = {{"alone_tok_s", alone},
                        {"attacked_tok_s", attacked},
                        {"median_alone_tok_s", Median(alone)},
                        {"median_attacked_tok_s", Median(attacked)},
                        {"ratio", ratio},
                        {"bad_keys_refused", refused},
                        {"idle_streams_ended_by_daemon", ended}};
    std::cout << j.dump() << "\n";
  } else {
    std::printf(
        "honest decode tok/s: alone %.1f, beside %lld idle connections and %lld bad keys "
        "%.1f (median of %lld); ratio %.3f\n",
        Median(alone), static_cast<long long>(o.connections), static_cast<long long>(o.bad_keys),
        Median(attacked), static_cast<long long>(o.reps), ratio);
    std::printf(
        "bad-key calls answered UNAUTHENTICATED: %lld; idle streams ended by the daemon: "
        "%lld\n",
        static_cast<long long>(refused), static_cast<long long>(ended));
  }
  return 0;
}

}  // namespace
}  // namespace streamd::tools

int main(int argc, char** argv) {
  using streamd::tools::FlagParser;
  streamd::tools::Options o;
  FlagParser flags(
      "hostile_load --address HOST:PORT --api-key KEY --prompt TEXT [--gen-tokens G]\n"
      "          [--connections C] [--bad-keys K] [--bad-key-seconds S] [--reps R] [--json]\n"
      "An honest session's decode rate alone and beside idle connections and bad keys (see the\n"
      "header of tools/bench/hostile_load.cc).");
  flags.String("address", &o.address, "streamd serve's gRPC address");
  flags.String("api-key", &o.api_key, "the honest client's API key");
  flags.String("prompt", &o.prompt, "the honest session's text before each generation");
  flags.Int("gen-tokens", &o.gen_tokens, 2, 1 << 20, "tokens per generation");
  flags.Int("connections", &o.connections, 0, 100000,
            "connections that open a stream and never send Open");
  flags.Int("bad-keys", &o.bad_keys, 0, 10000000, "calls with an unknown key, per round");
  flags.Int("bad-key-seconds", &o.bad_key_seconds, 1, 3600, "the bad-key calls take this long");
  flags.Int("reps", &o.reps, 1, 1000, "rounds (alone, then beside the attack); medians");
  flags.Int("settle-seconds", &o.settle_seconds, 0, 600,
            "wait after making the idle connections, before the honest generation");
  flags.Bool("json", &o.json, "print one JSON object");
  if (streamd::Status s = flags.Parse(argc, argv, 1); !s.ok()) {
    std::cerr << "hostile_load: " << s.message() << "\n";
    return 2;
  }
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (o.address.empty() || o.prompt.empty()) {
    std::cerr << "hostile_load: --address and --prompt are required\n";
    return 2;
  }
  return streamd::tools::Run(o);
}
