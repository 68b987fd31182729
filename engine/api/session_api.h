// The engine's session API as a transport sees it: plain values in, plain values out, and two
// interfaces (api::Engine, api::Session). A transport (server/: gRPC, HTTP) converts its wire
// messages into these values and the answers back; it never sees a cache, a pool, a backend, a
// snapshot or the registry behind them. The implementation lives in engine/sessions
// (session_service.h); this header includes only the standard library and Status.
//
// Who calls is the transport's business (API keys -> Caller), but what a caller may hold is the
// engine's: every call that opens, appends or generates takes the Caller, and the engine counts
// its sessions, generations, KV blocks and tokens against Caller::limits.
//
// Threads: every call may come from any thread except a GenerationObserver's (the scheduler's).
// No call blocks on the scheduler: Open, Resume, Append, Truncate and Fork answer through a
// callback (at once, or later on an engine thread) when they may have to wait.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/util/status.h"

namespace streamd::api {

// What one tenant may hold at once (0 = unlimited); counted by the engine.
struct TenantLimits {
  int32_t max_sessions = 0;
  int32_t max_generations = 0;
  int32_t max_kv_blocks = 0;      // reserved by its resident sessions' bounds
  int32_t tokens_per_second = 0;  // prefill + decode, a token bucket
};

// Who a call is for.
struct Caller {
  std::string tenant;    // owns the sessions it opens; "" without authentication
  bool admin = true;     // sees and acts on every tenant's sessions
  bool metered = false;  // `limits` apply (a key named the tenant)
  TenantLimits limits;
  // Who is on the other end, for the per-client cap on detached sessions ("peer 10.0.0.7",
  // "tenant acme"); empty: none.
  std::string client;
};

enum class CacheMode { kDense, kWindow, kSink };

struct Sampling {
  float temperature = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t penalty_last_n = 64;
  uint64_t seed = 0;  // 0: from std::random_device
};

// Fields a request sets over the session's defaults (absent: the default stays).
struct SamplingOverrides {
  std::optional<float> temperature;
  std::optional<int32_t> top_k;
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<float> presence_penalty;
  std::optional<float> frequency_penalty;
  std::optional<int32_t> penalty_last_n;
  std::optional<uint64_t> seed;
  bool any() const {
    return temperature || top_k || top_p || min_p || repetition_penalty || presence_penalty ||
           frequency_penalty || penalty_last_n || seed;
  }
};

inline Sampling WithOverrides(Sampling s, const SamplingOverrides& o) {
  if (o.temperature) s.temperature = *o.temperature;
  if (o.top_k) s.top_k = *o.top_k;
  if (o.top_p) s.top_p = *o.top_p;
  if (o.min_p) s.min_p = *o.min_p;
  if (o.repetition_penalty) s.repetition_penalty = *o.repetition_penalty;
  if (o.presence_penalty) s.presence_penalty = *o.presence_penalty;
  if (o.frequency_penalty) s.frequency_penalty = *o.frequency_penalty;
  if (o.penalty_last_n) s.penalty_last_n = *o.penalty_last_n;
  if (o.seed) s.seed = *o.seed;
  return s;
}

// The engine's checks of request values, for a transport that names its own fields: each
// message starts with the value's name ("top_p = 1.5 is out of range (0, 1]", "stop[2] is
// empty"), the transport prefixes its path.
Status ValidateSampling(const Sampling& s, int32_t vocab_size);
Status ValidateStopStrings(const std::vector<std::string>& stop);
// The byte offset of the first invalid UTF-8 sequence in `text`, npos when it is valid.
size_t FindInvalidUtf8(std::string_view text);

// The daemon's defaults for what an Open leaves absent (the config's sessions.*).
struct SessionDefaults {
  CacheMode mode = CacheMode::kSink;
  int32_t sinks = 4;
  int32_t window = 1020;
  Sampling sampling;
  // How long an Open waits for KV blocks when the pool cannot hold it yet; 0: refused at once.
  std::chrono::milliseconds admission_timeout{0};
};

// A new session: what is absent comes from the daemon's session defaults.
struct OpenOptions {
  std::optional<CacheMode> mode;
  std::optional<int32_t> sinks;
  std::optional<int32_t> window;
  SamplingOverrides sampling;  // the session's generation defaults
};

enum class Role { kSystem, kUser, kAssistant };

// One Append: a chat turn of the model's template, raw text, or tokens.
struct AppendInput {
  enum class Kind { kTurn, kText, kTokens };
  Kind kind = Kind::kText;
  Role role = Role::kUser;      // kTurn
  std::string text;             // kTurn, kText: UTF-8
  bool parse_special = false;   // kText: special-token text becomes special tokens
  std::vector<int32_t> tokens;  // kTokens
  // Speculative input (an interim transcript): the next Append replaces it.
  bool partial = false;
};

struct GenerateRequest {
  int32_t max_tokens = 0;  // 0: the daemon's default
  std::vector<std::string> stop;
  SamplingOverrides sampling;  // over the session's defaults, for this generation only
  std::string request_id;      // echoed in every event
};

enum class FinishReason { kLength, kStop, kEndOfGeneration, kCancelled, kError };

struct TokenEvent {
  std::string request_id;
  int32_t token = -1;
  std::string text;   // the UTF-8 text it completes (may be empty)
  int64_t index = 0;  // 0-based in its generation
};

struct Usage {
  int64_t input_tokens = 0;  // input prefilled for this generation
  int64_t output_tokens = 0;
  double time_to_first_token_s = 0;
  double total_s = 0;
};

struct GenerationEnd {
  std::string request_id;
  FinishReason reason = FinishReason::kLength;
  Status status;          // non-OK with kError, or why the engine or its caller cancelled it
  std::string tail_text;  // text held back until the end (a partial character)
  Usage usage;
};

// What a generation's caller hears. on_token and on_end run on the scheduler thread: they must
// not block or call into the engine. on_settled runs on an engine task thread once the end was
// delivered and the session's state saved (its tokens charged to the caller's budget).
struct GenerationObserver {
  std::function<void(TokenEvent&&)> on_token;
  std::function<void(GenerationEnd&&)> on_end;
  std::function<void()> on_settled;
};

// Where a session's context stands.
struct CacheState {
  int64_t tokens_seen = 0;  // every token appended or generated
  int64_t tokens_cached = 0;
  int64_t tokens_evicted = 0;
  int64_t pending_tokens = 0;
  bool generating = false;
  int32_t blocks_held = 0;
  int32_t max_blocks = 0;  // its bound
  uint64_t revision = 0;   // bumped by every change
};

struct SessionSettings {
  CacheMode mode = CacheMode::kSink;
  int32_t sinks = 0;
  int32_t window = 0;
  Sampling sampling;
  int32_t max_blocks = 0;
};

// A session as listings and GetSession describe it.
struct SessionInfo {
  std::string id;  // 32 lowercase hex digits
  std::string tenant;
  SessionSettings settings;
  // From the engine when resident; from its snapshot (no blocks held) when offloaded.
  CacheState cache;
  bool generating = false;
  bool offloaded = false;
  bool attached = false;
  double idle_s = 0;  // detached for this long
};

// What the engine enforces for a session's requests (the transport adds its own).
struct EngineLimits {
  int32_t max_sinks = 0;
  int32_t max_window = 0;  // for the session's sinks
  int32_t max_stop_strings = 0;
  int32_t max_stop_bytes = 0;
  int32_t default_max_tokens = 0;
  bool persistent = false;  // sessions survive restarts (a snapshot directory)
};

struct ModelInfo {
  std::string name;
  std::string architecture;
  int32_t vocab_size = 0;
  int32_t context_length = 0;
  std::string chat_template;
  std::vector<int32_t> end_of_generation_ids;
  int32_t bos_id = -1;
  bool add_bos = false;
};

struct ImportedSession {
  std::string id;
  bool resident = false;  // in the pool now; else on disk
};

// One attached session. Destroying it detaches the session (resumable by id), after cancelling
// a running generation, unless Close() was called or it was closed elsewhere.
class Session {
 public:
  virtual ~Session() = default;

  virtual const std::string& id() const = 0;
  virtual SessionSettings settings() const = 0;
  virtual EngineLimits limits() const = 0;
  // NOT_FOUND once it was closed.
  virtual StatusOr<CacheState> State() const = 0;
  // True once it was closed elsewhere (CloseSession, another request): its calls fail ABORTED.
  virtual bool closed_elsewhere() const = 0;

  // Appends `input` (charged to the caller's token budget). A running generation is cancelled
  // first (barge-in: its end says kCancelled) unless `input` repeats the open partial exactly.
  // `done` gets the tokens appended or why not: at once, or on an engine thread after the
  // cancelled generation's end; returns true in that case.
  using AppendDone = std::function<void(StatusOr<int64_t> appended_tokens, bool later)>;
  virtual bool Append(AppendInput input, AppendDone done) = 0;
  // Starts a generation (the template's assistant header first after a user turn). One call:
  // FAILED_PRECONDITION while one runs; RESOURCE_EXHAUSTED for the caller's quotas.
  virtual Status Generate(GenerateRequest request, GenerationObserver observer) = 0;
  // Cancels the running generation (OK when none runs); a non-empty `request_id` must name it.
  virtual Status Cancel(const std::string& request_id) = 0;
  // From a GenerationObserver: cancels the running generation with `why` in its end.
  virtual void CancelFromObserver(Status why) = 0;
  // Drops the last generation's tail after `keep_tokens`; `done` on an engine thread.
  virtual void Truncate(std::string request_id, int64_t keep_tokens,
                        std::function<void(StatusOr<CacheState>)> done) = 0;
  // A copy-on-write fork: a new detached session of the same tenant, resumable by its id.
  struct Forked {
    std::string id;
    CacheState cache;
  };
  virtual void Fork(std::function<void(StatusOr<Forked>)> done) = 0;
  // Runs `then` once no generation runs (at once when none does). Returns false, doing
  // nothing, when none runs.
  virtual bool WhenIdle(std::function<void()> then) = 0;
  // Cancels the running generation noting `why` and waits for its end (bounded). Shutdown only.
  virtual void StopGeneration(const Status& why) = 0;
  // Detaches now (after the running generation, cancelled with `why`); `written` runs once its
  // snapshot is written (at once without a snapshot directory). Later calls fail ABORTED.
  virtual void Detach(const Status& why, std::function<void()> written = {}) = 0;
  // Closes the session for good (its snapshot deleted); a running generation's end comes first.
  virtual Status Close(const Status& why) = 0;

  // Small strings kept with the context, in its snapshot (they survive restarts and moves).
  // Keys are the transport's ("http.conversation"); empty when never written.
  virtual std::string Metadata(const std::string& key) = 0;
  virtual Status SetMetadata(const std::string& key, const std::string& value) = 0;
};

// Told when the session is closed by someone else (CloseSession, another transport); on any
// thread, nothing locked. Optional.
using OnClosedElsewhere = std::function<void(const Status& why)>;
using SessionDone = std::function<void(StatusOr<std::unique_ptr<Session>>)>;

class Engine {
 public:
  virtual ~Engine() = default;

  // A new session of caller.tenant: waits for KV blocks (sessions.admission_timeout) off the
  // caller's thread; `done` runs on an engine thread, or inline for an early refusal (invalid
  // options name the field: "open.window = ..."). Keep the returned handle while the answer is
  // wanted: dropping it abandons a waiting Open (nothing is opened; `done` hears CANCELLED).
  [[nodiscard]] virtual std::shared_ptr<void> Open(const Caller& caller, const OpenOptions& options,
                                                   SessionDone done,
                                                   OnClosedElsewhere closed = {}) = 0;
  // Session `id` (32 hex digits), attached to the caller: read back from disk first when it is
  // offloaded. NOT_FOUND for another tenant's (word for word as for a missing one);
  // FAILED_PRECONDITION while another caller drives it.
  virtual void Resume(const Caller& caller, const std::string& id, SessionDone done,
                      OnClosedElsewhere closed = {}) = 0;

  // The sessions `caller` may see, resident or on disk.
  virtual std::vector<SessionInfo> ListSessions(const Caller& caller) const = 0;
  virtual StatusOr<SessionInfo> GetSession(const Caller& caller, const std::string& id) const = 0;
  // Closes a session for good; its driver (if attached) hears it through OnClosedElsewhere.
  virtual Status CloseSession(const Caller& caller, const std::string& id, const Status& why) = 0;
  // The session's snapshot as bytes (blocks: capture, encoding, file I/O).
  virtual StatusOr<std::vector<uint8_t>> ExportSession(const Caller& caller,
                                                       const std::string& id) = 0;
  // A session from snapshot bytes, with their id (blocks). Admins only: it creates a session of
  // whatever tenant the snapshot names.
  virtual StatusOr<ImportedSession> ImportSession(const Caller& caller,
                                                  const std::vector<uint8_t>& bytes) = 0;

  // UNAVAILABLE while draining or when the backend cannot run steps.
  virtual Status Serving() const = 0;
  // Liveness: the backend can run steps (non-OK once it broke: restart the process).
  virtual Status BackendHealth() const = 0;
  // Readiness: alive, no Open waits for KV blocks, and a session with the defaults fits now.
  virtual bool Ready() const = 0;
  // Shutdown began: Open, Resume and Generate answer UNAVAILABLE from now on.
  virtual void Drain() = 0;
  virtual bool draining() const = 0;
  virtual const ModelInfo& model() const = 0;
  // The limits a session with `sinks` sinks gets (Opened.limits, the transports' checks).
  virtual EngineLimits LimitsFor(int32_t sinks) const = 0;
};

}  // namespace streamd::api
