// SessionState: everything one session is, as a plain, backend-neutral value. It is what a
// snapshot holds and what restore, idle offload, export/import (and later fork) start from.
// Engine::Capture reads it out of a live session; Engine::Restore writes it back into any pool,
// any block numbering and any backend (CPU or CUDA): K/V travel in cache order, not in blocks.
//
// A state is captured between generations only (a running generation is finished or cancelled
// first), so it carries no sampler, detokenizer or stop-string state: those belong to one
// generation (each Generate builds its sampler from the session's defaults and its own
// overrides; the detokenizer and the stop matcher are flushed when it ends). What a session
// keeps across generations is all here.
//
// Invariants (checked by the snapshot reader and by Engine::Restore):
//   cached_tokens and kv hold exactly the keys the session's next query reads from its cache
//   (SessionCache::CachedSpanAt(tokens_seen), in cache order): the sinks, text positions
//   0 .. min(tokens_seen, sinks) - 1, then the window max(sinks, tokens_seen - window + 1) ..
//   tokens_seen - 1 (a dense cache keeps 0 .. tokens_seen - 1);
//   kv.n_tokens == cached_tokens.size();
//   keys are stored rotated by their text position (docs/ARCHITECTURE.md, "Positions from the
//   cache"), so a restored cache needs no re-rotation whatever its block size.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/cache/kv_image.h"
#include "engine/cache/session_cache.h"
#include "engine/sampling/sampling_params.h"
#include "engine/util/session_id.h"

namespace streamd {

struct SessionState {
  SessionId id;
  std::string tenant;  // who owns it: an opaque label to the engine ("" = no tenant)
  // The effective cache spec (mode rules applied; max_chunk is the engine's, not the session's).
  CacheMode mode = CacheMode::kSink;
  int32_t sinks = 0;
  int32_t window = 0;
  SamplingParams sampling;  // defaults of the session's generations

  int64_t tokens_seen = 0;             // tokens that entered the cache, ever
  std::vector<int32_t> cached_tokens;  // ids of the cached tokens, in cache order
  std::vector<int32_t> pending;        // context not yet in the cache (an idle session keeps
                                       // its last token here, for the next Generate's logits)
  KvImage kv;  // in its pool's dtype: f16, or int8 with the scales it was quantized with

  // The server's per-session facts (chat-template state, ...), opaque to the engine.
  std::map<std::string, std::string> metadata;
  uint64_t revision = 0;        // bumped by every change of the context or metadata
  int64_t created_unix_ms = 0;  // when the session was opened
  int64_t saved_unix_ms = 0;    // when this state was captured

  bool operator==(const SessionState&) const = default;
};

}  // namespace streamd
