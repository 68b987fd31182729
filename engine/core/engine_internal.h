// The engine's private types, shared by its two source files: engine.cc (sessions, the step
// loop) and engine_state.cc (a session's state read out and written back). Nothing outside
// engine/core includes this.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/engine.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/stop_string_matcher.h"
#include "engine/tokenizer/incremental_detokenizer.h"

namespace streamd {

using Clock = std::chrono::steady_clock;

inline int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Engine::Generation {
  GenerateOptions options;
  EventSink sink;
  Sampler sampler;
  tokenizer::IncrementalDetokenizer detok;
  StopStringMatcher stops;
  int64_t prompt_tokens = 0;  // pending input when the generation started
  int64_t produced = 0;
  Clock::time_point start, first_token;
};

// The session's last generation, for Truncate: its tokens are the tail of the context until
// anything else is appended.
struct LastGeneration {
  std::string request_id;
  int64_t produced = 0;     // its tokens in the context (an end-of-generation token included)
  int64_t context_end = 0;  // the context's length when it ended
};

// The input of the last Append marked partial: it is the context from `start` on until the next
// Append replaces it (Engine::Append).
struct PartialInput {
  std::vector<int32_t> tokens;
  int64_t start = 0;
};

struct Engine::Session {
  SessionId id;
  uint64_t key = 0;         // the planner's name for it
  uint32_t tenant_key = 0;  // the planner's name for its tenant (AddTenantSession)
  SessionOptions options;
  std::unique_ptr<SessionCache> cache;
  // Context not yet in the cache. An idle session keeps its last context token back here, so
  // that a generation can start from its logits.
  std::vector<int32_t> pending;
  std::unique_ptr<Generation> gen;
  std::map<std::string, std::string> metadata;  // the caller's (SetMetadata)
  std::optional<LastGeneration> last_gen;
  std::optional<PartialInput> partial;
  int64_t context_length() const {
    return cache->tokens_seen() + static_cast<int64_t>(pending.size());
  }
  // Bumped by every change of the state (prefill commits too); context_revision is the
  // revision of the last change of the context itself (input, tokens, metadata): a snapshot
  // taken since then still describes the session, only with more of it pending.
  uint64_t revision = 0;
  uint64_t context_revision = 0;
  int64_t created_unix_ms = 0;
  bool in_flight = false;  // part of the step being computed
  bool copying = false;    // its K/V are being copied (Capture, Restore): it sits out steps
  bool closing = false;
};

struct Engine::StepChunk {
  Session* session;
  int32_t n_tokens;
  // The chunk ends its session's pending input while a generation runs: its logits row is
  // sampled after the step (checked again then: a cancel may land while the step runs).
  bool Samples() const {
    return session->gen && !session->closing &&
           session->pending.size() == static_cast<size_t>(n_tokens);
  }
  // Its generation ended while the step ran and the chunk was the whole context left: its last
  // token is given back (it stays pending, so the next Generate has logits to start from).
  bool GivesBackLast() const {
    return !session->gen && session->pending.size() == static_cast<size_t>(n_tokens);
  }
};

}  // namespace streamd
