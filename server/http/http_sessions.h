// HttpSessions: everything the HTTP front door asks of streamd's sessions (and of who owns them:
// the caller's key), and nothing more. The server and its handlers see only this header; one
// adapter (http_sessions_adapter.cc) implements it over the server's authenticator and the
// engine's session API (engine/api/session_api.h): a thin layer that adds the caller's key,
// the request metrics and the HTTP layer's metadata key.
//
// Threads: every call may block the calling HTTP worker thread (an Open waiting for KV blocks, a
// Resume waiting for its session to be read back from disk). No call blocks the engine: the
// generation's callbacks run on the engine's scheduler thread and must only queue and return.
//
// A Session is attached to the one request that holds it (a second request naming the same
// session gets FAILED_PRECONDITION); destroying it detaches the session (resumable by id) unless
// Close() was called.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/util/status.h"

namespace streamd::api {
class Engine;
}
namespace streamd::server {
class Authenticator;
}
namespace streamd::metrics {
struct StreamdMetrics;
}

namespace streamd::http {

// Who calls (from the API key); sessions belong to a tenant, and only admins see others'.
struct HttpCaller {
  std::string tenant;  // "" without keys
  bool admin = true;
  bool authenticated = false;  // a key named it: its quotas apply
  // Who is on the other end ("peer 127.0.0.1"), for the per-client cap on detached sessions.
  std::string client;
};

enum class TurnRole { kSystem, kUser, kAssistant };

struct GenerateParams {
  int32_t max_tokens = 0;  // 0: the server's default
  std::vector<std::string> stop;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<float> presence_penalty;
  std::optional<float> frequency_penalty;
  std::optional<uint64_t> seed;
  std::string request_id;
};

enum class DoneReason { kStop, kLength, kCancelled, kError };

// The end of a generation.
struct GenerationEnd {
  DoneReason reason = DoneReason::kStop;
  Status status;          // non-OK with kError, or why it was cancelled by the server
  std::string tail_text;  // text held back until the end (a partial character)
  int64_t output_tokens = 0;
};

// Called on the engine's thread: must not block and must not call back into the session.
struct GenerationCallbacks {
  std::function<void(const std::string& text)> on_text;
  std::function<void(const GenerationEnd& end)> on_done;
};

class Session {
 public:
  virtual ~Session() = default;  // detaches (cancelling a running generation) unless closed

  virtual std::string id() const = 0;  // 32 lowercase hex digits
  // Tokens of context the session holds now (everything appended or generated so far).
  virtual int64_t ContextTokens() const = 0;
  // One chat turn of the model's template. Charged to the tenant's token quota.
  virtual Status Append(TurnRole role, const std::string& text) = 0;
  // Starts a generation (the assistant's turn); `callbacks` report its text and its end.
  // RESOURCE_EXHAUSTED for the tenant's generation or token quotas.
  virtual Status Generate(const GenerateParams& params, GenerationCallbacks callbacks) = 0;
  // Ends the running generation (its on_done says kCancelled); no-op when none runs.
  virtual void Cancel() = 0;
  // Closes the session for good (its snapshot deleted).
  virtual Status Close() = 0;
  // A small string kept with the session's context (in its snapshot: it survives restarts and
  // moves). Empty when never written.
  virtual std::string Metadata() = 0;
  virtual Status SetMetadata(const std::string& value) = 0;
};

class HttpSessions {
 public:
  virtual ~HttpSessions() = default;
  // Who calls, from the `authorization` header's value (null: none): the daemon's API keys.
  // UNAUTHENTICATED saying what is wrong (never which keys exist); without keys every caller is
  // the anonymous admin. `client` is not filled in.
  virtual StatusOr<HttpCaller> Authenticate(const std::string* authorization) const = 0;
  // A new session of the caller's tenant, with the server's session defaults. Waits for KV
  // blocks up to sessions.admission_timeout. RESOURCE_EXHAUSTED names a quota or the pool.
  virtual StatusOr<std::unique_ptr<Session>> Open(const HttpCaller& caller) = 0;
  // Session `id` of the caller's tenant (NOT_FOUND otherwise, as for a missing one),
  // attached to the caller; read back from disk first when it was offloaded.
  virtual StatusOr<std::unique_ptr<Session>> Resume(const HttpCaller& caller,
                                                    const std::string& id) = 0;
  // UNAVAILABLE while shutting down or when the backend cannot run; OK otherwise.
  virtual Status Serving() const = 0;
  virtual std::string ModelName() const = 0;
};

// What the adapter drives; everything must outlive it.
struct ServerSessionsDeps {
  api::Engine& engine;
  const server::Authenticator* auth = nullptr;  // null: every caller the anonymous admin
  metrics::StreamdMetrics* metrics = nullptr;   // optional: request metrics
  // How long Open and Resume wait for the engine's answer (sessions.admission_timeout and
  // sessions.resume_wait; a slack is added).
  std::chrono::milliseconds open_wait{0};
  std::chrono::milliseconds resume_wait{0};
};

// The adapter over the engine's session API (http_sessions_adapter.cc).
std::unique_ptr<HttpSessions> MakeServerSessions(const ServerSessionsDeps& deps);

}  // namespace streamd::http
