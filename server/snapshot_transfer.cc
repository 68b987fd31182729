#include "server/snapshot_transfer.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/api_convert.h"
#include "server/grpc_status.h"

namespace streamd::server {
namespace {

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
    ctx_.io.Post([this, id = request.session_id()] { Make(id); });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return End(CancelledError("export: the client stopped reading"));
    WriteNext();
  }
  void OnDone() override { delete this; }

 private:
  void Make(const std::string& id) {
    StatusOr<std::vector<uint8_t>> bytes =
        ctx_.api->ExportSession(ToApiCaller(ctx_.auth, caller_), id);
    if (!bytes.ok()) {
      const Status& s = bytes.status();
      const bool named = s.message().rfind("session_id", 0) == 0;
      return End(named ? s : Status(s.code(), "session_id: " + s.message()));
    }
    bytes_ = std::move(bytes).value();
    WriteNext();
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
        return End(
            InvalidArgumentError("import: the snapshot is over limits.max_snapshot_bytes "
                                 "= " +
                                 std::to_string(limit) + " bytes"));
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
    // The service let only admins in (an import creates a session of whatever tenant its
    // snapshot names).
    const api::Caller admin;
    STREAMD_ASSIGN_OR_RETURN(const api::ImportedSession imported,
                             ctx_.api->ImportSession(admin, bytes_));
    response_->set_resident(imported.resident);
    STREAMD_ASSIGN_OR_RETURN(const api::SessionInfo info, ctx_.api->GetSession(admin, imported.id));
    *response_->mutable_session() = ToProto(info);
    return OkStatus();
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

grpc::ServerWriteReactor<v1::SnapshotChunk>* StartExport(ServiceContext& ctx,
                                                         const v1::ExportSessionRequest& request,
                                                         Caller caller) {
  return new ExportReactor(ctx, request, std::move(caller));
}

grpc::ServerReadReactor<v1::SnapshotChunk>* StartImport(ServiceContext& ctx,
                                                        v1::ImportSessionResponse* response) {
  return new ImportReactor(ctx, response);
}

}  // namespace streamd::server
