#include "server/metrics/snapshot_metrics.h"

#include "server/metrics/families.h"

namespace streamd::metrics {

SnapshotMetrics::SnapshotMetrics(prometheus::Registry& registry)
    : writes(OneCounter(registry, "streamd_snapshot_writes_total",
                        "Session snapshots written to the snapshot directory (atomically replaced "
                        "and fsynced).")),
      written_bytes(OneCounter(registry, "streamd_snapshot_written_bytes_total",
                               "Bytes of the session snapshots written.")),
      write_bytes(OneHistogram(registry, "streamd_snapshot_bytes",
                               "Size of each session snapshot written, in bytes.",
                               kSnapshotBytesBuckets)),
      write_seconds(OneHistogram(registry, "streamd_snapshot_write_seconds",
                                 "Capture, encoding, write and fsync of one session snapshot, in "
                                 "seconds.",
                                 kSnapshotSecondsBuckets)),
      write_errors(LabelledCounters(registry, "streamd_snapshot_write_errors_total",
                                    "Session snapshots that could not be written (the session "
                                    "keeps serving from memory), by reason (a gRPC code name).",
                                    "reason",
                                    {"RESOURCE_EXHAUSTED", "PERMISSION_DENIED", "INTERNAL"})),
      loads(OneCounter(registry, "streamd_snapshot_loads_total",
                       "Session snapshots read back into the engine (start-up restore, Resume of "
                       "an offloaded session, import).")),
      load_seconds(OneHistogram(registry, "streamd_snapshot_load_seconds",
                                "Read, check and restore of one session snapshot, in seconds.",
                                kSnapshotSecondsBuckets)),
      rejected(LabelledCounters(registry, "streamd_snapshots_rejected_total",
                                "Snapshot files refused and moved into rejected/ (never deleted), "
                                "by reason (a gRPC code name).",
                                "reason",
                                {"DATA_LOSS", "FAILED_PRECONDITION", "INVALID_ARGUMENT"})),
      offloads(OneCounter(registry, "streamd_session_offloads_total",
                          "Detached sessions written out and their KV blocks freed (idle for "
                          "sessions.offload_after, or to make room).")),
      sessions_offloaded(OneGauge(registry, "streamd_sessions_offloaded",
                                  "Sessions that are only on disk now (their next Resume reads "
                                  "them back).")),
      transitions(prometheus::BuildCounter()
                      .Name("streamd_session_transitions_total")
                      .Help("Residency transitions of sessions that ended, by transition "
                            "(offload, drop_stale, load, startup_load) and outcome (ok, kept, "
                            "no_room, lost, closed).")
                      .Register(registry)),
      transition_seconds(prometheus::BuildHistogram()
                             .Name("streamd_session_transition_seconds")
                             .Help("Duration of a residency transition, from its claim to its "
                                   "end, in seconds, by transition.")
                             .Register(registry)),
      resume_waits(LabelledCounters(registry, "streamd_resume_waits_total",
                                    "Resumes that waited for their session to come back from "
                                    "disk or to finish moving there, by outcome (attached, "
                                    "refused, timed_out: UNAVAILABLE after "
                                    "sessions.resume_wait).",
                                    "outcome", {"attached", "refused", "timed_out"})),
      resume_wait_seconds(OneHistogram(registry, "streamd_resume_wait_seconds",
                                       "How long a Resume waited for its session's transition, "
                                       "in seconds.",
                                       kSnapshotSecondsBuckets)),
      sessions_in_transition(prometheus::BuildGauge()
                                 .Name("streamd_sessions_in_transition")
                                 .Help("Sessions moving between memory and disk now, by state "
                                       "(offloading, loading).")
                                 .Register(registry)) {
  for (const char* state : {"offloading", "loading"})
    sessions_in_transition.Add({{"state", state}});
}

void SnapshotMetrics::RecordTransition(std::string_view transition, std::string_view outcome,
                                       double seconds) {
  const std::string t(transition);
  transitions.Add({{"transition", t}, {"outcome", std::string(outcome)}}).Increment();
  transition_seconds.Add({{"transition", t}}, Bounds(kSnapshotSecondsBuckets)).Observe(seconds);
}

void SnapshotMetrics::RecordResumeWait(std::string_view outcome, double seconds) {
  resume_waits.Add({{"outcome", std::string(outcome)}}).Increment();
  resume_wait_seconds.Observe(seconds);
}

}  // namespace streamd::metrics
