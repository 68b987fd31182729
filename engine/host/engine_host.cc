// LoadEngineHost (engine/api/engine_host.h): LoadEngine (load_engine.h) and the session host over
// what it loaded.
#include "engine/api/engine_host.h"

#include <memory>
#include <utility>

#include "engine/cache/session_cache.h"
#include "engine/host/load_engine.h"
#include "engine/sessions/session_api_convert.h"
#include "engine/sessions/session_host.h"
#include "engine/sessions/session_service.h"

namespace streamd::api {

StatusOr<std::unique_ptr<EngineHost>> LoadEngineHost(const HostSetup& setup) {
  EngineSetup es;
  es.model_path = setup.model_path;
  es.plan_path = setup.plan_path;
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
