#include "server/serve_options.h"

namespace streamd::server {

api::EngineSettings ToEngineSettings(const ServerConfig& config) {
  const auto& e = config.engine;
  const auto& s = config.sessions;
  // engine.backend is resolved in serve_command.cc (engine/backends); a kv_pool fraction is
  // resolved by Engine::Create against the backend's own memory (device memory for cuda).
  api::EngineSettings out;
  out.block_size = e.block_size;
  out.pool_bytes = e.kv_pool.bytes;
  out.pool_fraction = e.kv_pool.fraction;
  out.max_batch_tokens = e.max_batch_tokens;
  out.max_batch_sessions = e.max_batch_sessions;
  out.shared_step_tokens = e.shared_step_tokens;
  out.threads = e.threads;
  out.max_chunk = e.max_chunk;
  out.max_sessions = s.max_sessions;
  out.max_sinks = s.max_sinks;
  out.max_window = s.max_window;
  out.max_pending_tokens = s.max_pending_tokens;
  out.local_layer_caches = e.local_layer_caches;
  return out;
}

StatusOr<ServerOptions> ToServerOptions(const ServerConfig& config) {
  const auto& s = config.sessions;
  ServerOptions o;
  o.listen_address = config.server.listen_address;
  o.grace_period = config.server.shutdown_grace;
  const auto& srv = config.server;
  TransportOptions& t = o.transport;
  t.max_streams_per_connection = srv.max_streams_per_connection;
  t.open_timeout = srv.open_timeout;
  t.max_connection_idle = srv.max_connection_idle;
  t.max_connection_age = srv.max_connection_age;
  t.max_connection_age_grace = srv.max_connection_age_grace;
  t.handshake_timeout = srv.handshake_timeout;
  t.memory_limit_bytes = srv.grpc_memory_limit;
  t.min_ping_interval = srv.min_ping_interval;
  t.max_ping_strikes = srv.max_ping_strikes;
  o.limits.max_waiting_opens = s.max_waiting_opens;
  o.limits.max_detached_share = s.max_detached_share;
  o.tls.cert_file = config.server.tls.cert_file;
  o.tls.key_file = config.server.tls.key_file;
  o.tls.client_ca_file = config.server.tls.client_ca_file;
  o.tls.reload_interval =
      std::chrono::duration_cast<std::chrono::seconds>(config.server.tls.reload_interval);
  o.auth.allow_insecure = config.auth.allow_insecure;
  o.auth.keys_file = config.auth.keys_file;
  o.auth.health_requires_key = config.auth.health_requires_key;
  o.auth.reflection_requires_key = config.auth.reflection_requires_key;
  o.limits.max_message_bytes = static_cast<int32_t>(config.server.max_receive_message_bytes);
  o.max_send_message_bytes = static_cast<int32_t>(config.server.max_send_message_bytes);
  o.limits.max_tokens = s.max_tokens;
  o.limits.default_max_tokens = s.default_max_tokens;
  o.limits.max_append_bytes = static_cast<int32_t>(s.max_append_bytes);
  o.limits.max_append_tokens = s.max_append_tokens;
  o.limits.max_request_id_bytes = s.max_request_id_bytes;
  o.limits.max_queued_tokens = s.max_queued_tokens;
  o.limits.idle_timeout = s.idle_timeout;
  o.limits.max_snapshot_bytes = s.max_snapshot_bytes;
  o.limits.max_transfers = s.max_transfers;
  o.persistence.snapshot_dir = s.snapshot_dir;
  o.persistence.snapshot_interval = s.snapshot_interval;
  o.persistence.offload_after = s.offload_after;
  o.persistence.resume_wait = s.resume_wait;
  o.persistence.restore_on_start = s.restore_on_start;
  auto mode = api::ParseCacheMode(s.default_mode);
  if (!mode.ok())
    return InvalidArgumentError("config: sessions.default_mode: " + mode.status().message());
  o.session_defaults.mode = *mode;
  o.session_defaults.sinks = s.default_sinks;
  o.session_defaults.window = s.default_window;
  o.session_defaults.admission_timeout = s.admission_timeout;
  api::Sampling& p = o.session_defaults.sampling;
  const auto& d = s.default_sampling;
  p.temperature = d.temperature;
  p.top_k = d.top_k;
  p.top_p = d.top_p;
  p.min_p = d.min_p;
  p.repetition_penalty = d.repetition_penalty;
  p.presence_penalty = d.presence_penalty;
  p.frequency_penalty = d.frequency_penalty;
  p.penalty_last_n = d.penalty_last_n;
  return o;
}

}  // namespace streamd::server
