// libFuzzer target for the snapshot reader: any byte string must yield either a state that
// satisfies every SessionState invariant (and re-encodes to a snapshot that decodes to the same
// state) or an error with a non-empty one-line message; ReadSnapshotSummary likewise, and it
// must agree with DecodeSnapshot whenever both succeed. Never a crash, a sanitizer report or an
// allocation beyond the input's size (libFuzzer's -malloc_limit_mb catches those).
//
// The reader checks a checksum before it parses what the checksum covers, so random mutations
// would rarely get past it: the custom mutator below rewrites the checksums after most
// mutations (tests/fuzz is the only place that does), and leaves them stale in the others so
// the checksum path is fuzzed too.
//
// Built twice: as snapshot_fuzz (libFuzzer main) and, with STREAMD_SNAPSHOT_FUZZ_SEEDS, as
// snapshot_fuzz_seeds, which writes the seed corpus with the writer (f16 sessions in format
// version 1, int8 ones in version 2).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "engine/snapshot/snapshot_format.h"
#include "tests/support/snapshot_testing.h"

namespace {

using namespace streamd;  // NOLINT: a fuzz target

// The daemon the seeds were written for; small, so a seed is a few hundred bytes.
SnapshotContext FuzzContext() {
  SnapshotContext c;
  c.model_fingerprint = "f0220123456789abcdef0123456789ab";
  c.model_name = "fuzz-model";
  c.n_layers = 2;
  c.n_kv_heads = 2;
  c.head_dim = 3;
  c.block_size = 16;
  c.streamd_version = "fuzz";
  return c;
}

void CheckMessage(const Status& status) {
  const std::string& msg = status.message();
  if (status.ok() || msg.empty() || msg.find('\n') != std::string::npos) __builtin_trap();
}

// What DecodeSnapshot promises of a state it returns; a violation is a reader bug, so trap.
void CheckState(const SessionState& s, const SnapshotContext& c) {
  const int64_t held = snapshot_testing::HeldTokens(s.tokens_seen, s.sinks, s.window, s.mode);
  if (!s.id.valid() || s.tokens_seen < 0 || s.sinks < 0 || s.window < 1) __builtin_trap();
  if (s.mode != CacheMode::kSink && s.sinks != 0) __builtin_trap();
  if (s.mode == CacheMode::kDense && s.tokens_seen > s.window) __builtin_trap();
  if (static_cast<int64_t>(s.cached_tokens.size()) != held || s.kv.n_tokens != held) {
    __builtin_trap();
  }
  if (s.kv.n_layers != c.n_layers || s.kv.n_kv_heads != c.n_kv_heads ||
      s.kv.head_dim != c.head_dim || s.kv.held() != s.kv.elements()) {
    __builtin_trap();
  }
  // Int8 K/V come with scales of their shape, every one usable (1 / scale finite); f16 ones
  // with none, and only one of the two vectors holds values.
  if (s.kv.dtype == kernels::KvDtype::kInt8) {
    const KvInt8Scales* sc = s.kv.scales.get();
    if (sc == nullptr || !s.kv.data.empty() || sc->n_layers() != c.n_layers ||
        sc->n_kv_heads() != c.n_kv_heads || sc->head_dim() != c.head_dim) {
      __builtin_trap();
    }
    for (const std::vector<float>* v : {&sc->k(), &sc->v()}) {
      for (float x : *v) {
        if (!std::isfinite(x) || !(x >= 1e-30f) || !std::isfinite(1.0f / x)) __builtin_trap();
      }
    }
  } else if (s.kv.dtype != kernels::KvDtype::kF16 || s.kv.scales != nullptr ||
             !s.kv.data_i8.empty()) {
    __builtin_trap();
  }
  for (int32_t id : s.cached_tokens) {
    if (id < 0) __builtin_trap();
  }
  for (int32_t id : s.pending) {
    if (id < 0) __builtin_trap();
  }
  if (!ValidateSamplingParams(s.sampling).ok()) __builtin_trap();
  if (s.metadata.size() > static_cast<size_t>(kMaxSnapshotMetadataEntries)) __builtin_trap();
  for (const auto& [key, value] : s.metadata) {
    if (key.empty() || key.size() > kMaxSnapshotMetadataKeyBytes) __builtin_trap();
    if (value.size() > kMaxSnapshotMetadataValueBytes) __builtin_trap();
  }
  if (s.tenant.size() > kMaxSnapshotTenantBytes) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  const SnapshotContext ctx = FuzzContext();
  auto summary = ReadSnapshotSummary(bytes);
  if (!summary.ok()) CheckMessage(summary.status());
  auto state = DecodeSnapshot(bytes, ctx);
  if (!state.ok()) {
    CheckMessage(state.status());
    return 0;
  }
  // Both read the same META: a decodable snapshot has a summary, and they agree.
  if (!summary.ok()) __builtin_trap();
  const SnapshotSummary& sum = *summary;
  if (sum.id != state->id || sum.tokens_seen != state->tokens_seen ||
      sum.cached_tokens != static_cast<int64_t>(state->cached_tokens.size()) ||
      sum.pending_tokens != static_cast<int64_t>(state->pending.size()) ||
      sum.metadata_entries != static_cast<int64_t>(state->metadata.size()) ||
      sum.kv_bytes != static_cast<uint64_t>(state->kv.bytes()) || sum.kv_dtype != state->kv.dtype ||
      sum.tenant != state->tenant || sum.revision != state->revision) {
    __builtin_trap();
  }
  CheckState(*state, ctx);
  // The writer, stamped as this snapshot's writer was, gives back the same state in at most as
  // many bytes (the input may carry optional sections the writer does not write).
  SnapshotContext writer = ctx;
  writer.block_size = sum.block_size;
  writer.model_name = sum.model_name;
  writer.streamd_version = sum.streamd_version;
  const std::vector<uint8_t> again = EncodeSnapshot(*state, writer);
  if (again.size() > size) __builtin_trap();
  auto state2 = DecodeSnapshot(again, ctx);
  if (!state2.ok() || !(*state2 == *state)) __builtin_trap();
  return 0;
}

#ifndef STREAMD_SNAPSHOT_FUZZ_SEEDS
extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  if (seed % 8 != 0) streamd::snapshot_testing::RewriteChecksums({data, size});
  return size;
}
#endif

#ifdef STREAMD_SNAPSHOT_FUZZ_SEEDS
#include <cstdio>
#include <fstream>
#include <random>

namespace {

using streamd::snapshot_testing::RandomState;

void Save(const std::string& dir, const std::string& name, std::span<const uint8_t> bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

// snapshot_fuzz_seeds DIR
int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const SnapshotContext ctx = FuzzContext();
  std::mt19937_64 rng(20240601);  // fixed: the same corpus every run
  const std::pair<const char*, CacheMode> modes[] = {
      {"dense", CacheMode::kDense}, {"window", CacheMode::kWindow}, {"sink", CacheMode::kSink}};
  for (const auto& [name, mode] : modes) {
    for (int i = 0; i < 3; ++i) {
      const SessionState s = RandomState(rng, ctx, mode, 6);
      Save(dir, std::string(name) + "_" + std::to_string(i), EncodeSnapshot(s, ctx));
    }
  }
  // A fresh session (nothing cached), one with nothing pending and no metadata, one with an
  // optional section from a "later writer", and a cut one (summary reads, decode does not).
  SessionState fresh = RandomState(rng, ctx, CacheMode::kSink, 4);
  fresh.tokens_seen = 0;
  fresh.cached_tokens.clear();
  fresh.kv.n_tokens = 0;
  fresh.kv.data.clear();
  Save(dir, "fresh", EncodeSnapshot(fresh, ctx));
  SessionState bare = RandomState(rng, ctx, CacheMode::kWindow, 4);
  bare.pending.clear();
  bare.metadata.clear();
  bare.tenant.clear();
  Save(dir, "bare", EncodeSnapshot(bare, ctx));
  const std::vector<uint8_t> full = EncodeSnapshot(RandomState(rng, ctx, CacheMode::kSink, 6), ctx);
  const uint8_t note[] = {'l', 'a', 't', 'e', 'r'};
  Save(dir, "optional_section",
       streamd::snapshot_testing::InsertSectionBeforeEnd(
           full, streamd::snapshot_layout::Tag('n', 'o', 't', 'e'), note));
  Save(dir, "cut", std::span<const uint8_t>(full).first(full.size() / 2));
  // Sessions of int8 KV caches (format version 2: KVSC scales, KVI8 values) in every mode, a
  // fresh one, and one cut inside its scales.
  for (const auto& [name, mode] : modes) {
    SessionState s = RandomState(rng, ctx, mode, 6);
    streamd::snapshot_testing::MakeInt8(rng, ctx, &s);
    Save(dir, std::string("int8_") + name, EncodeSnapshot(s, ctx));
  }
  SessionState fresh8 = fresh;
  streamd::snapshot_testing::MakeInt8(rng, ctx, &fresh8);
  Save(dir, "int8_fresh", EncodeSnapshot(fresh8, ctx));
  SessionState cut8 = RandomState(rng, ctx, CacheMode::kSink, 6);
  streamd::snapshot_testing::MakeInt8(rng, ctx, &cut8);
  const std::vector<uint8_t> full8 = EncodeSnapshot(cut8, ctx);
  for (const auto& sec : streamd::snapshot_testing::Sections(full8)) {
    if (sec.tag != streamd::snapshot_layout::kTagKvScales) continue;
    Save(dir, "int8_cut_in_scales",
         std::span<const uint8_t>(full8).first(sec.payload + sec.length / 2));
  }
  return 0;
}
#endif  // STREAMD_SNAPSHOT_FUZZ_SEEDS
