// LoadEngineHost (engine/api/engine_host.h): LoadEngine (load_engine.h) and the session host over
// what it loaded.
#include "engine/api/engine_host.h"

#include <memory>
#include <string>
#include <utility>

#include "engine/cache/session_cache.h"
#include "engine/host/load_engine.h"
#include "engine/sessions/session_api_convert.h"
#include "engine/sessions/session_host.h"
#include "engine/sessions/session_service.h"

namespace streamd::api {

namespace {

// What the log says about a local layers' pool (KvPools), or "" without one.
std::string LocalLayersNote(const streamd::Engine& engine) {
  const streamd::EngineStats st = engine.Stats();
  if (st.local_blocks_total == 0) return "";
  const int64_t block = engine.config().block_size;
  const auto mib = [](int64_t bytes) { return std::to_string((bytes + (1 << 19)) >> 20); };
  return "the model's local layers keep their last " +
         std::to_string(engine.model().config().sliding_window) +
         " tokens in a KV pool of their own: " +
         mib(st.local_blocks_total * block * st.local_bytes_per_token) + " MiB beside " +
         mib(st.blocks_total * block * st.bytes_per_token) + " MiB for the other layers";
}

}  // namespace

StatusOr<std::unique_ptr<EngineHost>> LoadEngineHost(const HostSetup& setup) {
  EngineSetup es;
  es.model_path = setup.model_path;
  es.plan_path = setup.plan_path;
  es.k_quant_activation_bits = setup.k_quant_activation_bits;
  es.backend = setup.backend;
  es.engine = ToEngineConfig(setup.engine, setup.hooks);
  const SessionDefaults& defaults = setup.options.session_defaults;
  es.engine.default_mode = FromApiCacheMode(defaults.mode);
  es.engine.default_sinks = defaults.sinks;
  es.engine.default_window = defaults.window;
  es.streamd_version = setup.streamd_version;
  auto loaded = LoadEngine(es);
  if (!loaded.ok()) return loaded.status();
  // The host keeps what was loaded, and destroys it after its session parts.
  auto owned = std::make_shared<LoadedEngine>(std::move(loaded).value());
  SessionHostParts parts{*owned->engine, *owned->chat, &owned->snapshot_context, owned, {}};
  const auto note = [&](HostNote::Level level, const std::string& prefix, const std::string& s) {
    if (!s.empty()) parts.notes.push_back({level, prefix + s});
  };
  note(HostNote::Level::kInfo, "model.plan ", owned->plan_note);
  note(HostNote::Level::kWarning, "", owned->plan_warning);
  note(HostNote::Level::kInfo, "engine.backend ", owned->backend_note);
  note(HostNote::Level::kWarning, "chat template: ", owned->chat_warning);
  note(HostNote::Level::kWarning, "", owned->fault_injection);
  note(HostNote::Level::kInfo, "engine.local_layer_caches: ", LocalLayersNote(*owned->engine));
  return MakeSessionHost(std::move(parts), setup.options, setup.hooks);
}

StatusOr<CacheMode> ParseCacheMode(std::string_view name) {
  auto mode = streamd::ParseCacheMode(name);
  if (!mode.ok()) return mode.status();
  return ToApiCacheMode(*mode);
}

size_t MaxStopStrings() { return kMaxStopStrings; }
size_t MaxStopBytes() { return kMaxStopBytes; }

}  // namespace streamd::api
