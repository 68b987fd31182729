// Snapshots of int8 KV caches (format version 2): random int8 states round-trip in every mode
// (also in place, as the daemon writes and reads them), their K/V section is half an f16 one's,
// f16 states still write version 1, a golden encoding pins version 2, and a file written in the
// version-1 layout before int8 existed still reads. Corrupt int8 bytes:
// snapshot_int8_corruption_test.cc.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <array>
#include <cstring>
#include <random>

#include "engine/snapshot/snapshot_format.h"
#include "engine/snapshot/snapshot_layout.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/snapshot_testing.h"

namespace streamd::snapshot_testing {
namespace {

namespace L = snapshot_layout;

uint32_t VersionOf(const std::vector<uint8_t>& bytes) {
  uint32_t v = 0;
  std::memcpy(&v, bytes.data() + L::kHeaderVersionOffset, sizeof(v));
  return v;
}

TEST(SnapshotInt8Test, RandomInt8StatesRoundTripInEveryMode) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 300; ++i) {
    // Awkward layouts: odd head_dim and token counts leave payloads that need padding.
    const SnapshotContext ctx = TestContext(1 + rng() % 4, 1 + rng() % 3, 1 + rng() % 9);
    const CacheMode mode =
        std::array{CacheMode::kDense, CacheMode::kWindow, CacheMode::kSink}[i % 3];
    SessionState state = RandomState(rng, ctx, mode);
    MakeInt8(rng, ctx, &state);
    SCOPED_TRACE("state " + std::to_string(i));
    const std::vector<uint8_t> bytes = EncodeSnapshot(state, ctx);
    ASSERT_EQ(bytes.size(), EncodedSnapshotSize(state, ctx));
    ASSERT_EQ(bytes.size() % 8, 0u);
    EXPECT_EQ(VersionOf(bytes), L::kFormatVersionInt8);
    auto decoded = DecodeSnapshot(bytes, ctx);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    ASSERT_EQ(*decoded, state);
    ASSERT_EQ(decoded->kv.dtype, kernels::KvDtype::kInt8);
    ASSERT_NE(decoded->kv.scales, nullptr);
    EXPECT_EQ(decoded->kv.scales->k(), state.kv.scales->k());
    EXPECT_EQ(decoded->kv.scales->v(), state.kv.scales->v());
    ASSERT_EQ(EncodeSnapshot(*decoded, ctx), bytes);  // one encoding per state

    auto summary = ReadSnapshotSummary(bytes);
    ASSERT_TRUE(summary.ok()) << summary.status().ToString();
    EXPECT_EQ(summary->format_version, L::kFormatVersionInt8);
    EXPECT_EQ(summary->kv_dtype, kernels::KvDtype::kInt8);
    EXPECT_EQ(summary->kv_bytes, state.kv.data_i8.size());
    EXPECT_EQ(summary->id, state.id);

    // In place: the view shows the int8 values where they lie, with the scales.
    KvView view;
    auto in_place = DecodeSnapshot(bytes, ctx, &view);
    ASSERT_TRUE(in_place.ok()) << in_place.status().ToString();
    EXPECT_TRUE(in_place->kv.data_i8.empty());
    ASSERT_EQ(view.dtype, kernels::KvDtype::kInt8);
    ASSERT_EQ(view.size, state.kv.elements());
    ASSERT_EQ(view.scales, in_place->kv.scales);
    if (view.size > 0) {
      EXPECT_TRUE(std::equal(view.data_i8, view.data_i8 + view.size, state.kv.data_i8.begin()));
      EXPECT_GE(reinterpret_cast<const uint8_t*>(view.data_i8), bytes.data());
      EXPECT_LT(reinterpret_cast<const uint8_t*>(view.data_i8), bytes.data() + bytes.size());
    }

    // Around int8 K/V gathered in place first (as a capture of an int8 pool does).
    SessionState meta = state;
    meta.kv.data_i8.clear();
    ASSERT_EQ(EncodedSnapshotSizeForKv(meta, ctx), bytes.size());
    const size_t at = SnapshotKvOffset(meta, ctx);
    ASSERT_EQ(at % 8, 0u);
    std::vector<uint8_t> around(bytes.size(), 0xcd);
    if (!state.kv.data_i8.empty()) {
      std::memcpy(around.data() + at, state.kv.data_i8.data(), state.kv.data_i8.size());
    }
    auto placed = EncodeSnapshotAroundKv(meta, ctx, around);
    ASSERT_TRUE(placed.ok()) << placed.status().ToString();
    ASSERT_EQ(around, bytes);
  }
}

// An f16 state is written as version 1, byte for byte what a version-1 writer made, so
// older readers keep reading f16 snapshots; only int8 takes version 2.
TEST(SnapshotInt8Test, F16StatesStillWriteVersion1) {
  std::mt19937_64 rng(5);
  const SnapshotContext ctx = TestContext(2, 2, 8);
  const SessionState state = RandomState(rng, ctx, CacheMode::kSink);
  const std::vector<uint8_t> bytes = EncodeSnapshot(state, ctx);
  EXPECT_EQ(VersionOf(bytes), L::kFormatVersionF16);
  for (const SectionSpan& s : Sections(bytes)) {
    EXPECT_NE(s.tag, L::kTagKvScales);
    EXPECT_NE(s.tag, L::kTagKvInt8);
  }
  auto summary = ReadSnapshotSummary(bytes);
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(summary->format_version, 1u);
  EXPECT_EQ(summary->kv_dtype, kernels::KvDtype::kF16);
  // A version-2 file may hold f16 K/V too (a later writer may write version 2 throughout).
  std::vector<uint8_t> v2 = bytes;
  std::memcpy(v2.data() + L::kHeaderVersionOffset, &L::kFormatVersionInt8, sizeof(uint32_t));
  RewriteChecksums(v2);
  auto decoded = DecodeSnapshot(v2, ctx);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, state);
}

// The goal: an int8 session's snapshot is about half an f16 one's, for SmolLM2's shape: its
// K/V section exactly half, plus the scales (2 x 30 x 3 x 64 x 4 = 46,080 bytes).
TEST(SnapshotInt8Test, Int8SnapshotIsHalfTheF16One) {
  std::mt19937_64 rng(11);
  const SnapshotContext ctx = TestContext(30, 3, 64);
  for (int32_t window : {252, 1020}) {
    SessionState state = RandomState(rng, ctx, CacheMode::kSink, 1);
    state.sinks = 4;
    state.window = window;
    state.tokens_seen = 1000000;
    state.cached_tokens.assign(static_cast<size_t>(4 + window - 1), 17);
    state.pending = {42};
    state.kv.n_tokens = 4 + window - 1;
    state.kv.data.assign(static_cast<size_t>(state.kv.elements()), 0x3c00);
    state.metadata = {{"chat.template_state", std::string(2000, 's')}};
    const std::vector<uint8_t> f16 = EncodeSnapshot(state, ctx);
    MakeInt8(rng, ctx, &state);
    const std::vector<uint8_t> i8 = EncodeSnapshot(state, ctx);
    const size_t kv16 = state.kv.elements() * 2, kv8 = state.kv.elements();
    EXPECT_EQ(f16.size() - i8.size(), kv16 - kv8 - (L::kSectionHeaderSize + 46080));
    EXPECT_LT(static_cast<double>(i8.size()), 0.51 * static_cast<double>(f16.size()));
    RecordProperty("int8_over_f16_4+" + std::to_string(window),
                   std::to_string(static_cast<double>(i8.size()) / f16.size()));
  }
}

// Format version 2 is frozen too: this int8 state always encodes to these exact bytes.
TEST(SnapshotInt8Test, GoldenEncodingOfVersion2) {
  SessionState s;
  s.id = SessionId{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  s.tenant = "acme";
  s.mode = CacheMode::kSink;
  s.sinks = 2;
  s.window = 3;
  s.tokens_seen = 9;
  s.cached_tokens = {1, 2, 8, 9};
  s.pending = {10};
  s.kv.n_layers = 1;
  s.kv.n_kv_heads = 1;
  s.kv.head_dim = 3;
  s.kv.n_tokens = 4;
  s.kv.dtype = kernels::KvDtype::kInt8;
  for (int i = 0; i < 24; ++i) s.kv.data_i8.push_back(static_cast<int8_t>(5 * i - 60));
  auto scales = KvInt8Scales::Make(1, 1, 3, {0.5f, 0.25f, 0.125f}, {1.0f, 2.0f, 4.0f});
  ASSERT_TRUE(scales.ok());
  s.kv.scales = *scales;
  s.metadata = {{"a", "1"}};
  s.revision = 12;
  s.created_unix_ms = 1700000000000;
  s.saved_unix_ms = 1700000001234;
  const SnapshotContext ctx = TestContext(1, 1, 3);
  const std::vector<uint8_t> bytes = EncodeSnapshot(s, ctx);
  EXPECT_EQ(bytes.size(), 488u);
  EXPECT_EQ(XXH3_64bits(bytes.data(), bytes.size()), 0x966af5eea2c0aee7ULL);
  EXPECT_EQ(VersionOf(bytes), 2u);
  auto decoded = DecodeSnapshot(bytes, ctx);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, s);
}

// A snapshot written by streamd before int8 K/V existed (format version 1, f16 K/V; the state
// of SnapshotFormatTest.GoldenEncodingOfVersion1), as bytes: it still reads, to the same state.
TEST(SnapshotInt8Test, ReadsAFileWrittenInTheVersion1Layout) {
  const std::string hex =
      "5354524d44534e500100000000000000798f3d91443852204d45544100000000e6000000000000007162db4b"
      "3af2b8420100000001000000010000000300000010000000020000000200000003000000efcdab8967452301"
      "1032547698badcfe090000000000000004000000000000000400000000000000010000000000000002000000"
      "000000000c000000000000000068e5cf8b010000d26ce5cf8b010000cdcc4c3f280000003333733fcdcc4c3d"
      "0000803f000000000000000040000000000000000000000005000000302e312e302000000030313233343536"
      "3738396162636465663031323334353637383961626364656615000000536d6f6c4c4d322d3133354d2d496e"
      "7374727563740400000061636d650000544f4b5300000000140000000000000002daa2c906653ff701000000"
      "0200000008000000090000000a000000000000004b563136000000003000000000000000cbd74d385fccedba"
      "003c013c023c033c043c053c063c073c083c093c0a3c0b3c0c3c0d3c0e3c0f3c103c113c123c133c143c153c"
      "163c173c4d444154000000001800000000000000d3465d9bf40c492a01000000610100000031040000006368"
      "6174020000007b7d454e4453000000000000000000000000c294d3380580062d";
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < hex.size(); i += 2) {
    bytes.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  ASSERT_EQ(bytes.size(), 472u);
  EXPECT_EQ(VersionOf(bytes), 1u);
  const SnapshotContext ctx = TestContext(1, 1, 3);
  auto decoded = DecodeSnapshot(bytes, ctx);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->id, (SessionId{0x0123456789abcdefULL, 0xfedcba9876543210ULL}));
  EXPECT_EQ(decoded->tenant, "acme");
  EXPECT_EQ(decoded->tokens_seen, 9);
  EXPECT_EQ(decoded->cached_tokens, (std::vector<int32_t>{1, 2, 8, 9}));
  EXPECT_EQ(decoded->pending, (std::vector<int32_t>{10}));
  EXPECT_EQ(decoded->kv.dtype, kernels::KvDtype::kF16);
  EXPECT_EQ(decoded->kv.scales, nullptr);
  ASSERT_EQ(decoded->kv.data.size(), 24u);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(decoded->kv.data[i], 0x3c00 + i);
  EXPECT_EQ(decoded->metadata.at("chat"), "{}");
  EXPECT_EQ(decoded->saved_unix_ms, 1700000001234);
  auto summary = ReadSnapshotSummary(bytes);
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(summary->format_version, 1u);
  // And today's writer writes that state to the very same bytes.
  EXPECT_EQ(EncodeSnapshot(*decoded, ctx), bytes);
}

}  // namespace
}  // namespace streamd::snapshot_testing
