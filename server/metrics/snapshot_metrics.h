// SnapshotMetrics: the series of durable sessions (snapshots, offload, restore), added to the
// daemon's registry beside StreamdMetrics. No peer exposes these (no other engine can snapshot
// a session), so names and buckets are streamd's own; docs/METRICS.md lists them.
//
// Failure reasons are gRPC code names, as the store reports them: RESOURCE_EXHAUSTED (a full
// disk or quota), PERMISSION_DENIED (a read-only or forbidden directory), INTERNAL (any other
// I/O error); for rejected snapshots DATA_LOSS (corrupt, truncated) or FAILED_PRECONDITION
// (another model or format version) or INVALID_ARGUMENT (limits this daemon refuses).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <string>
#include <string_view>

namespace streamd::metrics {

// 64 KiB .. 4 GiB by powers of four: one SmolLM2 4 + 252 session is ~5.9 MB, 4 + 1020 ~24 MB.
inline constexpr std::array<double, 9> kSnapshotBytesBuckets = {
    65536.0,    262144.0,    1048576.0,    4194304.0,   16777216.0,
    67108864.0, 268435456.0, 1073741824.0, 4294967296.0};
// Capture + encode + write + fsync, or read + decode + restore: ~ms for small caches on a
// local disk, seconds for 8B-model windows on network storage.
inline constexpr std::array<double, 14> kSnapshotSecondsBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0};

struct SnapshotMetrics {
  explicit SnapshotMetrics(prometheus::Registry& registry);
  SnapshotMetrics(const SnapshotMetrics&) = delete;
  SnapshotMetrics& operator=(const SnapshotMetrics&) = delete;

  // `code_name`: one of the reasons named above (each exported from 0).
  void RecordWriteError(std::string_view code_name) {
    write_errors.Add({{"reason", std::string(code_name)}}).Increment();
  }
  void RecordRejected(std::string_view code_name) {
    rejected.Add({{"reason", std::string(code_name)}}).Increment();
  }
  // A residency transition ended (SessionRegistry, RegistryHooks::on_transition).
  void RecordTransition(std::string_view transition, std::string_view outcome, double seconds);
  // A Resume that waited for a transition was answered (RegistryHooks::on_resume_waited).
  void RecordResumeWait(std::string_view outcome, double seconds);

  prometheus::Counter& writes;           // snapshots written (atomically, fsynced)
  prometheus::Counter& written_bytes;    // their bytes
  prometheus::Histogram& write_bytes;    // size of each snapshot written
  prometheus::Histogram& write_seconds;  // capture + encode + write + fsync of one snapshot
  prometheus::Family<prometheus::Counter>& write_errors;  // label `reason`
  prometheus::Counter& loads;  // snapshots read back into the engine (restore, Resume, import)
  prometheus::Histogram& load_seconds;  // read + decode + restore of one snapshot
  prometheus::Family<prometheus::Counter>&
      rejected;                           // label `reason`: snapshots moved aside, never deleted
  prometheus::Counter& offloads;          // detached sessions written out and their blocks freed
  prometheus::Gauge& sessions_offloaded;  // sessions only on disk now
  // Residency transitions: labels `transition` (offload, drop_stale, load, startup_load) and
  // `outcome` (ok, kept, no_room, lost, closed); their durations by `transition`.
  prometheus::Family<prometheus::Counter>& transitions;
  prometheus::Family<prometheus::Histogram>& transition_seconds;
  // Resumes that waited for a load or an offload in flight: label `outcome` (attached, refused,
  // timed_out).
  prometheus::Family<prometheus::Counter>& resume_waits;
  prometheus::Histogram& resume_wait_seconds;
  // Sessions in a transition now: label `state` (offloading, loading). One that stays there is
  // stuck (docs/METRICS.md has the alert).
  prometheus::Family<prometheus::Gauge>& sessions_in_transition;
};

}  // namespace streamd::metrics
