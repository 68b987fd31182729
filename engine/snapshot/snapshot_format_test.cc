// The snapshot format: round trips of random states, the summary, the refusals that are not
// corruption (version, model, layout), invariant violations, optional sections, the size bound
// and a golden encoding that pins format version 1. Corrupt bytes: snapshot_corruption_test.cc.
#include "engine/snapshot/snapshot_format.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "engine/snapshot/snapshot_layout.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/snapshot_testing.h"

namespace streamd::snapshot_testing {
namespace {

namespace L = snapshot_layout;

StatusOr<SessionState> Decode(const std::vector<uint8_t>& bytes, const SnapshotContext& ctx) {
  return DecodeSnapshot(bytes, ctx);
}

void ExpectSummaryOf(const SnapshotSummary& sum, const SessionState& s, const SnapshotContext& c) {
  EXPECT_EQ(sum.format_version, 1u);
  EXPECT_EQ(sum.id, s.id);
  EXPECT_EQ(sum.tenant, s.tenant);
  EXPECT_EQ(sum.mode, s.mode);
  EXPECT_EQ(sum.sinks, s.sinks);
  EXPECT_EQ(sum.window, s.window);
  EXPECT_EQ(sum.tokens_seen, s.tokens_seen);
  EXPECT_EQ(sum.cached_tokens, static_cast<int64_t>(s.cached_tokens.size()));
  EXPECT_EQ(sum.pending_tokens, static_cast<int64_t>(s.pending.size()));
  EXPECT_EQ(sum.metadata_entries, static_cast<int64_t>(s.metadata.size()));
  EXPECT_EQ(sum.kv_bytes, s.kv.data.size() * 2);
  EXPECT_EQ(sum.revision, s.revision);
  EXPECT_EQ(sum.created_unix_ms, s.created_unix_ms);
  EXPECT_EQ(sum.saved_unix_ms, s.saved_unix_ms);
  EXPECT_EQ(sum.model_fingerprint, c.model_fingerprint);
  EXPECT_EQ(sum.model_name, c.model_name);
  EXPECT_EQ(sum.streamd_version, c.streamd_version);
  EXPECT_EQ(sum.n_layers, c.n_layers);
  EXPECT_EQ(sum.n_kv_heads, c.n_kv_heads);
  EXPECT_EQ(sum.head_dim, c.head_dim);
  EXPECT_EQ(sum.block_size, c.block_size);
}

TEST(SnapshotFormatTest, RandomStatesRoundTripInEveryMode) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 300; ++i) {
    // Awkward layouts: odd head_dim and token counts leave payloads that need padding.
    const SnapshotContext ctx = TestContext(1 + rng() % 4, 1 + rng() % 3, 1 + rng() % 9);
    const CacheMode mode =
        std::array{CacheMode::kDense, CacheMode::kWindow, CacheMode::kSink}[i % 3];
    const SessionState state = RandomState(rng, ctx, mode);
    SCOPED_TRACE("state " + std::to_string(i));
    const std::vector<uint8_t> bytes = EncodeSnapshot(state, ctx);
    ASSERT_EQ(bytes.size(), EncodedSnapshotSize(state, ctx));
    ASSERT_EQ(bytes.size() % 8, 0u);
    auto decoded = Decode(bytes, ctx);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    ASSERT_EQ(*decoded, state);
    auto summary = ReadSnapshotSummary(bytes);
    ASSERT_TRUE(summary.ok()) << summary.status().ToString();
    ExpectSummaryOf(*summary, state, ctx);
    ASSERT_EQ(EncodeSnapshot(*decoded, ctx), bytes);  // one encoding per state

    // Into a caller's buffer, larger than needed: the same bytes, the rest untouched.
    std::vector<uint8_t> buffer(bytes.size() + 16, 0xab);
    auto written = EncodeSnapshotTo(state, ctx, buffer);
    ASSERT_TRUE(written.ok()) << written.status().ToString();
    ASSERT_EQ(*written, bytes.size());
    ASSERT_TRUE(std::equal(bytes.begin(), bytes.end(), buffer.begin()));
    ASSERT_EQ(buffer.back(), 0xab);

    // Around K/V put in place first (as a capture gathers them): the same bytes again.
    SessionState meta = state;
    meta.kv.data.clear();
    ASSERT_EQ(EncodedSnapshotSizeForKv(meta, ctx), bytes.size());
    const size_t at = SnapshotKvOffset(meta, ctx);
    ASSERT_EQ(at % 8, 0u);
    std::vector<uint8_t> around(bytes.size() + 8, 0xcd);
    // An empty state's K/V has no data pointer, and memcpy from null is undefined even for 0
    // bytes (UBSan).
    if (!state.kv.data.empty()) {
      std::memcpy(around.data() + at, state.kv.data.data(), state.kv.data.size() * 2);
    }
    auto placed = EncodeSnapshotAroundKv(meta, ctx, around);
    ASSERT_TRUE(placed.ok()) << placed.status().ToString();
    ASSERT_EQ(*placed, bytes.size());
    ASSERT_TRUE(std::equal(bytes.begin(), bytes.end(), around.begin()));
    EXPECT_FALSE(EncodeSnapshotAroundKv(meta, ctx, std::span<uint8_t>(around.data(), 8)).ok());
  }
}

TEST(SnapshotFormatTest, EdgeStatesRoundTrip) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const SnapshotContext ctx = TestContext(2, 1, 3);
  std::vector<std::function<void(SessionState*)>> edits = {
      [](SessionState* s) { s->pending.clear(); },
      [](SessionState* s) { s->metadata.clear(); },
      [](SessionState* s) {  // a fresh session: nothing cached, one pending id
        s->tokens_seen = 0;
        s->cached_tokens.clear();
        s->kv.n_tokens = 0;
        s->kv.data.clear();
        s->pending = {0};
      },
      [](SessionState* s) {
        s->metadata = {{std::string(1, '\0'), ""},
                       {std::string("\xff\xfe\x00\n\r\"\\", 7), std::string(300, '\0')},
                       {std::string(kMaxSnapshotMetadataKeyBytes, 'k'), "\xc0\x80 not UTF-8"}};
      },
      [](SessionState* s) { s->tenant = std::string(kMaxSnapshotTenantBytes, 't'); },
      [](SessionState* s) { s->tenant = "\xe6\x9d\xb1\xe4\xba\xac"; },
      [](SessionState* s) {
        s->revision = UINT64_MAX;
        s->saved_unix_ms = INT64_MAX;
        s->sampling.seed = UINT64_MAX;
      },
      [](SessionState* s) {
        s->sampling.temperature = 0;
        s->sampling.top_p = 1;
        s->sampling.presence_penalty = -0.0f;
      },
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    SCOPED_TRACE("edit " + std::to_string(i));
    SessionState state = RandomState(rng, ctx, CacheMode::kSink);
    edits[i](&state);
    const std::vector<uint8_t> bytes = EncodeSnapshot(state, ctx);
    auto decoded = Decode(bytes, ctx);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, state);
  }
}

TEST(SnapshotFormatTest, LoadsWhateverTheBlockSizeAndStreamdVersion) {
  std::mt19937_64 rng(7);
  const SnapshotContext writer = TestContext(2, 2, 8);
  const SessionState state = RandomState(rng, writer, CacheMode::kSink);
  SnapshotContext reader = writer;
  reader.block_size = 1;
  reader.streamd_version = "9.9.9";
  auto decoded = DecodeSnapshot(EncodeSnapshot(state, writer), reader);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, state);
}

TEST(SnapshotFormatTest, EncodeToNamesBothSizesWhenTheBufferIsShort) {
  std::mt19937_64 rng(8);
  const SnapshotContext ctx = TestContext(2, 2, 8);
  const SessionState state = RandomState(rng, ctx, CacheMode::kSink);
  const size_t need = EncodedSnapshotSize(state, ctx);
  std::vector<uint8_t> buffer(need - 1);
  auto written = EncodeSnapshotTo(state, ctx, buffer);
  ExpectError(written.status(), StatusCode::kInvalidArgument,
              {std::to_string(need - 1) + " bytes is too small", std::to_string(need)});
}

TEST(SnapshotFormatTest, RefusesOtherFormatVersionsNamingBoth) {
  std::mt19937_64 rng(9);
  const SnapshotContext ctx = TestContext(2, 2, 8);
  std::vector<uint8_t> bytes = EncodeSnapshot(RandomState(rng, ctx, CacheMode::kSink), ctx);
  for (uint32_t version : {0u, 3u, 0x01000000u}) {
    std::memcpy(bytes.data() + L::kHeaderVersionOffset, &version, sizeof(version));
    RewriteChecksums(bytes);  // a well-formed file of that version
    const std::string v = std::to_string(version);
    ExpectError(Decode(bytes, ctx).status(), StatusCode::kFailedPrecondition,
                {"format version " + v + " is not supported", "reads versions 1 and 2"});
    ExpectError(ReadSnapshotSummary(bytes).status(), StatusCode::kFailedPrecondition,
                {"format version " + v});
  }
}

TEST(SnapshotFormatTest, RefusesAnotherModelNamingBothFingerprintsAndNames) {
  std::mt19937_64 rng(10);
  const SnapshotContext ctx = TestContext(2, 2, 8);
  const std::vector<uint8_t> bytes = EncodeSnapshot(RandomState(rng, ctx, CacheMode::kSink), ctx);
  SnapshotContext other = ctx;
  other.model_fingerprint = "fedcba9876543210fedcba9876543210";
  other.model_name = "SmolLM2-360M-Instruct";
  ExpectError(Decode(bytes, other).status(), StatusCode::kFailedPrecondition,
              {"another model", ctx.model_fingerprint, "SmolLM2-135M-Instruct",
               other.model_fingerprint, "SmolLM2-360M-Instruct"});
  // Listing a directory does not need the model.
  EXPECT_TRUE(ReadSnapshotSummary(bytes).ok());
}

TEST(SnapshotFormatTest, RefusesAnotherKvLayoutNamingTheFields) {
  std::mt19937_64 rng(11);
  const SnapshotContext ctx = TestContext(30, 3, 64);
  const std::vector<uint8_t> bytes =
      EncodeSnapshot(RandomState(rng, ctx, CacheMode::kSink, 8), ctx);
  SnapshotContext heads = ctx;
  heads.n_kv_heads = 4;
  ExpectError(Decode(bytes, heads).status(), StatusCode::kFailedPrecondition,
              {"K/V layout", "n_kv_heads 3 (model: 4)"});
  SnapshotContext two = ctx;
  two.n_layers = 32;
  two.head_dim = 128;
  ExpectError(Decode(bytes, two).status(), StatusCode::kFailedPrecondition,
              {"n_layers 30 (model: 32)", "head_dim 64 (model: 128)"});
}

// A state with one bad field, encoded as is (the writer does not validate), is refused with a
// message that names the field.
TEST(SnapshotFormatTest, RefusesStatesThatBreakAnInvariant) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const SnapshotContext ctx = TestContext(2, 2, 4);
  struct Case {
    const char* name;
    CacheMode mode;
    std::function<void(SessionState*)> edit;
    std::vector<std::string_view> parts;
  };
  auto drop_cached = [](SessionState* s) {
    s->cached_tokens.pop_back();
    s->kv.n_tokens -= 1;
    s->kv.data.resize(static_cast<size_t>(s->kv.elements()));
  };
  const std::vector<Case> cases = {
      {"n_tokens vs tokens_seen",
       CacheMode::kSink,
       [&](SessionState* s) { drop_cached(s); },
       {"n_cached = ", "does not match tokens_seen"}},
      {"tokens_seen grows alone",
       CacheMode::kDense,
       [](SessionState* s) { s->tokens_seen -= 1; },
       {"n_cached", "tokens_seen"}},
      {"kv n_tokens",
       CacheMode::kSink,
       [](SessionState* s) { s->kv.n_tokens -= 1; },
       {"kv n_tokens = ", "n_cached"}},
      {"kv data short",
       CacheMode::kSink,
       [](SessionState* s) { s->kv.data.pop_back(); },
       {"section KV holds", "n_kv_heads 2", "head_dim 4"}},
      {"negative cached id",
       CacheMode::kSink,
       [](SessionState* s) { s->cached_tokens[0] = -1; },
       {"cached token 0 has id -1"}},
      {"negative pending id",
       CacheMode::kSink,
       [](SessionState* s) {
         s->pending = {5, -7};
       },
       {"pending token 1 has id -7"}},
      {"negative sinks", CacheMode::kSink, [](SessionState* s) { s->sinks = -1; }, {"sinks = -1"}},
      {"zero window", CacheMode::kSink, [](SessionState* s) { s->window = 0; }, {"window = 0"}},
      {"huge window",
       CacheMode::kSink,
       [](SessionState* s) { s->window = kMaxSnapshotCacheTokens + 1; },
       {"window = 16777217 is out of range"}},
      {"sinks in window mode",
       CacheMode::kWindow,
       [](SessionState* s) { s->sinks = 4; },
       {"sinks = 4 in window mode"}},
      {"sinks in dense mode",
       CacheMode::kDense,
       [](SessionState* s) { s->sinks = 1; },
       {"sinks = 1 in dense mode"}},
      {"dense past its context",
       CacheMode::kDense,
       [](SessionState* s) { s->tokens_seen = int64_t{s->window} + 1; },
       {"tokens_seen = ", "dense mode exceeds"}},
      {"negative tokens_seen",
       CacheMode::kWindow,
       [](SessionState* s) { s->tokens_seen = -3; },
       {"tokens_seen = -3"}},
      {"bad mode",
       CacheMode::kSink,
       [](SessionState* s) { s->mode = static_cast<CacheMode>(7); },
       {"cache mode code"}},
      {"zero id", CacheMode::kSink, [](SessionState* s) { s->id = SessionId{}; }, {"session_id"}},
      {"top_p",
       CacheMode::kSink,
       [](SessionState* s) { s->sampling.top_p = 1.5f; },
       {"sampling top_p = 1.5"}},
      {"temperature NaN",
       CacheMode::kSink,
       [](SessionState* s) { s->sampling.temperature = std::nanf(""); },
       {"temperature = nan"}},
      {"penalty_last_n",
       CacheMode::kSink,
       [](SessionState* s) { s->sampling.penalty_last_n = -1; },
       {"penalty_last_n = -1"}},
      {"tenant too long",
       CacheMode::kSink,
       [](SessionState* s) { s->tenant = std::string(kMaxSnapshotTenantBytes + 1, 'x'); },
       {"tenant is 257 bytes long, limit 256"}},
      {"tenant not UTF-8",
       CacheMode::kSink,
       [](SessionState* s) { s->tenant = "ab\xff"; },
       {"tenant \"ab\\xff\" is not UTF-8 (byte 2)"}},
      {"tenant overlong UTF-8",
       CacheMode::kSink,
       [](SessionState* s) { s->tenant = "\xc0\xaf"; },
       {"tenant", "not UTF-8"}},
      {"tenant surrogate",
       CacheMode::kSink,
       [](SessionState* s) { s->tenant = "\xed\xa0\x80"; },
       {"tenant", "not UTF-8"}},
      {"empty metadata key",
       CacheMode::kSink,
       [](SessionState* s) { s->metadata[""] = "v"; },
       {"METADATA: entry 0 has an empty key"}},
      {"metadata key too long",
       CacheMode::kSink,
       [](SessionState* s) {
         s->metadata[std::string(kMaxSnapshotMetadataKeyBytes + 1, 'k')] = "";
       },
       {"key is 257 bytes long, limit 256"}},
      {"metadata value too long",
       CacheMode::kSink,
       [](SessionState* s) {
         s->metadata["k"] = std::string(kMaxSnapshotMetadataValueBytes + 1, 'v');
       },
       {"value is 1048577 bytes long"}},
      {"too many metadata entries",
       CacheMode::kSink,
       [](SessionState* s) {
         s->metadata.clear();
         for (int i = 0; i <= kMaxSnapshotMetadataEntries; ++i) s->metadata[std::to_string(i)] = "";
       },
       {"n_metadata = 1025 is out of range [0, 1024]"}},
      {"metadata too large",
       CacheMode::kSink,
       [](SessionState* s) {
         for (int i = 0; i < 5; ++i) s->metadata[std::to_string(i)] = std::string(1 << 20, 'v');
       },
       {"section METADATA is", "limit 4194304"}},
      {"negative created",
       CacheMode::kSink,
       [](SessionState* s) { s->created_unix_ms = -1; },
       {"created_unix_ms = -1"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    SessionState state = RandomState(rng, ctx, c.mode);
    if (state.tokens_seen < 2) {  // every edit needs two cached tokens
      state.window = std::max(state.window, 2);
      state.tokens_seen = 2;
      const int64_t n = HeldTokens(2, state.sinks, state.window, state.mode);
      state.cached_tokens.assign(static_cast<size_t>(n), 1);
      state.kv.n_tokens = n;
      state.kv.data.assign(static_cast<size_t>(state.kv.elements()), 0x3c00);
    }
    c.edit(&state);
    const std::vector<uint8_t> bytes = EncodeSnapshot(state, ctx);
    const Status s = Decode(bytes, ctx).status();
    ExpectError(s, StatusCode::kDataLoss, {});
    for (std::string_view p : c.parts) EXPECT_TRUE(Contains(s.message(), p));
  }
}

// The layout rule for later writers: an optional section (lower-case tag) after METADATA is
// skipped; an unknown required one is refused.
TEST(SnapshotFormatTest, SkipsOptionalSectionsAndRefusesUnknownRequiredOnes) {
  std::mt19937_64 rng(12);
  const SnapshotContext ctx = TestContext(2, 2, 4);
  const SessionState state = RandomState(rng, ctx, CacheMode::kSink);
  const std::vector<uint8_t> bytes = EncodeSnapshot(state, ctx);
  const uint8_t payload[5] = {1, 2, 3, 4, 5};
  auto with_section = [&](uint32_t tag) { return InsertSectionBeforeEnd(bytes, tag, payload); };
  auto decoded = Decode(with_section(L::Tag('n', 'o', 't', 'e')), ctx);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, state);
  // Skipped, but checked: a damaged optional section is damage.
  std::vector<uint8_t> damaged = with_section(L::Tag('n', 'o', 't', 'e'));
  damaged[bytes.size() - L::kSectionHeaderSize + L::kSectionHeaderSize + 2] ^= 1;
  ExpectError(Decode(damaged, ctx).status(), StatusCode::kDataLoss,
              {"section optional tag \"note\"", "checksum mismatch"});
  ExpectError(Decode(with_section(L::Tag('N', 'O', 'T', 'E')), ctx).status(), StatusCode::kDataLoss,
              {"expected section END at offset", "found unknown tag \"NOTE\" (0x45544f4e)"});
  // Optional sections come after every required one, not between them.
  std::vector<uint8_t> early = bytes;
  const std::vector<SectionSpan> sections = Sections(early);
  ASSERT_EQ(sections.size(), 5u);
  early[sections[1].header] = 't';  // TOKS -> tOKS
  ExpectError(Decode(early, ctx).status(), StatusCode::kDataLoss,
              {"expected section TOKENS", "found optional tag \"tOKS\""});
}

TEST(SnapshotFormatTest, SummaryReadsOnlyTheHeaderAndMeta) {
  std::mt19937_64 rng(13);
  const SnapshotContext ctx = TestContext(2, 2, 4);
  SessionState state = RandomState(rng, ctx, CacheMode::kSink, 8);
  state.tokens_seen = 100;
  state.cached_tokens.assign(
      static_cast<size_t>(HeldTokens(100, state.sinks, state.window, state.mode)), 3);
  state.kv.n_tokens = static_cast<int64_t>(state.cached_tokens.size());
  state.kv.data.assign(static_cast<size_t>(state.kv.elements()), 1);
  std::vector<uint8_t> bytes = EncodeSnapshot(state, ctx);
  const std::vector<SectionSpan> sections = Sections(bytes);
  ASSERT_EQ(sections.size(), 5u);
  bytes.resize(sections[1].header + 10);  // cut inside the TOKENS header
  auto summary = ReadSnapshotSummary(bytes);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  ExpectSummaryOf(*summary, state, ctx);
  ExpectError(Decode(bytes, ctx).status(), StatusCode::kDataLoss, {"truncated"});
}

// A listing reads kSnapshotSummaryPrefixBytes of each file, whatever its strings.
TEST(SnapshotFormatTest, SummaryPrefixHoldsTheLargestMeta) {
  std::mt19937_64 rng(14);
  SnapshotContext ctx = TestContext(2, 2, 4);
  ctx.streamd_version = std::string(kMaxSnapshotVersionBytes, 'v');
  ctx.model_fingerprint = std::string(kMaxSnapshotFingerprintBytes, 'f');
  ctx.model_name = std::string(kMaxSnapshotModelNameBytes, 'n');
  SessionState state = RandomState(rng, ctx, CacheMode::kSink);
  state.tenant = std::string(kMaxSnapshotTenantBytes, 't');
  const std::vector<uint8_t> bytes = EncodeSnapshot(state, ctx);
  auto summary = ReadSnapshotSummary(
      std::span(bytes).first(std::min(bytes.size(), kSnapshotSummaryPrefixBytes)));
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  ExpectSummaryOf(*summary, state, ctx);
}

TEST(SnapshotFormatTest, RefusesFilesThatAreNotSnapshots) {
  const SnapshotContext ctx = TestContext();
  for (std::string text :
       {std::string(), std::string("GGUF\x03"), std::string("STRMD"), std::string(100, '\n')}) {
    const std::vector<uint8_t> bytes(text.begin(), text.end());
    const Status s = Decode(bytes, ctx).status();
    ExpectError(s, StatusCode::kDataLoss, {});
    EXPECT_TRUE(Contains(s.message(), text.rfind("STRMD", 0) == 0 ? "truncated"
                                                                  : "not a streamd "
                                                                    "snapshot"));
  }
}

// Size goal: at most 1.1x the cached K/V bytes + 64 KiB, for SmolLM2's shape.
TEST(SnapshotFormatTest, SizeIsTheKvImagePlusLittle) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const SnapshotContext ctx = TestContext(30, 3, 64);
  for (int32_t window : {252, 1020}) {
    SessionState state = RandomState(rng, ctx, CacheMode::kSink, 1);
    state.sinks = 4;
    state.window = window;
    state.tokens_seen = 1000000;
    // The keys the next query reads: the sinks and the window's last W - 1 tokens.
    state.cached_tokens.assign(static_cast<size_t>(4 + window - 1), 17);
    state.pending = {42};
    state.kv.n_tokens = 4 + window - 1;
    state.kv.data.assign(static_cast<size_t>(state.kv.elements()), 0x3c00);
    state.metadata = {{"chat.template_state", std::string(2000, 's')}, {"client", "test"}};
    const std::vector<uint8_t> bytes = EncodeSnapshot(state, ctx);
    const double kv_bytes = static_cast<double>(state.kv.data.size() * 2);
    EXPECT_EQ(kv_bytes, 23040.0 * (4 + window - 1));
    EXPECT_LE(static_cast<double>(bytes.size()), 1.1 * kv_bytes + 65536);
    RecordProperty("snapshot_bytes_4+" + std::to_string(window), std::to_string(bytes.size()));
    auto decoded = Decode(bytes, ctx);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, state);
  }
}

// Format version 1 is frozen: this exact state always encodes to these exact bytes. If this
// fails, the writer changed the format: a new version takes the change (docs/SESSIONS.md).
TEST(SnapshotFormatTest, GoldenEncodingOfVersion1) {
  SessionState s;
  s.id = SessionId{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  s.tenant = "acme";
  s.mode = CacheMode::kSink;
  s.sinks = 2;
  s.window = 3;
  s.sampling = SamplingParams{};
  s.tokens_seen = 9;
  s.cached_tokens = {1, 2, 8, 9};  // sinks 0, 1; the window positions 7, 8 the next query reads
  s.pending = {10};
  s.kv.n_layers = 1;
  s.kv.n_kv_heads = 1;
  s.kv.head_dim = 3;
  s.kv.n_tokens = 4;
  for (int i = 0; i < 24; ++i) s.kv.data.push_back(static_cast<uint16_t>(0x3c00 + i));
  s.metadata = {{"a", "1"}, {"chat", "{}"}};
  s.revision = 12;
  s.created_unix_ms = 1700000000000;
  s.saved_unix_ms = 1700000001234;
  SnapshotContext ctx = TestContext(1, 1, 3);
  const std::vector<uint8_t> bytes = EncodeSnapshot(s, ctx);
  EXPECT_EQ(bytes.size(), 472u);
  EXPECT_EQ(XXH3_64bits(bytes.data(), bytes.size()), 0x2a84795f596127feULL);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 8), "STRMDSNP");
  auto decoded = Decode(bytes, ctx);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, s);
}

}  // namespace
}  // namespace streamd::snapshot_testing
