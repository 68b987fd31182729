#include "server/grpc_server.h"

#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

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

}  // namespace

GrpcServer::GrpcServer(api::EngineHost& host, const ServerOptions& options)
    : host_(host), options_(options), ctx_{io_tasks_, options_}, service_(ctx_) {}

StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(api::EngineHost& host,
                                                        const ServerOptions& options,
                                                        metrics::StreamdMetrics* metrics) {
  auto auth = Authenticator::Create(options.auth.keys_file, AuthFailureCounter(metrics));
  if (!auth.ok()) return auth.status();
  std::unique_ptr<GrpcServer> s(new GrpcServer(host, options));
  s->auth_ = std::move(auth).value();
  const Authenticator* keys = s->auth_.get();
  // The model's facts, as the engine's session API reports them (Opened, GetModelInfo).
  const api::ModelInfo& model = host.sessions().model();
  s->ctx_.model = {model.vocab_size, model.context_length};
  s->ctx_.model_info = ToProto(model);
  s->ctx_.auth = keys;
  s->ctx_.metrics = metrics;
  s->ctx_.api = &host.sessions();
  std::function<api::TenantLimits(const std::string&)> limits;
  if (keys->enabled()) limits = [keys](const std::string& t) { return keys->LimitsOf(t); };
  host.SetTenantLimits(std::move(limits), [keys](const Status& q) { keys->LogQuotaRefusal(q); });
  if (metrics != nullptr) AddTenantScrapeHooks(*metrics, host, *keys);
  LogHostNotes(host.Start());
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
  s->health_ = std::make_unique<HealthMonitor>(*s->health_service_, host.sessions(), metrics,
                                               kHealthInterval);
  if (metrics != nullptr) {
    // A scrape reads health as it is at that moment, not as of the last tick.
    metrics->AddScrapeHook([health = s->health_.get()] { health->Check(); });
  }
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
  if (!host_.PersistAll(Clock::now() + options_.persistence.flush_timeout)) {
    spdlog::error("shutdown: not every session snapshot was written within {} ms",
                  options_.persistence.flush_timeout.count());
  }
  health_service_->Shutdown();  // Watch streams end now rather than at the deadline below
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
}

}  // namespace streamd::server
