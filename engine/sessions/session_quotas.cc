#include "engine/sessions/session_quotas.h"

#include <string>

namespace streamd {

Status CheckOpenQuota(const SessionRegistry& registry, const EngineConfig& engine,
                      int32_t context_length, const SessionOptions& options, const SessionQuotas& q,
                      std::string_view what) {
  if (options.tenant.empty()) return OkStatus();
  if (q.max_sessions <= 0 && q.max_kv_blocks <= 0) return OkStatus();
  const std::string& tenant = options.tenant;
  const SessionRegistry::Usage used = registry.UsageOf(tenant);
  if (q.max_sessions > 0 && used.sessions >= q.max_sessions) {
    return ResourceExhaustedError(
        std::string(what) + ": tenant " + tenant + " holds " + std::to_string(used.sessions) +
        " sessions, its quota max_sessions = " + std::to_string(q.max_sessions) +
        " (auth.keys_file); close sessions it no longer needs");
  }
  if (q.max_kv_blocks > 0) {
    // What admission would reserve for this session (its bound), as the engine computes it.
    const CacheSpec spec = SessionCache::Effective(
        {options.mode, options.sinks, options.window, engine.max_chunk}, context_length);
    const int64_t need = SessionCache::BoundBlocks(spec, engine.block_size);
    if (used.blocks + need > q.max_kv_blocks) {
      return ResourceExhaustedError(
          std::string(what) + ": tenant " + tenant + " reserves " + std::to_string(used.blocks) +
          " KV blocks and this session needs " + std::to_string(need) +
          ", over its quota max_kv_blocks = " + std::to_string(q.max_kv_blocks) +
          " (auth.keys_file); close sessions, or open smaller windows");
    }
  }
  return OkStatus();
}

Status CheckGenerationQuota(const SessionRegistry& registry, const std::string& tenant,
                            const SessionQuotas& q) {
  if (q.max_generations <= 0) return OkStatus();
  const int32_t running = registry.UsageOf(tenant).generating;
  if (running < q.max_generations) return OkStatus();
  return ResourceExhaustedError(
      "generate: tenant " + tenant + " runs " + std::to_string(running) +
      " generations, its quota max_generations = " + std::to_string(q.max_generations) +
      " (auth.keys_file); retry when one ends");
}

}  // namespace streamd
