#include "engine/core/kv_pools.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace streamd {
namespace {

Status CheckHeadroom(const BlockPool& pool, int32_t headroom, const char* which) {
  if (headroom < pool.total_blocks()) return OkStatus();
  return ResourceExhaustedError(std::string("the ") + which + " of " +
                                std::to_string(pool.total_blocks()) +
                                " blocks cannot hold its prefill headroom of " +
                                std::to_string(headroom) + " blocks and any session");
}

}  // namespace

StatusOr<std::unique_ptr<KvPools>> KvPools::Create(ModelBackend& model,
                                                   const EngineConfig& config) {
  std::unique_ptr<KvPools> pools(new KvPools());
  pools->headroom_ = config.prefill_headroom_blocks;
  const KvShape shape = model.CacheShape();
  LayerSplit split = config.local_layer_caches ? model.LocalLayerSplit() : LayerSplit{};
  const int32_t b = config.block_size, span = model.config().sliding_window;
  const CacheSpec spec = SessionCache::Effective(
      {config.default_mode, config.default_sinks, config.default_window, config.max_chunk},
      model.config().context_length);
  const int32_t main_bound = SessionCache::BoundBlocks(spec, b);
  const int32_t local_bound = SessionCache::BoundBlocks(SessionCache::LocalSpec(spec, span), b);
  // Two pools pay when the default session's local layers keep less than its window (W > N):
  // with a window under the span they would hold as much as in one pool, and a budget split
  // between two pools admits fewer of them (each pool's headroom, and the fixed shares).
  if (local_bound >= main_bound) split = LayerSplit{};
  if (split.empty()) {
    STREAMD_ASSIGN_OR_RETURN(pools->main_,
                             model.CreatePool(shape, config.block_size, config.pool_bytes));
    STREAMD_RETURN_IF_ERROR(CheckHeadroom(*pools->main_, pools->headroom_, "KV pool"));
    return pools;
  }
  // The local layers' pool and the others': the budget shared so that both hold as many
  // sessions of the default shape, after the headroom each keeps.
  KvShape main_shape = shape, local_shape = shape;
  main_shape.n_layers = split.n_main;
  local_shape.n_layers = split.n_local;
  const double main_bytes = static_cast<double>(BlockPool::BlockBytes(main_shape, b));
  const double local_bytes = static_cast<double>(BlockPool::BlockBytes(local_shape, b));
  const double main_session = main_bound * main_bytes;
  const double local_session = local_bound * local_bytes;
  const double sessions = std::max(0.0, static_cast<double>(config.pool_bytes) -
                                            pools->headroom_ * (main_bytes + local_bytes)) /
                          (main_session + local_session);
  // Whole blocks for the main pool, rounded up (a budget made for n sessions gets exactly n
  // sessions' blocks in each pool); the local pool takes the rest.
  const auto main_blocks =
      static_cast<int64_t>(pools->headroom_ + std::ceil(sessions * main_bound - 1e-6));
  const int64_t main_budget =
      std::min(config.pool_bytes, main_blocks * BlockPool::BlockBytes(main_shape, b));
  STREAMD_ASSIGN_OR_RETURN(pools->main_, model.CreatePool(main_shape, b, main_budget));
  STREAMD_ASSIGN_OR_RETURN(pools->local_,
                           model.CreatePool(local_shape, b, config.pool_bytes - main_budget));
  STREAMD_RETURN_IF_ERROR(CheckHeadroom(*pools->main_, pools->headroom_, "KV pool"));
  STREAMD_RETURN_IF_ERROR(CheckHeadroom(*pools->local_, pools->headroom_, "local layers' KV pool"));
  pools->local_layers_ = {pools->local_.get(), span,
                          std::make_shared<const LayerSplit>(std::move(split))};
  return pools;
}

KvPools::Blocks KvPools::BoundOf(const CacheSpec& spec) const {
  const int32_t b = main_->block_size();
  Blocks need{SessionCache::BoundBlocks(spec, b), 0};
  if (local_ != nullptr) {
    need.local = SessionCache::BoundBlocks(SessionCache::LocalSpec(spec, local_layers_.span), b);
  }
  return need;
}

bool KvPools::Fits(Blocks need) const {
  if (reserved_.main + need.main + headroom_ > main_->total_blocks()) return false;
  return local_ == nullptr || reserved_.local + need.local + headroom_ <= local_->total_blocks();
}

void KvPools::Reserve(Blocks need) {
  reserved_.main += need.main;
  reserved_.local += need.local;
}

void KvPools::Release(Blocks need) {
  reserved_.main -= need.main;
  reserved_.local -= need.local;
}

std::string KvPools::WhyNot(Blocks need) const {
  const auto pool = [&](const char* which, int32_t blocks, int32_t reserved, int32_t total) {
    return std::string(which) + " needs up to " + std::to_string(blocks) + " blocks, " +
           std::to_string(reserved) + " of " + std::to_string(total) +
           " are reserved by open sessions and " + std::to_string(headroom_) +
           " by the prefill headroom";
  };
  if (local_ != nullptr && reserved_.main + need.main + headroom_ <= main_->total_blocks()) {
    return pool("its local layers' cache", need.local, reserved_.local, local_->total_blocks());
  }
  return pool("it", need.main, reserved_.main, main_->total_blocks());
}

StatusOr<std::unique_ptr<SessionCache>> KvPools::NewCache(const CacheSpec& spec,
                                                          int32_t model_context) const {
  return SessionCache::Create(main_.get(), spec, model_context, local_layers_);
}

KvPools::Blocks KvPools::total() const {
  return {main_->total_blocks(), local_ != nullptr ? local_->total_blocks() : 0};
}

KvPools::Blocks KvPools::used() const {
  return {main_->used_blocks(), local_ != nullptr ? local_->used_blocks() : 0};
}

}  // namespace streamd
