#include "server/grpc_server.h"

#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

#include "engine/sessions/session_quotas.h"
#include "engine/sessions/session_storage.h"
#include "server/api_convert.h"
#include "server/metrics_wiring.h"
#include "server/tls_credentials.h"

namespace streamd::server {
namespace {

// How often health (liveness, readiness) is re-read: a kubelet probes every few seconds.
constexpr std::chrono::milliseconds kHealthInterval{500};
// After the grace period: how long cancelled generations get to report and streams to end.
constexpr std::chrono::seconds kCancelGrace{5};

// What one connection may hold and how long it may hang around (docs/SECURITY.md, "The
// transport"): enforced by gRPC itself, before any of our code runs.
void ApplyTransportLimits(const TransportOptions& t, grpc::ServerBuilder* builder) {
  const auto ms = [](std::chrono::milliseconds d) {
    return static_cast<int>(std::min<int64_t>(d.count(), std::numeric_limits<int>::max()));
  };
  // Streams live for hours: keepalive pings find peers that vanished without a FIN.
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60'000);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20'000);
  // A client's own pings: at most one per min_ping_interval without data; each one closer is
  // a strike, and a client past max_ping_strikes is sent GOAWAY (ping floods cost us CPU).
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                              ms(t.min_ping_interval));
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, t.max_ping_strikes);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, t.max_streams_per_connection);
  builder->AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, ms(t.handshake_timeout));
  if (t.max_connection_idle.count() > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, ms(t.max_connection_idle));
  }
  if (t.max_connection_age.count() > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, ms(t.max_connection_age));
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                                ms(t.max_connection_age_grace));
  }
  grpc::ResourceQuota quota("streamd");
  quota.Resize(static_cast<size_t>(t.memory_limit_bytes));
  builder->SetResourceQuota(quota);
}

// What the start found in the flat layout of snapshot_dir (before per-model directories).
void LogModelDirMigration(const std::string& root, const SnapshotContext& model,
                          const ModelDirMigration& m) {
  spdlog::info(
      "sessions.snapshot_dir {}: the snapshots of model \"{}\" (fingerprint {}) are in "
      "{}",
      root, model.model_name, model.model_fingerprint, m.dir);
  if (m.moved > 0 || m.superseded > 0) {
    spdlog::info(
        "sessions.snapshot_dir {}: moved {} snapshots of this model from the flat layout "
        "into {}{}",
        root, m.moved, m.dir,
        m.superseded > 0
            ? ", and " + std::to_string(m.superseded) + " older copies into its rejected/"
            : std::string());
  }
  if (m.other_models > 0) {
    spdlog::info(
        "sessions.snapshot_dir {}: {} snapshots of other models in the flat layout left "
        "untouched (their daemons move them into their own directories)",
        root, m.other_models);
  }
  for (const std::string& f : m.unreadable) {
    spdlog::warn(
        "sessions.snapshot_dir {}: flat file {} left untouched, its header cannot be "
        "read",
        root, f);
  }
  for (const std::string& f : m.failed) {
    spdlog::error("sessions.snapshot_dir {}: {} not moved into {}; it stays where it is", root, f,
                  m.dir);
  }
}

}  // namespace

GrpcServer::GrpcServer(Engine& engine, const tokenizer::ChatTemplate& chat,
                       const ServerOptions& options,
                       std::unique_ptr<metrics::SnapshotMetrics> snapshot_metrics,
                       std::unique_ptr<SessionPersister> persister)
    : options_(options),
      snapshot_metrics_(std::move(snapshot_metrics)),
      persister_(std::move(persister)),
      registry_(engine,
                RegistryOptions{options.limits.idle_timeout,
                                options.persistence.offload_after,
                                options.persistence.resume_wait,
                                options.limits.max_detached_share,
                                {}},
                persister_.get()),
      chat_(chat, engine.tokenizer()),
      driver_(engine, registry_, chat_, tasks_),
      ctx_{io_tasks_, options_},
      admission_(registry_, options.limits.max_waiting_opens),
      service_(ctx_) {}

StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(Engine& engine,
                                                        const tokenizer::ChatTemplate& chat,
                                                        const ServerOptions& options,
                                                        metrics::StreamdMetrics* metrics,
                                                        const SnapshotContext* snapshots) {
  std::unique_ptr<metrics::SnapshotMetrics> snapshot_metrics;
  std::unique_ptr<SessionPersister> persister;
  const PersistenceOptions& p = options.persistence;
  if (!p.snapshot_dir.empty()) {
    if (snapshots == nullptr) {
      return InvalidArgumentError(
          "sessions.snapshot_dir is set but the engine gave no snapshot "
          "context");
    }
    if (metrics != nullptr) {
      snapshot_metrics = std::make_unique<metrics::SnapshotMetrics>(*metrics->registry);
    }
    // One directory per model under snapshot_dir: models sharing it never touch each other's
    // sessions (engine/sessions/session_storage.h).
    ModelDirMigration migration;
    auto opened =
        OpenSessionStorage(engine, p.snapshot_dir, *snapshots,
                           PersisterOptions{p.snapshot_interval, std::chrono::milliseconds(1000)},
                           MakePersisterHooks(snapshot_metrics.get()), &migration);
    if (!opened.ok()) {
      return Status(opened.status().code(), "sessions.snapshot_dir: " + opened.status().message());
    }
    LogModelDirMigration(p.snapshot_dir, *snapshots, migration);
    persister = std::move(opened).value();
  }
  auto auth = Authenticator::Create(options.auth.keys_file, AuthFailureCounter(metrics));
  if (!auth.ok()) return auth.status();
  std::unique_ptr<GrpcServer> s(
      new GrpcServer(engine, chat, options, std::move(snapshot_metrics), std::move(persister)));
  s->auth_ = std::move(auth).value();
  // The model's facts, as the engine's session API reports them (Opened, GetModelInfo).
  const api::ModelInfo model = ModelInfoOf(engine, s->chat_);
  s->ctx_.model = {model.vocab_size, model.context_length};
  s->ctx_.model_info = ToProto(model);
  if (s->auth_->enabled()) {
    const Authenticator* keys = s->auth_.get();
    const SessionRegistry* registry = &s->registry_;
    const int32_t context_length = s->ctx_.model.context_length;
    s->admission_.set_check([keys, registry, &engine, context_length](const SessionOptions& o) {
      Status q = CheckOpenQuota(*registry, engine.config(), context_length, o,
                                SessionQuotasOf(keys->LimitsOf(o.tenant)));
      if (!q.ok()) keys->LogQuotaRefusal(q);
      return q;
    });
  }
  s->ctx_.auth = s->auth_.get();
  s->ctx_.metrics = metrics;
  if (snapshots != nullptr) s->snapshots_ = *snapshots;
  {
    SessionServiceParts parts{engine,   s->registry_, s->driver_,      s->admission_,
                              s->chat_, s->budget_,   s->ctx_.draining};
    if (s->snapshots_) parts.snapshots = &*s->snapshots_;
    parts.session_defaults = options.session_defaults;
    parts.default_max_tokens = options.limits.default_max_tokens;
    parts.on_quota_refusal = [keys = s->auth_.get()](const Status& q) { keys->LogQuotaRefusal(q); };
    s->api_ = MakeSessionService(std::move(parts));
    s->ctx_.api = s->api_.get();
  }
  metrics::SnapshotMetrics* sm = s->snapshot_metrics_.get();
  // A closed or offloaded session freed blocks: the oldest waiting Open may fit now.
  AdmissionQueue* admission = &s->admission_;
  s->registry_.set_hooks(MakeRegistryHooks(metrics, sm, admission));
  if (metrics != nullptr) {
    AddScrapeHooks(*metrics, engine, s->registry_, s->admission_, sm, *s->auth_);
  }
  if (s->persister_ != nullptr) {
    // Before the port opens, so that listings show them; Resume finds a snapshot by its id
    // anyway, loaded or not.
    const int32_t found = s->registry_.RestoreFromStore(p.restore_on_start);
    spdlog::info("sessions.snapshot_dir {}: {} session snapshots found{}",
                 s->persister_->store().dir(), found,
                 found > 0 && p.restore_on_start ? ", restoring them in the background" : "");
  }
  // Health and reflection: open, or closed to callers without a key (key_gate.h).
  const auto gate = [&](bool requires_key) {
    return requires_key ? KeyGate(s->auth_.get(), metrics) : KeyGate();
  };
  s->health_service_ = std::make_unique<HealthService>(gate(options.auth.health_requires_key));
  s->reflection_ = std::make_unique<ReflectionService>(
      std::vector<std::string>{v1::Streamd::service_full_name(),
                               grpc::health::v1::Health::service_full_name(),
                               grpc::reflection::v1alpha::ServerReflection::service_full_name()},
      gate(options.auth.reflection_requires_key));
  // Plaintext, TLS or mTLS (server/tls_credentials.h); unusable files fail the start here.
  auto credentials = MakeServerCredentials(options.tls);
  if (!credentials.ok()) {
    s->shut_down_ = true;
    return credentials.status();
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, *credentials, &s->port_);
  builder.RegisterService(&s->service_);
  builder.RegisterService(s->health_service_.get());
  builder.RegisterService(s->reflection_.get());
  builder.SetMaxReceiveMessageSize(options.limits.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_send_message_bytes);
  ApplyTransportLimits(options.transport, &builder);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    if (s->server_ != nullptr) s->server_->Shutdown();
    s->shut_down_ = true;
    return UnavailableError("server.listen_address: cannot listen on \"" + options.listen_address +
                            "\" (in use, or not a host:port this machine has)");
  }
  s->health_ =
      std::make_unique<HealthMonitor>(*s->health_service_, *s->api_, metrics, kHealthInterval);
  if (metrics != nullptr) {
    // A scrape reads health as it is at that moment, not as of the last tick.
    metrics->AddScrapeHook([health = s->health_.get()] { health->Check(); });
  }
  s->registry_.StartReaper();
  return s;
}

GrpcServer::~GrpcServer() { Shutdown(); }

void GrpcServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  health_->Stop();  // every health service NOT_SERVING: no new streams are routed here
  service_.Drain();
  if (!service_.WaitForStreams(Clock::now() + options_.grace_period)) {
    const auto seconds = std::chrono::duration<double>(options_.grace_period).count();
    service_.CancelGenerations(
        UnavailableError("cancelled: streamd is shutting down and the grace period of " +
                         std::to_string(seconds).substr(0, std::to_string(seconds).find('.') + 2) +
                         " s has passed"));
    service_.WaitForStreams(Clock::now() + kCancelGrace);
  }
  // Every stream has ended (their sessions detached and queued for writing): write whatever
  // changed, before the process goes.
  if (persister_ != nullptr &&
      !registry_.PersistAll(Clock::now() + options_.persistence.flush_timeout)) {
    spdlog::error("shutdown: not every session snapshot was written within {} ms",
                  options_.persistence.flush_timeout.count());
  }
  health_service_->Shutdown();  // Watch streams end now rather than at the deadline below
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
}

}  // namespace streamd::server
