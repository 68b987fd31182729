// The session snapshot format: one writer, one reader (and one fuzzer, tests/fuzz). A snapshot
// is one SessionState as bytes: a fixed header, then checksummed sections META, TOKENS, the K/V
// (KV16 for f16; KVSC and KVI8 for an int8 cache's values and their scales, format version 2),
// METADATA and END. The byte layout, the versioning rule and every check the reader makes are
// in docs/SESSIONS.md, "Snapshot format"; snapshot_layout.h has the constants.
//
// The writer writes any state exactly as given, without validating it: tests build invalid
// states on purpose to see the reader refuse them. Engine::Capture only makes valid ones.
// The reader treats every byte as hostile: every length is checked against the bytes that
// remain (and against the dimensions META declares) before anything is read or allocated, every
// checksum is verified, and every SessionState invariant (session_state.h) is checked. Errors
// are one line:
//   DATA_LOSS            corrupt, truncated, checksum mismatch, or a state that breaks an
//                        invariant (the writer never writes one, so the bytes are not ours)
//   FAILED_PRECONDITION  a format version or K/V dtype this reader does not read; a snapshot of
//                        another model (fingerprints differ); a K/V layout that does not match
//                        the model
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/snapshot/session_state.h"
#include "engine/util/status.h"

namespace streamd {

// What the running daemon is: the writer stamps it into META, the reader checks a snapshot
// against it.
struct SnapshotContext {
  std::string model_fingerprint;  // ModelFingerprint() of the loaded model
  std::string model_name;         // for messages only (general.name, else the architecture)
  int32_t n_layers = 0;           // the K/V layout a restored state must have
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;  // the writer's cache block size: informational, a snapshot loads
                           // into any block size (K/V travel in cache order)
  std::string streamd_version;
};

// What a directory listing needs, from the header and META alone (no K/V read): cheap, and
// checked as far as those bytes go (META's checksum, bounds and invariants), but a snapshot
// whose summary reads may still fail DecodeSnapshot (a damaged later section, another model).
// The first kSnapshotSummaryPrefixBytes of a file (or all of it, if shorter) always suffice.
struct SnapshotSummary {
  uint32_t format_version = 0;
  SessionId id;
  std::string tenant;
  CacheMode mode = CacheMode::kSink;
  int32_t sinks = 0;
  int32_t window = 0;
  SamplingParams sampling;  // the session's generation defaults
  int64_t tokens_seen = 0;
  int64_t cached_tokens = 0;  // K/V held (= cached ids)
  int64_t pending_tokens = 0;
  int64_t metadata_entries = 0;
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF16;
  uint64_t kv_bytes = 0;  // size of the K/V values' payload (KV16 or KVI8; scales not counted)
  uint64_t revision = 0;
  int64_t created_unix_ms = 0;
  int64_t saved_unix_ms = 0;
  std::string model_fingerprint;
  std::string model_name;
  std::string streamd_version;
  int32_t n_layers = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
};

// Bounds the reader enforces (beyond "fits in the remaining bytes"). They keep every size a
// hostile META can declare small enough to compute without overflow, and strings short enough
// to print in one line.
inline constexpr size_t kMaxSnapshotVersionBytes = 64;      // streamd_version
inline constexpr size_t kMaxSnapshotFingerprintBytes = 64;  // model_fingerprint
inline constexpr size_t kMaxSnapshotModelNameBytes = 256;
inline constexpr size_t kMaxSnapshotTenantBytes = 256;
inline constexpr int64_t kMaxSnapshotMetadataEntries = 1024;
inline constexpr size_t kMaxSnapshotMetadataKeyBytes = 256;        // keys: 1 .. 256 bytes
inline constexpr size_t kMaxSnapshotMetadataValueBytes = 1 << 20;  // values: 0 .. 1 MiB
inline constexpr uint64_t kMaxSnapshotMetadataBytes = 4 << 20;     // the METADATA payload
inline constexpr int32_t kMaxSnapshotLayers = 1024;
inline constexpr int32_t kMaxSnapshotKvHeads = 1024;
inline constexpr int32_t kMaxSnapshotHeadDim = 4096;
inline constexpr int32_t kMaxSnapshotBlockSize = 1 << 16;
inline constexpr int32_t kMaxSnapshotCacheTokens = 1 << 24;  // sinks, window (dense: context)
inline constexpr int64_t kMaxSnapshotPendingTokens = 1 << 24;

// The header and the largest META the bounds above allow fit in this many bytes: what a
// directory listing reads of each file for ReadSnapshotSummary.
inline constexpr size_t kSnapshotSummaryPrefixBytes = 1024;

// Exact size of the encoding of `state` stamped with `context` (what EncodeSnapshotTo writes).
size_t EncodedSnapshotSize(const SessionState& state, const SnapshotContext& context);

// Writes the snapshot into `out`, which must hold at least EncodedSnapshotSize(state) bytes
// (else INVALID_ARGUMENT naming both sizes; EncodedSnapshotSize says how many); returns the bytes
// written. The K/V image is copied once, straight from `state`.
StatusOr<size_t> EncodeSnapshotTo(const SessionState& state, const SnapshotContext& context,
                                  std::span<uint8_t> out);
// The same into a vector reserved once (no zero-filling, one copy of the K/V image).
std::vector<uint8_t> EncodeSnapshot(const SessionState& state, const SnapshotContext& context);

// Encoding around K/V that are already in place, so that a capture gathers them from the pool
// straight into the snapshot (no image in between, no second copy). For a state whose kv
// dimensions, dtype and (int8) scales are set (its vectors are not used): the snapshot's size and
// where in it the K/V values' payload starts (8-aligned). The caller writes kv.bytes() there
// (f16 or int8 values, as kv.dtype says), then EncodeSnapshotAroundKv writes everything else
// (the scales included, and the K/V section's checksum over the bytes found in place). `out`
// must hold EncodedSnapshotSizeForKv bytes.
size_t EncodedSnapshotSizeForKv(const SessionState& state, const SnapshotContext& context);
size_t SnapshotKvOffset(const SessionState& state, const SnapshotContext& context);
StatusOr<size_t> EncodeSnapshotAroundKv(const SessionState& state, const SnapshotContext& context,
                                        std::span<uint8_t> out);

// The state in `bytes`, checked against `expected` (see the error codes above; the writer's
// block_size and streamd_version are not compared). An int8 snapshot decodes to an int8 image
// with its scales (kv_image.h: restore converts if the pool's differ). With `kv_in_place`, the
// K/V values are not copied into state.kv (its dimensions, dtype and scales are set, its vectors
// left empty): *kv_in_place views them inside `bytes`, which must outlive it (restore reads a
// mapped file where it lies). `bytes` must then be 2-byte aligned (a mapping or an allocation
// is).
StatusOr<SessionState> DecodeSnapshot(std::span<const uint8_t> bytes,
                                      const SnapshotContext& expected,
                                      KvView* kv_in_place = nullptr);

// The header and META only (see SnapshotSummary).
StatusOr<SnapshotSummary> ReadSnapshotSummary(std::span<const uint8_t> bytes);

}  // namespace streamd
