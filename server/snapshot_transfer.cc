#include "server/snapshot_transfer.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/grpc_status.h"
#include "server/proto_convert.h"

namespace streamd::server {
namespace {

// The cache state an offloaded session reports: what its snapshot holds, counted as the engine
// counts a resident one (SessionCache::tokens_cached), with no blocks held.
v1::CacheState StoredCacheState(const SnapshotSummary& s) {
  v1::CacheState c;
  const int64_t sinks = std::min<int64_t>(s.tokens_seen, s.sinks);
  const int64_t cached = sinks + std::min<int64_t>(s.tokens_seen - sinks, s.window);
  c.set_tokens_seen(s.tokens_seen + s.pending_tokens);
  c.set_tokens_cached(cached);
  c.set_tokens_evicted(s.tokens_seen - cached);
  c.set_pending_tokens(s.pending_tokens);
  c.set_blocks_held(0);
  return c;
}

// One of the limits.max_transfers places for an export or import, held from the call's start
// until its answer is decided (End lets go of the place and of the snapshot bytes before it
// finishes the call, so a client that has its answer can count on the place being free). A
// call that finds none is refused at once: waiting would hold its bytes, or a gRPC thread, all
// the same.
class TransferSlot {
 public:
  TransferSlot(ServiceContext& ctx, std::string_view what) : ctx_(ctx) {
    const int32_t limit = ctx.options.limits.max_transfers;
    int32_t n = ctx.transfers.load();
    while (n < limit && !ctx.transfers.compare_exchange_weak(n, n + 1)) {
    }
    if (n >= limit) {
      refused_ = ResourceExhaustedError(
          std::string(what) + ": " + std::to_string(n) +
          " snapshot transfers are in flight, the most sessions.max_transfers = " +
          std::to_string(limit) + " allows; retry once one has ended");
    }
  }
  ~TransferSlot() { Release(); }
  TransferSlot(const TransferSlot&) = delete;
  TransferSlot& operator=(const TransferSlot&) = delete;
  // OK when the call got a place.
  const Status& status() const { return refused_; }
  void Release() {
    if (refused_.ok() && !released_) ctx_.transfers.fetch_sub(1);
    released_ = true;
  }

 private:
  ServiceContext& ctx_;
  Status refused_;
  bool released_ = false;
};

void Count(const ServiceContext& ctx, const Status& status) {
  if (ctx.metrics != nullptr && !status.ok()) {
    ctx.metrics->RecordError(static_cast<int>(status.code()));
  }
}

// The reactor lives until OnDone, which gRPC calls only after Finish: the io task that makes
// the snapshot runs before Finish is ever called, so `this` outlives it.
class ExportReactor final : public grpc::ServerWriteReactor<v1::SnapshotChunk> {
 public:
  ExportReactor(ServiceContext& ctx, const v1::ExportSessionRequest& request, Caller caller)
      : ctx_(ctx), caller_(std::move(caller)), slot_(ctx, "export") {
    if (!slot_.status().ok()) {
      End(slot_.status());
      return;
    }
    auto id = SessionId::Parse(request.session_id(), "session_id");
    if (!id.ok()) {
      End(id.status());
      return;
    }
    ctx_.io.Post([this, id = *id] { Make(id); });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return End(CancelledError("export: the client stopped reading"));
    WriteNext();
  }
  void OnDone() override { delete this; }

 private:
  void Make(SessionId id) {
    StatusOr<std::vector<uint8_t>> bytes = Snapshot(id);
    if (!bytes.ok()) {
      const Status& s = bytes.status();
      const bool named = s.message().rfind("session_id", 0) == 0;
      return End(named ? s : Status(s.code(), "session_id: " + s.message()));
    }
    bytes_ = std::move(bytes).value();
    WriteNext();
  }

  StatusOr<std::vector<uint8_t>> Snapshot(SessionId id) {
    const std::optional<std::string> tenant = TenantOf(ctx_, id);
    if (!tenant || !caller_.CanSee(*tenant)) return SessionNotFound(id, ctx_.registry.options());
    std::shared_ptr<SessionRecord> s = ctx_.registry.Find(id);
    if (ctx_.registry.persister() != nullptr) {
      if (s == nullptr && !ctx_.registry.persister()->Summary(id).ok()) {
        return SessionNotFound(id, ctx_.registry.options());
      }
      return ctx_.registry.persister()->Export(id);
    }
    if (s == nullptr) return SessionNotFound(id, ctx_.registry.options());
    if (ctx_.snapshots == nullptr) {
      return UnimplementedError("export: this daemon cannot make snapshots");
    }
    STREAMD_ASSIGN_OR_RETURN(const SessionState state, ctx_.engine.Capture(id));
    return EncodeSnapshot(state, *ctx_.snapshots);
  }

  void WriteNext() {
    if (at_ >= bytes_.size()) return End(OkStatus());
    const size_t n = std::min(kSnapshotChunkBytes, bytes_.size() - at_);
    chunk_.set_data(bytes_.data() + at_, n);
    at_ += n;
    StartWrite(&chunk_);
  }

  void End(const Status& status) {
    Count(ctx_, status);
    std::vector<uint8_t>().swap(bytes_);
    slot_.Release();
    Finish(ToGrpcStatus(status));
  }

  ServiceContext& ctx_;
  const Caller caller_;
  TransferSlot slot_;
  std::vector<uint8_t> bytes_;
  size_t at_ = 0;
  v1::SnapshotChunk chunk_;
};

class ImportReactor final : public grpc::ServerReadReactor<v1::SnapshotChunk> {
 public:
  ImportReactor(ServiceContext& ctx, v1::ImportSessionResponse* response)
      : ctx_(ctx), response_(response), slot_(ctx, "import") {
    if (!slot_.status().ok()) {
      End(slot_.status());
      return;
    }
    StartRead(&chunk_);
  }

  void OnReadDone(bool ok) override {
    if (ok) {
      const int64_t limit = ctx_.options.limits.max_snapshot_bytes;
      if (static_cast<int64_t>(bytes_.size() + chunk_.data().size()) > limit) {
        return End(InvalidArgumentError("import: the snapshot is over limits.max_snapshot_bytes "
                                        "= " + std::to_string(limit) + " bytes"));
      }
      bytes_.insert(bytes_.end(), chunk_.data().begin(), chunk_.data().end());
      StartRead(&chunk_);
      return;
    }
    // The client is done writing (or gone; then Finish below is a no-op for it).
    ctx_.io.Post([this] { End(Import()); });
  }
  void OnDone() override { delete this; }

 private:
  Status Import() {
    if (bytes_.empty()) return InvalidArgumentError("import: no snapshot bytes were sent");
    SessionPersister* persister = ctx_.registry.persister();
    if (persister != nullptr) {
      STREAMD_ASSIGN_OR_RETURN(const SessionPersister::Imported imported,
                               persister->Import(bytes_));
      ctx_.registry.AdoptImported(imported.summary, imported.restored.metadata,
                                  imported.restored.last_token, imported.resident);
      response_->set_resident(imported.resident);
      return FillSessionInfo(ctx_, imported.summary.id, response_->mutable_session());
    }
    if (ctx_.snapshots == nullptr) {
      return UnimplementedError("import: this daemon cannot read snapshots");
    }
    STREAMD_ASSIGN_OR_RETURN(const SessionState state, DecodeSnapshot(bytes_, *ctx_.snapshots));
    STREAMD_ASSIGN_OR_RETURN(const SnapshotSummary summary, ReadSnapshotSummary(bytes_));
    if (ctx_.registry.Find(state.id) != nullptr) {
      return AlreadyExistsError("import: session " + state.id.ToString() + " already exists here");
    }
    STREAMD_RETURN_IF_ERROR(ctx_.engine.Restore(state));
    const int32_t last = !state.pending.empty()         ? state.pending.back()
                         : !state.cached_tokens.empty() ? state.cached_tokens.back()
                                                        : -1;
    ctx_.registry.AdoptImported(summary, state.metadata, last, /*resident=*/true);
    response_->set_resident(true);
    return FillSessionInfo(ctx_, state.id, response_->mutable_session());
  }

  void End(const Status& status) {
    Count(ctx_, status);
    std::vector<uint8_t>().swap(bytes_);
    slot_.Release();
    Finish(ToGrpcStatus(status));
  }

  ServiceContext& ctx_;
  v1::ImportSessionResponse* response_;
  TransferSlot slot_;
  v1::SnapshotChunk chunk_;
  std::vector<uint8_t> bytes_;
};

}  // namespace

Status FillSessionInfo(const ServiceContext& ctx, SessionId id, v1::SessionInfo* out) {
  std::shared_ptr<SessionRecord> s = ctx.registry.Find(id);
  if (s == nullptr) return SessionNotFound(id, ctx.registry.options());
  Residency residency;
  SnapshotSummary stored;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    residency = s->residency;
    stored = s->stored;
  }
  out->set_session_id(id.ToString());
  *out->mutable_settings() = ToSettings(s->spec, s->options.sampling, s->max_blocks);
  // Resident, or on its way out (its engine copy is whole until the offload frees it): the
  // engine's counters. On disk or on its way in: its snapshot's.
  StatusOr<SessionInfo> info = NotFoundError("");
  if (residency == Residency::kResident || residency == Residency::kOffloading) {
    info = ctx.engine.Get(id);
    if (!info.ok() && residency == Residency::kResident) return info.status();
  }
  if (info.ok()) {
    *out->mutable_cache() = ToCacheState(*info);
    out->set_generating(info->generating);
  } else {
    if (residency == Residency::kOffloading) {  // freed meanwhile: its snapshot is complete
      if (auto summary = ctx.registry.persister()->Summary(id); summary.ok()) stored = *summary;
    }
    *out->mutable_cache() = StoredCacheState(stored);
    out->set_offloaded(true);
  }
  std::lock_guard<std::mutex> lock(s->mu);
  out->set_attached(s->attached);
  out->set_idle_s(
      s->attached ? 0.0 : std::chrono::duration<double>(Clock::now() - s->detached_at).count());
  return OkStatus();
}

grpc::ServerWriteReactor<v1::SnapshotChunk>* StartExport(ServiceContext& ctx,
                                                         const v1::ExportSessionRequest& request,
                                                         Caller caller) {
  return new ExportReactor(ctx, request, std::move(caller));
}

std::optional<std::string> TenantOf(const ServiceContext& ctx, SessionId id) {
  if (std::shared_ptr<SessionRecord> s = ctx.registry.Find(id)) return s->options.tenant;
  if (SessionPersister* p = ctx.registry.persister(); p != nullptr) {
    if (auto summary = p->Summary(id); summary.ok() && summary->id == id) return summary->tenant;
  }
  return std::nullopt;
}

grpc::ServerReadReactor<v1::SnapshotChunk>* StartImport(ServiceContext& ctx,
                                                        v1::ImportSessionResponse* response) {
  return new ImportReactor(ctx, response);
}

}  // namespace streamd::server
