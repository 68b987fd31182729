// Hostile snapshot bytes: every single-bit flip over the header, META and every section header
// (and a sample of every payload), every truncation length, crafted lengths and counts behind
// valid checksums, and random damage behind rewritten checksums. Each must end in a clean,
// one-line error (DATA_LOSS for damage), never a crash, a huge allocation or a wrong state.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "engine/snapshot/snapshot_format.h"
#include "engine/snapshot/snapshot_layout.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/snapshot_testing.h"

namespace streamd::snapshot_testing {
namespace {

namespace L = snapshot_layout;
namespace M = snapshot_layout::meta;

// Offsets to flip: all of the header, of META (header, payload, padding) and of every other
// section's header and padding; `per_payload` spread offsets of every other payload.
std::vector<size_t> FlipOffsets(const std::vector<uint8_t>& bytes, size_t per_payload) {
  std::set<size_t> at;
  for (size_t i = 0; i < L::kHeaderSize; ++i) at.insert(i);
  for (const SectionSpan& s : Sections(bytes)) {
    const bool meta = s.tag == L::kTagMeta;
    for (size_t i = s.header; i < s.payload; ++i) at.insert(i);
    for (size_t i = s.payload + s.length; i < s.end; ++i) at.insert(i);
    if (meta) {
      for (size_t i = s.payload; i < s.payload + s.length; ++i) at.insert(i);
    } else if (s.length > 0) {
      for (size_t k = 0; k < per_payload; ++k)
        at.insert(s.payload + k * (s.length - 1) / per_payload);
      at.insert(s.payload + s.length - 1);
    }
  }
  return {at.begin(), at.end()};
}

TEST(SnapshotCorruptionTest, EverySingleBitFlipIsDataLoss) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const SnapshotContext ctx = TestContext(3, 2, 5);
  const SessionState state = SmallState(rng, ctx);
  const std::vector<uint8_t> good = EncodeSnapshot(state, ctx);
  const std::vector<SectionSpan> sections = Sections(good);
  ASSERT_EQ(sections.size(), 5u);
  const size_t meta_end = sections[0].end;
  auto summary_of_good = ReadSnapshotSummary(good);
  ASSERT_TRUE(summary_of_good.ok());

  size_t flips = 0;
  for (size_t offset : FlipOffsets(good, 64)) {
    for (int bit = 0; bit < 8; ++bit) {
      // A fresh exact-size copy each time, so a read past the end is an ASan report.
      std::vector<uint8_t> bad = good;
      bad[offset] ^= static_cast<uint8_t>(1u << bit);
      SCOPED_TRACE("offset " + std::to_string(offset) + " bit " + std::to_string(bit));
      ++flips;
      ExpectError(DecodeSnapshot(bad, ctx).status(), StatusCode::kDataLoss, {"snapshot"});
      auto summary = ReadSnapshotSummary(bad);
      if (offset < meta_end) {
        ExpectError(summary.status(), StatusCode::kDataLoss, {});
      } else {
        ASSERT_TRUE(summary.ok()) << summary.status().ToString();  // reads header and META only
        EXPECT_EQ(summary->id, summary_of_good->id);
      }
    }
  }
  RecordProperty("flips", std::to_string(flips));
  EXPECT_GT(flips, 8 * (L::kHeaderSize + sections[0].end - sections[0].header));
}

TEST(SnapshotCorruptionTest, EveryTruncationIsDataLoss) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const SnapshotContext ctx = TestContext(2, 1, 3);
  const std::vector<uint8_t> good = EncodeSnapshot(SmallState(rng, ctx), ctx);
  std::set<size_t> boundaries;
  for (const SectionSpan& s : Sections(good)) boundaries.insert({s.header, s.payload, s.end});
  for (size_t n = 0; n < good.size(); ++n) {
    const std::vector<uint8_t> prefix(good.begin(), good.begin() + n);
    SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
    const Status s = DecodeSnapshot(prefix, ctx).status();
    ExpectError(s, StatusCode::kDataLoss, {});
    if (n > 0) {
      EXPECT_TRUE(Contains(s.message(), "truncated"));
    }
    if (boundaries.count(n) && n > L::kHeaderSize) {
      EXPECT_TRUE(Contains(s.message(), "remain"));
    }
  }
  // The message names the section, the bytes it needs, the offset and what is left.
  const SectionSpan meta = Sections(good)[0];
  const std::vector<uint8_t> cut(good.begin(), good.begin() + meta.payload + 10);
  ExpectError(DecodeSnapshot(cut, ctx).status(), StatusCode::kDataLoss,
              {"snapshot truncated: section META needs " + std::to_string(meta.length) +
               " bytes at offset " + std::to_string(meta.payload) + ", 10 remain"});
  // Bytes after END are refused too.
  std::vector<uint8_t> longer = good;
  longer.resize(good.size() + 8, 0);
  ExpectError(DecodeSnapshot(longer, ctx).status(), StatusCode::kDataLoss,
              {"8 bytes after the END section"});
}

TEST(SnapshotCorruptionTest, ChecksumMismatchNamesSectionAndBothValues) {
  std::mt19937_64 rng(21);
  const SnapshotContext ctx = TestContext(2, 1, 3);
  std::vector<uint8_t> bytes = EncodeSnapshot(SmallState(rng, ctx), ctx);
  const SectionSpan kv = Sections(bytes)[2];
  ASSERT_EQ(kv.tag, L::kTagKv);
  bytes[kv.payload + 3] ^= 0x10;
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + kv.header + L::kSectionChecksumOffset, 8);
  char want[64];
  std::snprintf(want, sizeof(want), "(stored 0x%016llx, computed 0x",
                static_cast<unsigned long long>(stored));
  ExpectError(
      DecodeSnapshot(bytes, ctx).status(), StatusCode::kDataLoss,
      {"snapshot section KV at offset " + std::to_string(kv.header) + ": checksum mismatch", want});
}

// Sizes and counts a hostile writer could declare, with valid checksums so that the checks
// behind them run. None may allocate more than the input holds.
TEST(SnapshotCorruptionTest, CraftedSizesAreBoundedByTheInput) {
  std::mt19937_64 rng(22);
  const SnapshotContext ctx = TestContext(2, 1, 3);
  const std::vector<uint8_t> good = EncodeSnapshot(SmallState(rng, ctx), ctx);
  const std::vector<SectionSpan> sections = Sections(good);
  const size_t meta = sections[0].payload;
  struct Case {
    const char* name;
    size_t offset;
    uint64_t value;
    size_t width;
    std::string_view expect;
  };
  const std::vector<Case> cases = {
      {"n_pending at its bound", meta + M::kNPending, kMaxSnapshotPendingTokens, 8,
       "section TOKENS holds"},
      {"n_pending past its bound", meta + M::kNPending, uint64_t{1} << 40, 8, "n_pending = "},
      {"n_pending negative", meta + M::kNPending, ~uint64_t{0}, 8, "n_pending = -1"},
      {"n_metadata at its bound", meta + M::kNMetadata, kMaxSnapshotMetadataEntries, 8,
       "METADATA: entry 2 key needs 4 bytes"},
      {"window huge", meta + M::kWindow, 0x7fffffff, 4, "window = 2147483647"},
      {"n_layers huge", meta + M::kNLayers, 0x7fffffff, 4, "n_layers = 2147483647"},
      {"head_dim zero", meta + M::kHeadDim, 0, 4, "head_dim = 0"},
      {"dtype unknown", meta + M::kKvDtype, 3, 4, "K/V dtype code 3 is not supported"},
      {"dtype int8 in version 1", meta + M::kKvDtype, 2, 4,
       "K/V dtype int8 (2) in a format version 1 file"},
      {"string length huge", meta + M::kFixedSize, 0xffffffff, 4,
       "streamd_version is 4294967295 bytes long, limit 64"},
      {"META length huge", sections[0].header + L::kSectionLengthOffset, ~uint64_t{0}, 8,
       "truncated: section META needs 18446744073709551615 bytes"},
      {"KV length huge", sections[2].header + L::kSectionLengthOffset, uint64_t{1} << 62, 8,
       "truncated: section KV needs 4611686018427387904 bytes"},
      {"KV length short", sections[2].header + L::kSectionLengthOffset, 8, 8,
       "section KV holds 8 bytes"},
      {"METADATA length beyond", sections[3].header + L::kSectionLengthOffset, 1 << 30, 8,
       "truncated: section METADATA"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> bad = good;
    std::memcpy(bad.data() + c.offset, &c.value, c.width);
    RewriteChecksums(bad);
    const Status s = DecodeSnapshot(bad, ctx).status();
    EXPECT_TRUE(s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kFailedPrecondition)
        << s.ToString();
    ExpectError(s, s.code(), {c.expect});
  }
}

// Random damage to the fixed META fields and the section headers, with every checksum
// rewritten: whatever decodes must be a state that satisfies every invariant (it re-encodes to
// the same bytes and decodes again to itself). A small fuzzer inside the unit tests.
TEST(SnapshotCorruptionTest, RandomDamageBehindValidChecksums) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const SnapshotContext ctx = TestContext(2, 1, 3);
  const std::vector<uint8_t> good = EncodeSnapshot(SmallState(rng, ctx), ctx);
  const size_t meta = Sections(good)[0].payload;
  int decoded_ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> bad = good;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) {
      const size_t at = rng() % 2 ? meta + rng() % M::kFixedSize : rng() % bad.size();
      bad[at] = rng() % 3 ? static_cast<uint8_t>(rng()) : bad[at] ^ (1u << (rng() % 8));
    }
    RewriteChecksums(bad);
    auto state = DecodeSnapshot(bad, ctx);
    auto summary = ReadSnapshotSummary(bad);
    if (!state.ok()) {
      ASSERT_EQ(state.status().message().find('\n'), std::string::npos);
      continue;
    }
    ++decoded_ok;
    ASSERT_TRUE(summary.ok()) << summary.status().ToString();
    // The fields the reader does not compare come back as they were written.
    SnapshotContext writer = ctx;
    writer.block_size = summary->block_size;
    writer.model_name = summary->model_name;
    writer.streamd_version = summary->streamd_version;
    const std::vector<uint8_t> again = EncodeSnapshot(*state, writer);
    auto state2 = DecodeSnapshot(again, ctx);
    ASSERT_TRUE(state2.ok()) << "iteration " << i << ": " << state2.status().ToString();
    ASSERT_EQ(*state2, *state);
    // Damage may turn an f16 file's version 1 into 2, which may hold f16 K/V too and is read;
    // the writer writes f16 as version 1. Compared with the version the damage left.
    std::vector<uint8_t> again_as_damaged = again;
    std::memcpy(again_as_damaged.data() + L::kHeaderVersionOffset,
                bad.data() + L::kHeaderVersionOffset, sizeof(uint32_t));
    RewriteChecksums(again_as_damaged);
    ASSERT_EQ(again_as_damaged, bad) << "iteration " << i << ": a second encoding of one state";
  }
  RecordProperty("decoded_ok", std::to_string(decoded_ok));
}

}  // namespace
}  // namespace streamd::snapshot_testing
