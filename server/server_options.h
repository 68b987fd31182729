// ServerOptions: what `streamd serve` needs to run the gRPC service, independent of where the
// values come from (config/streamd.yaml through server/config, flags, tests). Defaults here are
// the documented defaults of the config keys of the same names.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "engine/api/engine_host.h"

namespace streamd::server {

// Per-request limits; every violation is answered with an Error naming the field and limit.
struct ServerLimits {
  int32_t max_tokens = 4096;            // Generate.max_tokens upper bound
  int32_t default_max_tokens = 256;     // Generate.max_tokens when absent
  int32_t max_append_bytes = 1 << 20;   // Append.text
  int32_t max_append_tokens = 1 << 16;  // Append.tokens
  int32_t max_message_bytes = 4 << 20;  // any received message (gRPC enforces it)
  int32_t max_request_id_bytes = 128;   // Generate.request_id, Cancel.request_id
  // Undelivered tokens per stream before its generation is cancelled as too slow.
  int32_t max_queued_tokens = 1024;
  // A session with no stream attached is closed for good (its snapshot deleted) after this
  // long; 0 = never.
  std::chrono::milliseconds idle_timeout{std::chrono::hours(24 * 7)};
  // The largest snapshot ImportSession takes.
  int64_t max_snapshot_bytes = int64_t{1} << 30;
  // ExportSession and ImportSession calls in flight at once; beyond, RESOURCE_EXHAUSTED. Each
  // holds a whole snapshot in memory (an import up to max_snapshot_bytes) until it ends, so
  // this bounds what they can take: max_transfers * max_snapshot_bytes.
  int32_t max_transfers = 4;
  // Opens waiting for KV blocks at once; beyond, an Open is refused (RESOURCE_EXHAUSTED).
  int32_t max_waiting_opens = 1024;
  // The share of the KV pool one client's resident detached sessions may reserve
  // (RegistryOptions::max_detached_share).
  double max_detached_share = 0.5;
};

// What one client connection may hold (gRPC channel arguments and resource quota): the
// transport's defence against clients that misbehave or vanish.
struct TransportOptions {
  int32_t max_streams_per_connection = 100;  // concurrent streams (HTTP/2 SETTINGS)
  // A stream that has no session this long after it started (or after its last failed Open or
  // Resume) is ended; 0 = never.
  std::chrono::milliseconds open_timeout{std::chrono::seconds(10)};
  // A connection without streams for this long is closed (GOAWAY); 0 = never.
  std::chrono::milliseconds max_connection_idle{std::chrono::minutes(10)};
  // A connection older than this is asked to reconnect (GOAWAY; its streams may finish within
  // max_connection_age_grace); 0 = never. Off by default: sessions stream for days.
  std::chrono::milliseconds max_connection_age{0};
  std::chrono::milliseconds max_connection_age_grace{std::chrono::minutes(5)};
  // A client that has not completed its (TLS and HTTP/2) handshake this long is dropped.
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
  // Memory gRPC may use for buffers of all connections (grpc::ResourceQuota); beyond, reads
  // wait and new connections are refused.
  int64_t memory_limit_bytes = int64_t{1} << 30;
  // Keepalive pings a client may send with no data in flight, at least this far apart; more
  // count as strikes, and after max_ping_strikes the connection is closed (GOAWAY
  // ENHANCE_YOUR_CALM).
  std::chrono::milliseconds min_ping_interval{std::chrono::seconds(10)};
  int32_t max_ping_strikes = 2;
};

// Sessions on disk (docs/SESSIONS.md): empty snapshot_dir = memory only.
struct PersistenceOptions {
  std::string snapshot_dir;
  std::chrono::milliseconds snapshot_interval{2000};  // at most one write per session per this
  // A detached session leaves memory after this long: to disk with a snapshot_dir, closed
  // without; 0 = never.
  std::chrono::milliseconds offload_after{std::chrono::minutes(10)};
  // A Resume that meets its session's offload or load in flight waits at most this long for
  // it, then is answered UNAVAILABLE with a retry hint (its session intact).
  std::chrono::milliseconds resume_wait{std::chrono::seconds(10)};
  bool restore_on_start = true;  // read every snapshot back into memory at start, while it fits
  // Shutdown: how long writing every changed session may take after the streams ended (the
  // deployments' stop timeouts include it: deploy/check.py).
  std::chrono::milliseconds flush_timeout{std::chrono::seconds(10)};
};

// TLS on the gRPC port (docs/SECURITY.md). No cert_file = plaintext. The files are watched:
// gRPC's certificate provider reads them again every reload_interval, and new handshakes use
// what it read; established connections keep the keys they negotiated.
struct TlsOptions {
  std::string cert_file;       // PEM: the server's certificate chain, leaf first
  std::string key_file;        // PEM: its private key, unencrypted
  std::string client_ca_file;  // PEM: CAs of client certificates; set = mTLS (required)
  std::chrono::seconds reload_interval{60};  // gRPC's file watcher counts whole seconds
  bool enabled() const { return !cert_file.empty(); }
  bool mutual() const { return enabled() && !client_ca_file.empty(); }
};

// Who may call. API keys (auth.keys_file) come later and are checked by CheckListenSecurity
// too (server/listen_security.h).
struct AuthOptions {
  // API keys (server/config/api_keys_file.h): set = every call needs a key, which names its
  // tenant and role; empty = no keys (every caller is the one anonymous admin).
  std::string keys_file;
  // Serve a non-loopback address with no client authentication at all (no mTLS, no keys):
  // anyone who reaches the port may list, resume and close every session.
  bool allow_insecure = false;
  // Health (grpc.health.v1) and reflection (grpc.reflection.v1alpha) need a key too; false
  // (the default) leaves them open to callers without one (key_gate.h). Need keys_file.
  bool health_requires_key = false;
  bool reflection_requires_key = false;
};

struct ServerOptions {
  std::string listen_address = "127.0.0.1:50051";  // host:port; port 0 picks a free port
  std::string port_file;  // when set, the bound port is written there (tests use port 0)
  TlsOptions tls;
  AuthOptions auth;
  ServerLimits limits;
  int32_t max_send_message_bytes = 4 << 20;
  api::SessionDefaults session_defaults;  // Open without fields: mode, sinks, window, sampling
  PersistenceOptions persistence;
  TransportOptions transport;
  // Shutdown: how long running generations may continue before they are cancelled.
  std::chrono::milliseconds grace_period{std::chrono::seconds(30)};
};

// What the engine host takes of these options: session defaults, residency, snapshots.
inline api::HostOptions HostOptionsOf(const ServerOptions& o) {
  const PersistenceOptions& p = o.persistence;
  return {o.session_defaults,
          o.limits.default_max_tokens,
          o.limits.idle_timeout,
          o.limits.max_detached_share,
          o.limits.max_waiting_opens,
          p.snapshot_dir,
          p.snapshot_interval,
          p.offload_after,
          p.resume_wait,
          p.restore_on_start};
}

}  // namespace streamd::server
