#include "server/streamd_service.h"

#include <algorithm>
#include <utility>

#include "server/api_convert.h"
#include "server/grpc_status.h"
#include "server/refused_reactor.h"
#include "server/session_reactor.h"
#include "server/snapshot_transfer.h"

namespace streamd::server {
namespace {

void Count(const ServiceContext& ctx, metrics::RequestKind kind) {
  if (ctx.metrics != nullptr) ctx.metrics->RecordRequest(kind);
}

// A unary call answered at once.
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, const Status& status,
                                 metrics::StreamdMetrics* metrics) {
  if (metrics != nullptr && !status.ok()) metrics->RecordError(static_cast<int>(status.code()));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// "session_id: ..." for the unary calls' errors about their one field (a malformed id names it
// already).
Status NamingSessionId(const Status& s) {
  if (s.ok() || s.message().rfind("session_id", 0) == 0) return s;
  return Status(s.code(), "session_id: " + s.message());
}

}  // namespace

StatusOr<Caller> StreamdService::CallerOf(const grpc::CallbackServerContext& context) const {
  if (ctx_.auth == nullptr) return Caller{};
  return ctx_.auth->Authenticate(context);
}

std::string ClientOf(const grpc::CallbackServerContext& context) {
  // "ipv4:127.0.0.1:41234", "ipv6:[::1]:41234", "unix:/run/streamd.sock": one client per
  // address, whatever port each of its connections comes from.
  std::string peer = context.peer();
  if (peer.rfind("ipv4:", 0) == 0 || peer.rfind("ipv6:", 0) == 0) {
    const size_t colon = peer.rfind(':');
    if (colon != std::string::npos && colon > 5) peer.resize(colon);
    peer.erase(0, 5);
  }
  return "peer " + peer;
}

StreamdService::StreamdService(ServiceContext& ctx) : ctx_(ctx) {
  if (ctx_.options.transport.open_timeout.count() > 0) {
    watchdog_ = std::thread([this] { WatchdogLoop(); });
  }
}

StreamdService::~StreamdService() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  streams_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void StreamdService::WatchdogLoop() {
  // Checks a few times per timeout: a stream ends between 1 and 1.25 timeouts after it started.
  const auto period =
      std::clamp<std::chrono::milliseconds>(ctx_.options.transport.open_timeout / 4,
                                            std::chrono::milliseconds(10), std::chrono::seconds(1));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    streams_cv_.wait_for(lock, period, [&] { return stopping_; });
    if (stopping_) return;
    lock.unlock();
    const Clock::time_point now = Clock::now();
    for (const auto& stream : Streams()) stream->EndIfUnbound(now);
    lock.lock();
  }
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StreamdService::Session(
    grpc::CallbackServerContext* context) {
  StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) {
    return Refuse<grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>>(caller.status(),
                                                                               ctx_.metrics);
  }
  // The per-client caps count a tenant's sessions together; without keys, a peer's.
  std::string client = caller->authenticated ? "tenant " + caller->tenant : ClientOf(*context);
  auto* reactor =
      new SessionReactor(context, ctx_, ToApiCaller(ctx_.auth, *caller, std::move(client)),
                         [this](SessionStream* stream) {
                           {
                             std::lock_guard<std::mutex> lock(mu_);
                             streams_.erase(stream);
                           }
                           streams_cv_.notify_all();
                         });
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams_.emplace(reactor->stream().get(), reactor->stream());
  }
  reactor->Start();
  // A stream that arrives while draining is told at once (it can still be served: the server
  // stops accepting calls only after the drain).
  if (ctx_.draining()) reactor->stream()->Drain();
  return reactor;
}

grpc::ServerUnaryReactor* StreamdService::GetModelInfo(grpc::CallbackServerContext* context,
                                                       const v1::GetModelInfoRequest*,
                                                       v1::ModelInfo* response) {
  Count(ctx_, metrics::RequestKind::kGetModelInfo);
  if (auto caller = CallerOf(*context); !caller.ok()) {
    return Answer(context, caller.status(), ctx_.metrics);
  }
  *response = ToProto(ctx_.api->model());
  return Answer(context, OkStatus(), ctx_.metrics);
}

grpc::ServerUnaryReactor* StreamdService::ListSessions(grpc::CallbackServerContext* context,
                                                       const v1::ListSessionsRequest*,
                                                       v1::ListSessionsResponse* response) {
  Count(ctx_, metrics::RequestKind::kListSessions);
  StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return Answer(context, caller.status(), ctx_.metrics);
  for (const api::SessionInfo& s : ctx_.api->ListSessions(ToApiCaller(ctx_.auth, *caller))) {
    *response->add_sessions() = ToProto(s);
  }
  return Answer(context, OkStatus(), ctx_.metrics);
}

grpc::ServerUnaryReactor* StreamdService::GetSession(grpc::CallbackServerContext* context,
                                                     const v1::GetSessionRequest* request,
                                                     v1::SessionInfo* response) {
  Count(ctx_, metrics::RequestKind::kGetSession);
  StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return Answer(context, caller.status(), ctx_.metrics);
  // A malformed id is INVALID_ARGUMENT; a well-formed one that names no session NOT_FOUND, as
  // does another tenant's.
  auto info = ctx_.api->GetSession(ToApiCaller(ctx_.auth, *caller), request->session_id());
  if (info.ok()) *response = ToProto(*info);
  return Answer(context, NamingSessionId(info.status()), ctx_.metrics);
}

grpc::ServerUnaryReactor* StreamdService::CloseSession(grpc::CallbackServerContext* context,
                                                       const v1::CloseSessionRequest* request,
                                                       v1::CloseSessionResponse*) {
  Count(ctx_, metrics::RequestKind::kCloseSession);
  StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) return Answer(context, caller.status(), ctx_.metrics);
  const Status closed =
      ctx_.api->CloseSession(ToApiCaller(ctx_.auth, *caller), request->session_id(),
                             CancelledError("closed by CloseSession"));
  return Answer(context, NamingSessionId(closed), ctx_.metrics);
}

grpc::ServerWriteReactor<v1::SnapshotChunk>* StreamdService::ExportSession(
    grpc::CallbackServerContext* context, const v1::ExportSessionRequest* request) {
  Count(ctx_, metrics::RequestKind::kExportSession);
  StatusOr<Caller> caller = CallerOf(*context);
  if (!caller.ok()) {
    return Refuse<grpc::ServerWriteReactor<v1::SnapshotChunk>>(caller.status(), ctx_.metrics);
  }
  return StartExport(ctx_, *request, *std::move(caller));
}

grpc::ServerReadReactor<v1::SnapshotChunk>* StreamdService::ImportSession(
    grpc::CallbackServerContext* context, v1::ImportSessionResponse* response) {
  Count(ctx_, metrics::RequestKind::kImportSession);
  StatusOr<Caller> caller = CallerOf(*context);
  Status allowed = caller.status();
  // An import creates a session of whatever tenant its snapshot names: admins only.
  if (caller.ok() && ctx_.auth != nullptr) {
    allowed = ctx_.auth->RequireAdmin(*caller, "ImportSession");
  }
  if (!allowed.ok()) {
    return Refuse<grpc::ServerReadReactor<v1::SnapshotChunk>>(allowed, ctx_.metrics);
  }
  return StartImport(ctx_, response);
}

std::vector<std::shared_ptr<SessionStream>> StreamdService::Streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<SessionStream>> out;
  for (const auto& [raw, weak] : streams_) {
    if (auto s = weak.lock()) out.push_back(std::move(s));
  }
  return out;
}

void StreamdService::Drain() {
  if (ctx_.api != nullptr) ctx_.api->Drain();  // the one flag: the engine refuses new sessions too
  for (const auto& stream : Streams()) stream->Drain();
}

void StreamdService::CancelGenerations(const Status& why) {
  for (const auto& stream : Streams()) stream->CancelGeneration(why);
}

bool StreamdService::WaitForStreams(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return streams_cv_.wait_until(lock, deadline, [&] { return streams_.empty(); });
}

size_t StreamdService::live_streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_.size();
}

}  // namespace streamd::server
