#include "server/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <chrono>
#include <thread>

namespace streamd::server {
namespace {

constexpr char kServiceName[] = "streamd.v1.Streamd";
// After the grace period: how long cancelled generations get to report and streams to end.
constexpr std::chrono::seconds kCancelGrace{5};

}  // namespace

v1::ModelInfo MakeModelInfo(const Engine& engine, const ChatFormatter& chat) {
  const LlamaConfig& c = engine.model().config();
  const tokenizer::Tokenizer& t = engine.tokenizer();
  v1::ModelInfo info;
  info.set_name(c.name);
  info.set_architecture(c.architecture);
  info.set_vocab_size(t.vocab_size());
  info.set_context_length(c.context_length);
  info.set_chat_template(std::string(chat.template_name()));
  for (int32_t id : t.end_of_generation_ids()) info.add_end_of_generation_ids(id);
  info.set_bos_id(t.bos_id());
  info.set_add_bos(t.add_bos());
  return info;
}

GrpcServer::GrpcServer(Engine& engine, const tokenizer::ChatTemplate& chat,
                       const ServerOptions& options)
    : options_(options),
      registry_(engine, options.limits.idle_timeout),
      chat_(chat, engine.tokenizer()),
      ctx_{engine, registry_, chat_, tasks_, options_},
      service_(ctx_) {
  ctx_.model = {engine.tokenizer().vocab_size(), engine.model().config().context_length};
  ctx_.model_info = MakeModelInfo(engine, chat_);
}

StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(Engine& engine,
                                                        const tokenizer::ChatTemplate& chat,
                                                        const ServerOptions& options,
                                                        metrics::StreamdMetrics* metrics) {
  std::unique_ptr<GrpcServer> s(new GrpcServer(engine, chat, options));
  s->ctx_.metrics = metrics;
  if (metrics != nullptr) s->registry_.set_on_close([metrics] { metrics->sessions_closed.Inc(); });
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, grpc::InsecureServerCredentials(), &s->port_);
  builder.RegisterService(&s->service_);
  builder.SetMaxReceiveMessageSize(options.limits.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_send_message_bytes);
  // Streams live for hours: keepalive pings find peers that vanished without a FIN.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20'000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10'000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    if (s->server_ != nullptr) s->server_->Shutdown();
    s->shut_down_ = true;
    return UnavailableError("server.listen_address: cannot listen on \"" + options.listen_address +
                            "\" (in use, or not a host:port this machine has)");
  }
  grpc::HealthCheckServiceInterface* health = s->server_->GetHealthCheckService();
  health->SetServingStatus(true);
  health->SetServingStatus(kServiceName, true);
  s->registry_.StartReaper();
  return s;
}

GrpcServer::~GrpcServer() { Shutdown(); }

void GrpcServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  server_->GetHealthCheckService()->SetServingStatus(false);
  service_.Drain();
  if (!service_.WaitForStreams(Clock::now() + options_.grace_period)) {
    const auto seconds = std::chrono::duration<double>(options_.grace_period).count();
    service_.CancelGenerations(
        UnavailableError("cancelled: streamd is shutting down and the grace period of " +
                         std::to_string(seconds).substr(0, std::to_string(seconds).find('.') + 2) +
                         " s has passed"));
    service_.WaitForStreams(Clock::now() + kCancelGrace);
  }
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
}

}  // namespace streamd::server
