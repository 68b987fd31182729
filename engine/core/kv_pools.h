// KvPools: the engine's KV pools and what admission has reserved in them. Every model has the
// main pool; a model whose local layers may keep caches of their own (ModelBackend::
// LocalLayerSplit, session_cache.h "Local layers") also has the local layers' pool, and its
// other layers alone are in the main one. A session's bound is reserved in each pool it uses,
// and each pool keeps the same prefill headroom (a chunk borrows at most that many blocks of
// either: CacheGeometry::HeadroomForChunk). Not thread-safe: the engine's lock guards it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/cache/block_pool.h"
#include "engine/cache/session_cache.h"
#include "engine/core/engine_types.h"
#include "engine/model/model_backend.h"
#include "engine/util/status.h"

namespace streamd {

class KvPools {
 public:
  // Blocks of each pool (local is 0 without a local layers' pool).
  struct Blocks {
    int32_t main = 0;
    int32_t local = 0;
  };

  // The pools for `model` within config.pool_bytes (resolved), with config's block size and
  // prefill headroom (resolved). With local layers the budget is shared so that both pools
  // hold as many sessions of the default shape (EngineConfig::default_*); errors name the pool
  // that cannot hold its headroom and a session.
  static StatusOr<std::unique_ptr<KvPools>> Create(ModelBackend& model, const EngineConfig& config);

  // What a session of this effective spec reserves, and what a cache reserves.
  Blocks BoundOf(const CacheSpec& spec) const;
  static Blocks BoundOf(const SessionCache& cache) {
    return {cache.bound_blocks(), cache.local() != nullptr ? cache.local()->bound_blocks() : 0};
  }
  bool Fits(Blocks need) const;
  void Reserve(Blocks need);
  void Release(Blocks need);
  // Why `need` does not fit now, for an error after `what` ("the KV pool cannot admit ...").
  std::string WhyNot(Blocks need) const;

  // A fresh cache over these pools.
  StatusOr<std::unique_ptr<SessionCache>> NewCache(const CacheSpec& spec,
                                                   int32_t model_context) const;

  BlockPool& main() const { return *main_; }
  BlockPool* local() const { return local_.get(); }
  Blocks total() const;
  Blocks used() const;
  Blocks reserved() const { return reserved_; }
  int32_t headroom() const { return headroom_; }

 private:
  KvPools() = default;

  std::unique_ptr<BlockPool> main_;
  std::unique_ptr<BlockPool> local_;  // the local layers', or null
  LocalLayers local_layers_;          // how caches use local_
  Blocks reserved_;                   // admitted sessions' bounds
  int32_t headroom_ = 0;              // the prefill headroom, in each pool
};

}  // namespace streamd
