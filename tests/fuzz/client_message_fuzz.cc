// libFuzzer target for the session handler: ClientMessage bytes from hostile clients, fed to
// the real server::SessionStream over a real ServiceContext (session registry, admission
// queue, chat formatter, task thread) and a real engine on a small synthetic model (random
// weights: one step takes microseconds). Only gRPC is replaced: FuzzTransport plays the
// reactor, this file's driver plays gRPC and the clients of up to kStreams streams.
//
// The input (client_message_input.h) is what the clients do, in order: write a message
// (parsed exactly as SessionReactor parses raw bytes; what does not parse takes the
// OnMalformedMessage path), stop or resume reading, vanish mid-write, half-close, cancel, let
// time pass, and what the service does to streams (shutdown, CloseSession, the timers). The
// driver delivers each message only when the stream has asked for the next read, as gRPC does.
//
// Besides crashes and sanitizer reports it traps (client_message_fuzz: property violated: ...)
// when:
//   - anything a stream writes breaks the wire contract (server_message_checker.h), or the
//     stream misuses its transport (fuzz_transport.h);
//   - a handled message leads neither to the next read nor to the end of the call within
//     kLiveness (a client would hang): handlers that wait (admission, barge-in, Truncate, Fork)
//     must come back on their own;
//   - a stream whose client half-closes and reads everything does not finish within kLiveness;
//   - after every stream has ended and every session left in the registry is closed, the
//     engine still holds a session or a KV block: a session nobody can reach any more (opened
//     for a stream that went away, a fork never registered) would hold its blocks for ever;
//   - a stream of a tenant's user drives a session of another tenant (Resume, Fork).
//
// Callers (client_message_input.h): anonymous, as on a daemon without API keys, two tenants'
// users and an admin, from a keys file made once; tenant "globex" has small quotas (sessions,
// generations, KV blocks, tokens per second), so the refusals run too.
//
// Limits are small by configuration (server options below), not by filtering inputs: at most
// 12 tokens per generation, 64 ids or 512 bytes per Append, a 128-block pool, so one execution
// takes milliseconds and memory stays flat.
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/backends/cpu/synthetic_model.h"
#include "engine/sessions/admission_queue.h"
#include "engine/sessions/chat_formatter.h"
#include "engine/sessions/session_registry.h"
#include "engine/sessions/session_service.h"
#include "engine/sessions/token_budget.h"
#include "engine/util/task_runner.h"
#include "server/authenticator.h"
#include "server/service_context.h"
#include "server/session_stream.h"
#include "tests/fuzz/client_message_input.h"
#include "tests/fuzz/fuzz_transport.h"
#include "tests/fuzz/server_message_checker.h"

namespace streamd::fuzz {
namespace {

using namespace std::chrono_literals;
using server::SessionStream;

// How long a stream may take to come back after a message, or to end after its client
// half-closed. Generous: a step of the synthetic model takes microseconds; only a stream that
// would never come back reaches it (libFuzzer's -timeout is 10 s).
constexpr auto kLiveness = 5s;
// How long a kWait lets the server run before the next step goes ahead anyway.
constexpr auto kWaitBound = 2s;

// The model and engine, made once: every input closes all its sessions, so each starts from
// an empty engine (checked).
struct Model {
  std::unique_ptr<tokenizer::ChatTemplate> chat;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<server::Authenticator> auth;  // the tenants and their quotas
};
Model* g_model = nullptr;

void Die(const std::string& what) {
  std::fprintf(stderr, "client_message_fuzz: %s\n", what.c_str());
  std::exit(2);
}

// The keys file of the callers below. The fuzzer never presents a key (callers are made
// directly), so the hashes are any 64 hex digits; the tenants' quotas are what counts.
std::unique_ptr<server::Authenticator> MakeAuthenticator() {
  char path[] = "/tmp/client_message_fuzz_keys_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) Die("cannot make a keys file in /tmp");
  close(fd);
  std::ofstream(path) << "tenants:\n"
                         "  globex: {max_sessions: 2, max_generations: 1, max_kv_blocks: 40,"
                         " tokens_per_second: 20}\n"
                         "keys:\n"
                         "  - {tenant: acme, role: user, sha256: "
                      << std::string(64, 'a') << "}\n"
                      << "  - {tenant: globex, role: user, sha256: " << std::string(64, 'b')
                      << "}\n"
                      << "  - {tenant: ops, role: admin, sha256: " << std::string(64, 'c') << "}\n";
  // Kept while the fuzzer runs (the authenticator checks it for changes), removed at exit.
  static std::string keys_file;
  keys_file = path;
  std::atexit([] { unlink(keys_file.c_str()); });
  auto auth = server::Authenticator::Create(keys_file);
  if (!auth.ok()) Die(auth.status().ToString());
  return std::move(auth).value();
}

// Who calls (client_message_input.h's caller numbers) and the client they count as for the
// per-client caps, as StreamdService names them.
struct Identity {
  server::Caller caller;
  const char* client;
};
const Identity kIdentities[kCallers] = {
    {server::Caller{}, "peer fuzz"},
    {server::Caller{"acme", false, true}, "tenant acme"},
    {server::Caller{"globex", false, true}, "tenant globex"},
    {server::Caller{"ops", true, true}, "tenant ops"},
};

void MakeModel() {
  SyntheticModelSpec spec;
  spec.with_vocab = true;
  spec.vocab_size = 300;
  spec.context_length = 512;  // a dense session reserves 32 blocks
  auto model = MakeSyntheticModel(spec);
  if (!model.ok()) Die(model.status().ToString());
  auto vocab = tokenizer::Tokenizer::FromGguf((*model)->file());
  if (!vocab.ok()) Die(vocab.status().ToString());
  auto chat = tokenizer::ChatTemplate::FromGguf((*model)->file(), **vocab);
  if (!chat.ok()) Die(chat.status().ToString());
  EngineConfig config;
  config.pool_bytes = 128 * 4096;  // 128 blocks of 16 tokens (2 layers, 2 KV heads of 16, f16)
  config.max_chunk = 32;
  config.threads = 1;
  config.planner = {64, 16};
  config.max_window = 256;
  auto engine = Engine::Create(std::move(model).value(), std::move(vocab).value(), config);
  if (!engine.ok()) Die(engine.status().ToString());
  g_model = new Model{std::make_unique<tokenizer::ChatTemplate>(std::move(chat).value()),
                      std::move(engine).value(), MakeAuthenticator()};
}

server::ServerOptions FuzzOptions() {
  server::ServerOptions o;
  o.limits.max_tokens = 12;
  o.limits.default_max_tokens = 4;
  o.limits.max_append_bytes = 512;
  o.limits.max_append_tokens = 64;
  o.limits.max_queued_tokens = 6;  // a client that stops reading is cut off soon
  o.limits.max_waiting_opens = 2;
  o.session_defaults.window = 32;
  o.session_defaults.admission_timeout = 20ms;  // Opens that do not fit wait, briefly
  return o;
}

// One input's server: what SessionHost (engine/sessions/session_host.h) builds around the engine,
// without gRPC. Held by pointers so that Shutdown can take it apart in the order the property
// needs.
class World {
 public:
  explicit World(Engine& engine)
      : options_(FuzzOptions()),
        registry_(std::make_unique<SessionRegistry>(
            engine,
            RegistryOptions{options_.limits.idle_timeout, options_.persistence.offload_after, 10s,
                            options_.limits.max_detached_share})),
        chat_(*g_model->chat, engine.tokenizer()),
        tasks_(std::make_unique<TaskRunner>()),
        io_(std::make_unique<TaskRunner>()),
        admission_(std::make_unique<AdmissionQueue>(*registry_, options_.limits.max_waiting_opens)),
        driver_(std::make_unique<SessionDriver>(engine, *registry_, chat_, *tasks_)),
        ctx_{*io_, options_} {
    ctx_.model = {engine.tokenizer().vocab_size(), engine.model().config().context_length};
    ctx_.auth = g_model->auth.get();
    // The engine's session API over these parts, as SessionHost builds it; each input starts
    // with full token buckets (budget_).
    SessionServiceParts parts{engine, *registry_, *driver_, *admission_, chat_, budget_, draining_};
    parts.session_defaults = options_.session_defaults;
    parts.default_max_tokens = options_.limits.default_max_tokens;
    api_ = MakeSessionService(std::move(parts));
    ctx_.api = api_.get();
    // What Opened carries about the model (GrpcServer's MakeModelInfo, which comes with the
    // rest of the gRPC server, not built here): the handler only copies it.
    ctx_.model_info.set_name(engine.model().config().name);
    ctx_.model_info.set_vocab_size(engine.tokenizer().vocab_size());
    ctx_.model_info.set_context_length(engine.model().config().context_length);
    ctx_.model_info.set_chat_template(std::string(chat_.template_name()));
    // As SessionHost: a closed session frees blocks a waiting Open may fit in.
    registry_->set_hooks({[this] {
                            if (auto* a = admission_alive_.load()) a->Notify();
                          },
                          {},
                          {}});
    admission_alive_ = admission_.get();
  }

  server::ServiceContext& ctx() { return ctx_; }
  SessionRegistry& registry() { return *registry_; }
  const server::ServerOptions& options() const { return options_; }

  // Runs every task posted so far (and those they post) before returning; false after `bound`.
  bool TasksIdle(std::chrono::milliseconds bound) {
    auto ran = std::make_shared<std::atomic<bool>>(false);
    tasks_->Post([ran] { *ran = true; });
    const auto deadline = Clock::now() + bound;
    while (!*ran) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(50us);
    }
    return true;
  }

  // After every stream has ended (OnDone): stops the admission queue and the task thread,
  // closes every session left in the registry, and checks the engine holds nothing.
  void Shutdown(Engine& engine) {
    admission_alive_ = nullptr;
    admission_.reset();  // waiting Opens are answered; their streams are gone
    // A Fork on the task thread may still add a session: close, drain, until nothing is left.
    for (int round = 0;; ++round) {
      for (const auto& s : registry_->All()) {
        (void)registry_->Close(s->id, CancelledError("the fuzz input ended"));
      }
      STREAMD_FUZZ_CHECK(TasksIdle(kLiveness), "the task thread never became idle");
      if (registry_->All().empty()) break;
      STREAMD_FUZZ_CHECK(round < 100, "sessions keep appearing after every stream ended");
    }
    // Closing a session frees its blocks after the step it is in: wait for that step. (Checked
    // before the task thread goes: an orphan's generation would still post to it.)
    EngineStats stats = engine.Stats();
    const auto deadline = Clock::now() + kLiveness;
    while ((stats.sessions > 0 || stats.blocks_used > 0 || stats.blocks_reserved > 0) &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(100us);
      stats = engine.Stats();
    }
    const std::string numbers = std::to_string(stats.sessions) + " sessions, " +
                                std::to_string(stats.blocks_used) + " blocks used, " +
                                std::to_string(stats.blocks_reserved) + " reserved";
    STREAMD_FUZZ_CHECK(stats.sessions == 0,
                       "an engine session outlived every stream and the registry: " + numbers);
    STREAMD_FUZZ_CHECK(stats.blocks_used == 0 && stats.blocks_reserved == 0,
                       "KV blocks held after every session was closed: " + numbers);
    tasks_.reset();
    io_.reset();
    api_.reset();
    registry_.reset();
  }

 private:
  server::ServerOptions options_;
  TokenBudget budget_;
  std::atomic<bool> draining_{false};  // the session API's Drain (SessionHost owns it in serve)
  std::unique_ptr<SessionRegistry> registry_;
  ChatFormatter chat_;
  std::unique_ptr<TaskRunner> tasks_;
  std::unique_ptr<TaskRunner> io_;
  std::unique_ptr<AdmissionQueue> admission_;
  std::atomic<AdmissionQueue*> admission_alive_{nullptr};
  // Outlives tasks_ (Shutdown): the tasks still queued call into it.
  std::unique_ptr<SessionDriver> driver_;
  server::ServiceContext ctx_;
  std::unique_ptr<api::Engine> api_;  // over the parts above
};

// The raw bytes of one message, parsed as SessionReactor::OnReadDone parses them.
bool ParseLikeTheReactor(std::string_view bytes, v1::ClientMessage* out) {
  grpc::Slice slice(bytes.data(), bytes.size());
  grpc::ByteBuffer buffer(&slice, 1);
  return grpc::SerializationTraits<v1::ClientMessage>::Deserialize(&buffer, out).ok();
}

// One stream: its client and what gRPC knows about it.
struct Client {
  std::unique_ptr<FuzzTransport> transport;
  std::shared_ptr<SessionStream> stream;  // the reactor's reference, dropped at OnDone
  std::deque<std::string> outgoing;       // written by the client, not yet read by the server
  bool stalled = false;                   // the client does not read
  bool half_closed = false;
  bool cancelled = false;
  bool done = false;  // OnDone ran
  int call = 0;       // which call of the input (the trace's name for it)
  server::Caller caller;
};

class Driver {
 public:
  explicit Driver(World& world) : world_(world) {}

  void Run(const uint8_t* data, size_t size) {
    InputReader input(data, size);
    while (std::optional<Step> step = input.Next()) {
      Apply(*step);
      PumpAll();
    }
    EndEveryStream();
  }

 private:
  // The client of stream `index`; a new call when there is none yet or the last one ended
  // (a client that reconnects, say to resume its session).
  Client& ClientOf(int index, int caller) {
    Client& c = clients_[index];
    if (c.transport != nullptr && !c.done) return c;
    if (calls_ == kMaxCalls) {  // no more calls: the stream stays as it is, ended or unused
      c.done = true;
      return c;
    }
    ++calls_;
    if (c.transport != nullptr) ended_.push_back(std::move(c.transport));  // still checked
    c = Client{};
    c.call = calls_;
    c.caller = kIdentities[caller].caller;
    // StreamdService::Session.
    c.transport = std::make_unique<FuzzTransport>(
        ServerMessageChecker(g_model->engine->tokenizer().vocab_size(), &ids_, calls_));
    c.stream = std::make_shared<SessionStream>(
        world_.ctx(), c.transport.get(),
        server::ToApiCaller(world_.ctx().auth, c.caller, kIdentities[caller].client));
    c.transport->ReadNext();  // SessionReactor::Start
    if (world_.ctx().draining()) c.stream->Drain();
    return c;
  }

  void Apply(const Step& step) {
    if (Tracing() && step.op != Op::kSend) {
      static constexpr const char* kNames[] = {"stall/read",      "write fails", "half-close",
                                               "cancel",          "wait",        "drain",
                                               "close elsewhere", "timers"};
      Trace(clients_[step.stream].call,
            "step:", kNames[static_cast<int>(step.op) - static_cast<int>(Op::kStall)]);
    }
    switch (step.op) {
      case Op::kSend: {
        Client& c = ClientOf(step.stream, step.caller);
        if (!c.half_closed && !c.cancelled && !c.done) c.outgoing.emplace_back(step.message);
        break;
      }
      case Op::kStall: {
        Client& c = ClientOf(step.stream, step.caller);
        c.stalled = !c.stalled;
        break;
      }
      case Op::kWriteFails: {  // the client vanished: its write fails, then the call is cancelled
        Client& c = ClientOf(step.stream, step.caller);
        if (c.done || c.cancelled) break;
        if (c.transport->TakeWrite()) c.stream->OnWriteDone(false);
        c.cancelled = true;
        c.stream->OnCancel();
        break;
      }
      case Op::kHalfClose:
        ClientOf(step.stream, step.caller).half_closed = true;
        break;
      case Op::kCancel: {  // the call is cancelled: then its write in flight and read fail
        Client& c = ClientOf(step.stream, step.caller);
        if (c.done || c.cancelled) break;
        c.cancelled = true;
        c.stream->OnCancel();
        break;
      }
      case Op::kWait:
        Wait();
        break;
      case Op::kDrain:  // StreamdService::Drain, then CancelGenerations after the grace period
        world_.ctx().api->Drain();
        for (Client& other : clients_) {
          if (other.stream != nullptr) other.stream->Drain();
        }
        if (step.arg % 2 == 1) {
          for (Client& other : clients_) {
            if (other.stream != nullptr) {
              other.stream->CancelGeneration(UnavailableError("the grace period has passed"));
            }
          }
        }
        break;
      case Op::kCloseElsewhere: {  // StreamdService::CloseSession
        const Client& c = clients_[step.stream];
        std::optional<std::string> text =
            step.arg % 2 == 1        ? ids_.Pick(step.arg / 2)
            : c.transport != nullptr ? std::optional<std::string>(c.transport->session_id())
                                     : std::nullopt;
        if (!text || text->empty()) break;
        auto id = SessionId::Parse(*text, "session_id");
        STREAMD_FUZZ_CHECK(id.ok(), *text);
        (void)world_.registry().Close(*id, CancelledError("closed by CloseSession"));
        break;
      }
      case Op::kTimers: {  // the service's watchdog and the registry's reaper, much later
        const server::ServerOptions& o = world_.options();
        for (Client& other : clients_) {
          if (other.stream != nullptr) {
            other.stream->EndIfUnbound(Clock::now() + o.transport.open_timeout + 1ms);
          }
        }
        (void)world_.registry().ReapIdle(Clock::now() + o.persistence.offload_after + 1ms);
        break;
      }
    }
  }

  // What gRPC does next for one stream, if anything: completes a write or a read, reports the
  // end of the call. True when it did something.
  bool Pump(Client& c) {
    if (c.transport == nullptr || c.done) return false;
    const FuzzTransport::State st = c.transport->state();
    if (st.writing && (c.cancelled || !c.stalled)) {
      // A cancelled call's writes fail; otherwise the client reads what was written.
      c.transport->TakeWrite();
      c.stream->OnWriteDone(!c.cancelled);
      return true;
    }
    if (st.reading) {
      if (!c.outgoing.empty() && !c.cancelled) {
        c.transport->TakeRead();
        std::string bytes = std::move(c.outgoing.front());
        c.outgoing.pop_front();
        Deliver(c, bytes);
        return true;
      }
      if (c.half_closed || c.cancelled || st.finished) {
        // The read fails: the client half-closed, or the call ended (SessionReactor treats
        // both alike).
        c.transport->TakeRead();
        c.stream->OnHalfClose();
        return true;
      }
    }
    if (st.finished && !st.reading && !st.writing) {
      c.stream->OnDone();
      c.transport->MarkDone();
      c.stream.reset();  // the reactor deletes itself: only the engine's and tasks' refs remain
      c.done = true;
      return true;
    }
    return false;
  }

  void PumpAll() {
    for (bool progress = true; progress;) {
      progress = false;
      for (Client& c : clients_) progress = Pump(c) || progress;
    }
    CheckTenancy();
  }

  // A user's stream drives only its tenant's sessions (ids are never reused, so a session the
  // registry no longer holds was the stream's own and has been closed since).
  void CheckTenancy() {
    for (const Client& c : clients_) {
      if (c.transport == nullptr || c.done || c.caller.admin) continue;
      const std::string text = c.transport->session_id();
      if (text.empty()) continue;
      auto id = SessionId::Parse(text, "session_id");
      STREAMD_FUZZ_CHECK(id.ok(), text);
      const std::shared_ptr<SessionRecord> s = world_.registry().Find(*id);
      if (s == nullptr) continue;
      STREAMD_FUZZ_CHECK(s->options.tenant == c.caller.tenant,
                         "a stream of tenant " + c.caller.tenant + " drives session " + text +
                             " of tenant " + s->options.tenant);
    }
  }

  // SessionReactor::OnReadDone with the bytes of one message.
  void Deliver(Client& c, const std::string& bytes) {
    v1::ClientMessage request;
    if (!ParseLikeTheReactor(bytes, &request)) {
      if (Tracing()) Trace(c.call, "reads", std::to_string(bytes.size()) + " malformed bytes");
      c.stream->OnMalformedMessage(bytes.size());
    } else {
      NameKnownSession(&request);
      if (Tracing()) Trace(c.call, "reads", request.ShortDebugString());
      if (c.stream->OnMessage(request) == SessionStream::Next::kRead) c.transport->ReadNext();
    }
    // A handler that returned kLater reads on by itself, once what it waits for is over.
    if (!c.stalled) AwaitNextReadOrEnd(c);
  }

  // Resume{session_id: one byte b}: the (b mod n)-th id handed out so far.
  void NameKnownSession(v1::ClientMessage* m) {
    if (!m->has_resume() || m->resume().session_id().size() != 1) return;
    const auto b = static_cast<uint8_t>(m->resume().session_id()[0]);
    if (std::optional<std::string> id = ids_.Pick(b)) m->mutable_resume()->set_session_id(*id);
  }

  void AwaitNextReadOrEnd(Client& c) {
    const auto deadline = Clock::now() + kLiveness;
    while (true) {
      const FuzzTransport::State st = c.transport->state();
      if (st.reading || st.finished) return;
      if (st.writing) {  // the client reads on meanwhile
        c.transport->TakeWrite();
        c.stream->OnWriteDone(true);
        continue;
      }
      STREAMD_FUZZ_CHECK(Clock::now() < deadline,
                         "a handled message led neither to the next read nor to the end of the "
                         "call (the client would wait for ever)");
      std::this_thread::sleep_for(20us);
    }
  }

  // Until no generation runs, the task thread has nothing left and each stream waits for its
  // client (or kWaitBound).
  void Wait() {
    const auto deadline = Clock::now() + kWaitBound;
    while (Clock::now() < deadline) {
      PumpAll();
      bool settled = g_model->engine->Stats().generating == 0 && world_.TasksIdle(kWaitBound);
      for (Client& c : clients_) {
        if (c.transport == nullptr || c.done || c.stalled) continue;
        const FuzzTransport::State st = c.transport->state();
        settled = settled && st.reading && !st.writing && c.outgoing.empty();
      }
      if (settled) return;
      std::this_thread::sleep_for(100us);
    }
  }

  // The clients read everything, half-close and wait for the end of their calls.
  void EndEveryStream() {
    for (Client& c : clients_) {
      c.stalled = false;
      c.half_closed = true;
    }
    const auto deadline = Clock::now() + kLiveness;
    while (true) {
      PumpAll();
      bool all_done = true;
      for (Client& c : clients_) all_done = all_done && (c.transport == nullptr || c.done);
      if (all_done) break;
      STREAMD_FUZZ_CHECK(Clock::now() < deadline,
                         "a stream did not end after its client half-closed and read everything");
      std::this_thread::sleep_for(50us);
    }
    world_.Shutdown(*g_model->engine);
  }

  // Calls per input, all streams together: each costs a little, and a few are enough.
  static constexpr int kMaxCalls = 12;

  World& world_;
  KnownIds ids_;
  Client clients_[kStreams];
  int calls_ = 0;
  std::vector<std::unique_ptr<FuzzTransport>> ended_;  // of earlier calls, still checked
};

}  // namespace
}  // namespace streamd::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  streamd::fuzz::MakeModel();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace streamd::fuzz;
  const streamd::EngineStats before = g_model->engine->Stats();
  STREAMD_FUZZ_CHECK(before.sessions == 0 && before.blocks_used == 0, "the engine is not empty");
  // On the heap: whatever still reaches it after the input (an event sink of one of its
  // streams) is a heap-use-after-free ASan reports, not a stale stack frame.
  auto world = std::make_unique<World>(*g_model->engine);
  Driver(*world).Run(data, size);
  return 0;
}
