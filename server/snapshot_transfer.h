// ExportSession and ImportSession: a session's snapshot out of one daemon and into another, as a
// stream of SnapshotChunk messages (callback API). The work that blocks (capture, encoding,
// decoding, restore, file I/O) runs on the service's io TaskRunner, never in a reaction; the
// reactions only move chunks.
//
// Export: the snapshot is made whole first (api::Engine::ExportSession), then written in
// chunks of kSnapshotChunkBytes. Import: chunks are collected up to limits.max_snapshot_bytes
// (INVALID_ARGUMENT past it, before the rest is read), then handed to the engine, which creates
// the session here with the same id (ImportSessionResponse.resident says whether it is in the
// pool or on disk).
// At most limits.max_transfers exports and imports run at once (each holds a whole snapshot in
// memory); one more is refused with RESOURCE_EXHAUSTED naming the key.
#pragma once

#include <cstddef>

#include "server/service_context.h"
#include "streamd/v1/streamd.grpc.pb.h"

namespace streamd::server {

inline constexpr size_t kSnapshotChunkBytes = 1 << 20;  // well under any message size limit

// Export of a session the caller cannot see (another tenant's) is NOT_FOUND, as for one that
// does not exist.
grpc::ServerWriteReactor<v1::SnapshotChunk>* StartExport(ServiceContext& ctx,
                                                         const v1::ExportSessionRequest& request,
                                                         Caller caller);
grpc::ServerReadReactor<v1::SnapshotChunk>* StartImport(ServiceContext& ctx,
                                                        v1::ImportSessionResponse* response);

}  // namespace streamd::server
