// Hostile int8 snapshots (format version 2): scales that are missing, of the wrong shape,
// non-finite, zero, negative or too small; sections out of place for the dtype META declares;
// an unknown dtype; int8 in a version-1 file; and every bit flip and truncation of an int8
// snapshot. Each must end in a clean one-line error naming the section and the reason, never a
// crash or a state with unusable scales.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
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

// A small int8 state with something in every section.
SessionState SmallInt8State(std::mt19937_64& rng, const SnapshotContext& ctx) {
  SessionState s = SmallState(rng, ctx);
  MakeInt8(rng, ctx, &s);
  return s;
}

const SectionSpan& Find(const std::vector<SectionSpan>& sections, uint32_t tag) {
  for (const SectionSpan& s : sections) {
    if (s.tag == tag) return s;
  }
  static const SectionSpan none;
  ADD_FAILURE() << "no section with tag " << tag;
  return none;
}

// `bytes` without the section at `s` (checksums of what remains are still valid).
std::vector<uint8_t> Without(const std::vector<uint8_t>& bytes, const SectionSpan& s) {
  std::vector<uint8_t> out(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(s.header));
  out.insert(out.end(), bytes.begin() + static_cast<ptrdiff_t>(s.end), bytes.end());
  return out;
}

TEST(SnapshotInt8CorruptionTest, BadScaleValuesNameTheEntry) {
  std::mt19937_64 rng(31);
  const SnapshotContext ctx = TestContext(2, 2, 3);
  const std::vector<uint8_t> good = EncodeSnapshot(SmallInt8State(rng, ctx), ctx);
  const SectionSpan scales = Find(Sections(good), L::kTagKvScales);
  const size_t per_set = 2 * 2 * 3;  // [n_layers][n_kv_heads][head_dim]
  ASSERT_EQ(scales.length, 2 * per_set * sizeof(float));
  struct Case {
    const char* name;
    size_t index;  // into K's then V's scales
    float value;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"NaN", 0, std::numeric_limits<float>::quiet_NaN(),
       "the K scale of layer 0, head 0, channel 0 is nan"},
      {"infinity", 5, std::numeric_limits<float>::infinity(),
       "the K scale of layer 0, head 1, channel 2 is inf"},
      {"zero", per_set + 7, 0.0f, "the V scale of layer 1, head 0, channel 1 is 0"},
      {"negative", per_set + 11, -0.5f, "the V scale of layer 1, head 1, channel 2 is -0.5"},
      {"minus zero", 3, -0.0f, "the K scale of layer 0, head 1, channel 0 is -0"},
      {"too small", 6, 1e-31f, "the K scale of layer 1, head 0, channel 0 is 1e-31"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> bad = good;
    std::memcpy(bad.data() + scales.payload + c.index * sizeof(float), &c.value, sizeof(float));
    RewriteChecksums(bad);
    ExpectError(DecodeSnapshot(bad, ctx).status(), StatusCode::kDataLoss,
                {"snapshot section KV_SCALES: ", c.expect, "finite numbers >= 1e-30"});
    // The summary reads the header and META only: it still lists the file.
    EXPECT_TRUE(ReadSnapshotSummary(bad).ok());
  }
}

TEST(SnapshotInt8CorruptionTest, MissingOrMisshapenScalesAreRefused) {
  std::mt19937_64 rng(32);
  const SnapshotContext ctx = TestContext(2, 2, 3);
  SessionState state = SmallInt8State(rng, ctx);
  const std::vector<uint8_t> good = EncodeSnapshot(state, ctx);
  const std::vector<SectionSpan> sections = Sections(good);
  const SectionSpan scales = Find(sections, L::kTagKvScales);

  // No KVSC section at all: the int8 values come where the scales must be.
  ExpectError(
      DecodeSnapshot(Without(good, scales), ctx).status(), StatusCode::kDataLoss,
      {"expected section KV_SCALES at offset " + std::to_string(scales.header), "found KV_INT8"});
  // A state written without scales: an empty KVSC.
  SessionState no_scales = state;
  no_scales.kv.scales = nullptr;
  ExpectError(DecodeSnapshot(EncodeSnapshot(no_scales, ctx), ctx).status(), StatusCode::kDataLoss,
              {"section KV_SCALES holds 0 bytes",
               "need 2 (K, V) x n_layers 2 x n_kv_heads 2 x "
               "head_dim 3 x 4 bytes = 96"});
  // Scales of another shape (one head fewer), with valid checksums.
  SessionState other = state;
  other.kv.scales = RandomScales(rng, TestContext(2, 1, 3));
  ExpectError(DecodeSnapshot(EncodeSnapshot(other, ctx), ctx).status(), StatusCode::kDataLoss,
              {"section KV_SCALES holds 48 bytes", "= 96"});
  // A KVSC length cut short inside a valid file.
  std::vector<uint8_t> cut = good;
  const uint64_t shorter = scales.length - 4;
  std::memcpy(cut.data() + scales.header + L::kSectionLengthOffset, &shorter, sizeof(shorter));
  RewriteChecksums(cut);
  ExpectError(DecodeSnapshot(cut, ctx).status(), StatusCode::kDataLoss, {"snapshot"});
  // Int8 values of another size.
  SessionState fewer = state;
  fewer.kv.data_i8.pop_back();
  ExpectError(DecodeSnapshot(EncodeSnapshot(fewer, ctx), ctx).status(), StatusCode::kDataLoss,
              {"section KV_INT8 holds " + std::to_string(state.kv.data_i8.size() - 1) + " bytes",
               "x 1 byte = " + std::to_string(state.kv.data_i8.size())});
}

TEST(SnapshotInt8CorruptionTest, SectionsMustMatchTheDeclaredDtype) {
  std::mt19937_64 rng(33);
  const SnapshotContext ctx = TestContext(2, 1, 3);
  const std::vector<uint8_t> int8 = EncodeSnapshot(SmallInt8State(rng, ctx), ctx);
  const std::vector<uint8_t> f16 = EncodeSnapshot(RandomState(rng, ctx, CacheMode::kSink), ctx);
  const size_t meta8 = Sections(int8)[0].payload, meta16 = Sections(f16)[0].payload;

  // META says f16 over int8 sections (in a version-2 file): the scales are not the KV16 section.
  std::vector<uint8_t> says_f16 = int8;
  std::memcpy(says_f16.data() + meta8 + M::kKvDtype, &L::kKvDtypeF16, 4);
  RewriteChecksums(says_f16);
  ExpectError(DecodeSnapshot(says_f16, ctx).status(), StatusCode::kDataLoss,
              {"expected section KV at offset", "found KV_SCALES"});
  // META says int8 over an f16 section (version 2 in the header, so the dtype is allowed).
  std::vector<uint8_t> says_int8 = f16;
  std::memcpy(says_int8.data() + L::kHeaderVersionOffset, &L::kFormatVersionInt8, 4);
  std::memcpy(says_int8.data() + meta16 + M::kKvDtype, &L::kKvDtypeInt8, 4);
  RewriteChecksums(says_int8);
  ExpectError(DecodeSnapshot(says_int8, ctx).status(), StatusCode::kDataLoss,
              {"expected section KV_SCALES at offset", "found KV"});
  // Int8 in a version-1 header: no version-1 writer wrote that.
  std::vector<uint8_t> v1 = int8;
  std::memcpy(v1.data() + L::kHeaderVersionOffset, &L::kFormatVersionF16, 4);
  RewriteChecksums(v1);
  ExpectError(DecodeSnapshot(v1, ctx).status(), StatusCode::kDataLoss,
              {"snapshot META: K/V dtype int8 (2) in a format version 1 file"});
  ExpectError(ReadSnapshotSummary(v1).status(), StatusCode::kDataLoss, {"format version 1"});
  // A dtype no version knows: a later writer's, refused as unsupported (not as damage).
  for (uint32_t dtype : {0u, 3u, 0xffffffffu}) {
    std::vector<uint8_t> unknown = int8;
    std::memcpy(unknown.data() + meta8 + M::kKvDtype, &dtype, 4);
    RewriteChecksums(unknown);
    ExpectError(DecodeSnapshot(unknown, ctx).status(), StatusCode::kFailedPrecondition,
                {"snapshot META: K/V dtype code " + std::to_string(dtype) + " is not supported",
                 "f16 (1) and int8 (2)"});
  }
}

// Every single-bit flip over the header, META, the section headers and the scales (and a
// sample of the other payloads), and every truncation: DATA_LOSS.
TEST(SnapshotInt8CorruptionTest, EveryBitFlipAndTruncationIsDataLoss) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const SnapshotContext ctx = TestContext(2, 2, 3);
  const std::vector<uint8_t> good = EncodeSnapshot(SmallInt8State(rng, ctx), ctx);
  std::set<size_t> at;
  for (size_t i = 0; i < L::kHeaderSize; ++i) at.insert(i);
  for (const SectionSpan& s : Sections(good)) {
    const bool whole = s.tag == L::kTagMeta || s.tag == L::kTagKvScales;
    for (size_t i = s.header; i < (whole ? s.end : s.payload); ++i) at.insert(i);
    for (size_t i = s.payload + s.length; i < s.end; ++i) at.insert(i);
    for (size_t k = 0; !whole && s.length > 0 && k < 32; ++k) {
      at.insert(s.payload + k * (s.length - 1) / 32);
    }
  }
  for (size_t offset : at) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bad = good;
      bad[offset] ^= static_cast<uint8_t>(1u << bit);
      SCOPED_TRACE("offset " + std::to_string(offset) + " bit " + std::to_string(bit));
      ExpectError(DecodeSnapshot(bad, ctx).status(), StatusCode::kDataLoss, {"snapshot"});
    }
  }
  for (size_t n = 0; n < good.size(); ++n) {
    const std::vector<uint8_t> prefix(good.begin(), good.begin() + static_cast<ptrdiff_t>(n));
    SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
    ExpectError(DecodeSnapshot(prefix, ctx).status(), StatusCode::kDataLoss, {});
  }
}

// Random damage behind rewritten checksums (the scales most of all): whatever decodes has
// usable scales, re-encodes to the same bytes and decodes to itself.
TEST(SnapshotInt8CorruptionTest, RandomDamageBehindValidChecksums) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const SnapshotContext ctx = TestContext(2, 1, 3);
  const std::vector<uint8_t> good = EncodeSnapshot(SmallInt8State(rng, ctx), ctx);
  const std::vector<SectionSpan> sections = Sections(good);
  const size_t meta = sections[0].payload;
  const SectionSpan scales = Find(sections, L::kTagKvScales);
  int decoded_ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> bad = good;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) {
      size_t where;
      switch (rng() % 3) {
        case 0:
          where = meta + rng() % M::kFixedSize;
          break;
        case 1:
          where = scales.payload + rng() % scales.length;
          break;
        default:
          where = rng() % bad.size();
      }
      bad[where] = rng() % 3 ? static_cast<uint8_t>(rng()) : bad[where] ^ (1u << (rng() % 8));
    }
    RewriteChecksums(bad);
    auto state = DecodeSnapshot(bad, ctx);
    if (!state.ok()) {
      ASSERT_EQ(state.status().message().find('\n'), std::string::npos);
      continue;
    }
    ++decoded_ok;
    if (state->kv.dtype == kernels::KvDtype::kInt8) {
      ASSERT_NE(state->kv.scales, nullptr);
      for (const std::vector<float>* s : {&state->kv.scales->k(), &state->kv.scales->v()}) {
        for (float x : *s) ASSERT_TRUE(std::isfinite(x) && x >= 1e-30f) << x;
      }
    }
    auto summary = ReadSnapshotSummary(bad);
    ASSERT_TRUE(summary.ok()) << summary.status().ToString();
    SnapshotContext writer = ctx;
    writer.block_size = summary->block_size;
    writer.model_name = summary->model_name;
    writer.streamd_version = summary->streamd_version;
    const std::vector<uint8_t> again = EncodeSnapshot(*state, writer);
    auto state2 = DecodeSnapshot(again, ctx);
    ASSERT_TRUE(state2.ok()) << "iteration " << i << ": " << state2.status().ToString();
    ASSERT_EQ(*state2, *state);
    ASSERT_EQ(again, bad) << "iteration " << i << ": a second encoding of one state";
  }
  RecordProperty("decoded_ok", std::to_string(decoded_ok));
  EXPECT_GT(decoded_ok, 0);
}

}  // namespace
}  // namespace streamd::snapshot_testing
