#include "server/metrics/snapshot_metrics.h"

#include <string>
#include <vector>

namespace streamd::metrics {
namespace {

template <size_t N>
std::vector<double> Bounds(const std::array<double, N>& buckets) {
  return std::vector<double>(buckets.begin(), buckets.end());
}

CounterFamily& WithReasons(CounterFamily& family, std::initializer_list<const char*> reasons) {
  for (const char* r : reasons) family.WithLabels({r});  // every reason exported from 0
  return family;
}

}  // namespace

SnapshotMetrics::SnapshotMetrics(Registry& registry)
    : writes(registry
                 .AddCounter("streamd_snapshot_writes_total",
                             "Session snapshots written to the snapshot directory (atomically "
                             "replaced and fsynced).")
                 .Get()),
      written_bytes(registry
                        .AddCounter("streamd_snapshot_written_bytes_total",
                                    "Bytes of the session snapshots written.")
                        .Get()),
      write_bytes(registry
                      .AddHistogram("streamd_snapshot_bytes",
                                    "Size of each session snapshot written, in bytes.",
                                    Bounds(kSnapshotBytesBuckets))
                      .Get()),
      write_seconds(registry
                        .AddHistogram("streamd_snapshot_write_seconds",
                                      "Capture, encoding, write and fsync of one session "
                                      "snapshot, in seconds.",
                                      Bounds(kSnapshotSecondsBuckets))
                        .Get()),
      write_errors(WithReasons(
          registry.AddCounter("streamd_snapshot_write_errors_total",
                              "Session snapshots that could not be written (the session keeps "
                              "serving from memory), by reason (a gRPC code name).",
                              {"reason"}),
          {"RESOURCE_EXHAUSTED", "PERMISSION_DENIED", "INTERNAL"})),
      loads(registry
                .AddCounter("streamd_snapshot_loads_total",
                            "Session snapshots read back into the engine (start-up restore, "
                            "Resume of an offloaded session, import).")
                .Get()),
      load_seconds(registry
                       .AddHistogram("streamd_snapshot_load_seconds",
                                     "Read, check and restore of one session snapshot, in "
                                     "seconds.",
                                     Bounds(kSnapshotSecondsBuckets))
                       .Get()),
      rejected(WithReasons(
          registry.AddCounter("streamd_snapshots_rejected_total",
                              "Snapshot files refused and moved into rejected/ (never deleted), "
                              "by reason (a gRPC code name).",
                              {"reason"}),
          {"DATA_LOSS", "FAILED_PRECONDITION", "INVALID_ARGUMENT"})),
      offloads(registry
                   .AddCounter("streamd_session_offloads_total",
                               "Detached sessions written out and their KV blocks freed "
                               "(idle for sessions.offload_after, or to make room).")
                   .Get()),
      sessions_offloaded(registry
                             .AddGauge("streamd_sessions_offloaded",
                                       "Sessions that are only on disk now (their next Resume "
                                       "reads them back).")
                             .Get()) {}

}  // namespace streamd::metrics
