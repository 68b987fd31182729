// `streamd bench --snapshot`: what a session snapshot costs, per sink-cache shape (S sinks, each
// window W) and per count of tokens seen, median of --reps:
//   size         snapshot bytes, and their ratio to the cached K/V bytes;
//   snapshot     Engine::Capture + EncodeSnapshot + SnapshotStore::Write (temp file, fsync,
//                rename, fsync of the directory);
//   restore      SnapshotStore::Read + DecodeSnapshot + Engine::Restore into a second engine
//                (its own pool, another session restored first, so other block numbers);
//   cold read    the same file read again after its pages were dropped from the page cache
//                (posix_fadvise DONTNEED): what a restore after a restart reads from the disk;
//   (cpu)        the bench thread's CPU time over the snapshot and the restore stages (the
//                wall time less waiting, e.g. for fsync; kernel threads' work not counted).
// The session is made without a prefill of `tokens seen` tokens: its SessionState is built
// directly (ordinary token ids, random finite f16 K/V, exactly the span the cache keeps, the
// last token pending as an idle session keeps it) and Engine::Restore'd into the first engine,
// which validates it like any snapshot; that session is then what Capture reads. The restored
// copy is checked (the decoded state equals the captured one) and generates a token.
// It also counts the sessions a 1 GiB pool admits for each window (Engine::Open until
// RESOURCE_EXHAUSTED, engine defaults) and prints the bound formulas that predict it.
// All of it per K/V cache dtype (--kv-dtype), side by side under the same noise: f16 (the
// defaults; a --plan's int8 cache set aside) and int8 (the plan's calibrated scales, or without
// a plan 1/127 on every channel: the made K/V are random values in (-1, 1), which those scales
// hold without saturating). An int8 session's snapshot holds its int8 values and their scales
// as the pool has them, and both engines of a dtype share the scales, so its restore copies
// the bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model_backend.h"
#include "engine/snapshot/snapshot_format.h"
#include "tools/bench_sessions.h"

namespace streamd::tools {

struct SnapshotBenchOptions {
  BenchModelSource source;
  std::vector<int64_t> windows = {252, 1020};
  std::vector<int64_t> tokens_seen = {10000, 1000000};
  std::vector<kernels::KvDtype> kv_dtypes = {kernels::KvDtype::kF16};
  int64_t sinks = 4;
  int64_t reps = 5;     // timed repetitions per case, after one warm-up
  std::string dir;      // "" = a fresh directory under $TMPDIR (removed at the end)
  int64_t threads = 0;  // forward-pass threads of the engines (0 = all cores)
  int64_t count_pool_bytes = int64_t{1} << 30;  // the pool "sessions per GiB" fills
  bool local_layer_caches = true;               // EngineConfig::local_layer_caches
  bool json = false;
};

// "f16", "int8" or a comma-separated list of them (each at most once).
StatusOr<std::vector<kernels::KvDtype>> ParseKvDtypes(const std::string& text);

// Prints a table (and with json, one JSON object as the last line); returns the exit code.
int RunSnapshotBench(const SnapshotBenchOptions& options);

// What the benches stamp into their snapshots: the model's fingerprint (ModelFingerprint of the
// GGUF file; for a synthetic model "synthetic-<shape>"), its name and K/V layout.
StatusOr<SnapshotContext> BenchSnapshotContext(const BenchModelSource& source,
                                               const ModelBackend& model,
                                               const std::string& model_name, int32_t block_size);

// A fresh private directory under $TMPDIR (or /tmp) named streamd-bench-<what>-XXXXXX.
StatusOr<std::string> MakeTempDirectory(const std::string& what);

}  // namespace streamd::tools
