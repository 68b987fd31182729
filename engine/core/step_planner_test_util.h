// What the StepPlanner tests share: token counts of a plan, replayable seeds, cache geometries
// and a random population of sessions that changes from step to step.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <vector>

#include "engine/core/step_planner.h"

namespace streamd::planner_test {

inline int64_t Tokens(const std::vector<PlannedChunk>& plan) {
  int64_t n = 0;
  for (const PlannedChunk& c : plan) n += c.n_tokens;
  return n;
}

// A fresh seed per run (printed by each test on failure); STREAMD_PLANNER_SEED replays one.
inline uint32_t NewSeed() {
  if (const char* fixed = std::getenv("STREAMD_PLANNER_SEED")) {
    return static_cast<uint32_t>(std::strtoul(fixed, nullptr, 10));
  }
  std::random_device device;
  return device();
}

// A sink + window session's geometry with `seen` tokens committed (real headroom arithmetic).
inline CacheGeometry Geometry(int32_t window, int32_t max_chunk, int64_t seen) {
  const CacheSpec spec{CacheMode::kSink, 4, window, max_chunk};
  return {4, window, 16, SessionCache::BoundBlocks(spec, 16), seen};
}

// A random population of sessions of `tenants` tenants that changes from step to step: new
// decoders and appends of any size arrive, planned tokens are consumed, finished sessions go.
struct Population {
  std::mt19937* rng;
  int tenants = 1;
  size_t max_live = 60;
  int32_t max_chunk_limit = 300;
  std::map<uint64_t, SessionWork> live;
  uint64_t next_id = 1;

  void Arrive() {
    std::mt19937& r = *rng;
    while (r() % 3 == 0 && live.size() < max_live) {
      SessionWork w;
      w.id = next_id++;
      w.decoding = r() % 2 == 0;
      w.pending = w.decoding ? 1 : 1 + static_cast<int64_t>(r() % 3000);
      w.max_chunk = 1 + static_cast<int32_t>(r() % static_cast<uint32_t>(max_chunk_limit));
      w.cache = Geometry(16 + static_cast<int32_t>(r() % 200), w.max_chunk, r() % 50);
      w.tenant = static_cast<uint32_t>(r() % static_cast<uint32_t>(tenants)) * 7 + 3;
      live[w.id] = w;
    }
  }
  std::vector<SessionWork> Work() const {
    std::vector<SessionWork> work;
    for (const auto& [id, w] : live) work.push_back(w);
    return work;
  }
  // Served tokens leave; a decoder's generation goes on for a while (its next token is
  // pending again), and an append that is done may start a generation.
  void Consume(const std::vector<PlannedChunk>& plan) {
    std::mt19937& r = *rng;
    for (const PlannedChunk& c : plan) {
      SessionWork& w = live.at(c.id);
      w.pending -= c.n_tokens;
      w.cache.seen += c.n_tokens;
      if (w.pending > 0) continue;
      if (w.decoding ? r() % 8 != 0 : r() % 2 == 0) {
        w.decoding = true;
        w.pending = 1;
      }
    }
    std::erase_if(live, [](const auto& e) { return e.second.pending <= 0; });
  }
};

}  // namespace streamd::planner_test
