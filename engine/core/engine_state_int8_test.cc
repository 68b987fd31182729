// Engine::Capture and Engine::Restore with int8 KV caches: a session of an int8 engine goes
// through the snapshot format (in place, as the persister reads it) into another int8 engine
// with the same scales bit for bit and continues token for token; into an f16 engine, or an
// int8 one with other scales, it is converted with the snapshot's scales; an f16 snapshot still
// goes into an int8 engine; an int8 state without scales is refused before it is admitted.
#include <gtest/gtest.h>

#include "engine/cache/kv_convert.h"
#include "engine/core/int8_engine_test_util.h"

namespace streamd {
namespace {

using namespace streamd::testing;

class EngineStateInt8Test : public ::testing::Test {
 protected:
  void SetUp() override {
    scales_ = CalibratedScales(1.2f);
    other_scales_ = CalibratedScales(2.0f);
  }

  std::shared_ptr<const KvInt8Scales> scales_, other_scales_;
};

TEST_F(EngineStateInt8Test, RestoredInt8SessionsContinueTokenForTokenThroughASnapshot) {
  auto a = MakeCacheEngine(scales_, 64 << 20);
  // b has its own copy of the same numbers (a replica that loaded the same plan).
  auto same = KvInt8Scales::Make(scales_->n_layers(), scales_->n_kv_heads(), scales_->head_dim(),
                                 scales_->k(), scales_->v());
  ASSERT_TRUE(same.ok());
  auto b = MakeCacheEngine(*same);
  Collector events, events_b;
  for (int i = 0; i < 2; ++i) {  // other sessions in b first: other block numbers
    auto other = b->Open(Greedy());
    ASSERT_TRUE(other.ok());
    ASSERT_TRUE(b->Append(*other, RandomTokens(70 + 9 * i, 40 + i)).ok());
  }
  auto id = a->Open(Greedy());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(a->Append(*id, RandomTokens(300, 7)).ok());  // far past S + W = 44
  GenerateN(*a, events, *id, 15);
  auto state = a->Capture(*id);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  ASSERT_EQ(state->kv.dtype, kernels::KvDtype::kInt8);
  EXPECT_EQ(state->kv.scales, scales_);
  EXPECT_EQ(state->kv.bytes(), state->kv.elements());
  EXPECT_TRUE(state->kv.data.empty());

  // Through the snapshot format, K/V left in the bytes, as SessionPersister::Load does.
  const SnapshotContext ctx = ContextOf(*a);
  const std::vector<uint8_t> bytes = EncodeSnapshot(*state, ctx);
  EXPECT_LT(bytes.size(), static_cast<size_t>(state->kv.elements()) * 2);  // under f16's K/V
  KvView kv;
  auto decoded = DecodeSnapshot(bytes, ctx, &kv);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  ASSERT_TRUE(b->Restore(*decoded, kv).ok());
  auto moved = b->Capture(*id);
  ASSERT_TRUE(moved.ok());
  moved->saved_unix_ms = state->saved_unix_ms;
  EXPECT_EQ(*moved, *state) << "the int8 K/V are not bit for bit the ones captured";
  EXPECT_EQ(GenerateN(*a, events, *id, 40), GenerateN(*b, events_b, *id, 40));
  ASSERT_TRUE(a->Append(*id, RandomTokens(90, 8)).ok());
  ASSERT_TRUE(b->Append(*id, RandomTokens(90, 8)).ok());
  EXPECT_EQ(GenerateN(*a, events, *id, 20), GenerateN(*b, events_b, *id, 20));
}

TEST_F(EngineStateInt8Test, Int8SnapshotsConvertIntoOtherPoolsAndF16OnesStillLoad) {
  auto a = MakeCacheEngine(scales_);
  Collector events;
  auto id = a->Open(Greedy());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(a->Append(*id, RandomTokens(150, 9)).ok());
  GenerateN(*a, events, *id, 5);
  auto state = a->Capture(*id);
  ASSERT_TRUE(state.ok());
  const SnapshotContext ctx = ContextOf(*a);
  auto decoded = DecodeSnapshot(EncodeSnapshot(*state, ctx), ctx);
  ASSERT_TRUE(decoded.ok());

  // Into an f16 engine: the values the snapshot's scales give.
  auto f16 = MakeCacheEngine(nullptr);
  ASSERT_TRUE(f16->Restore(*decoded).ok());
  auto in_f16 = f16->Capture(*id);
  ASSERT_TRUE(in_f16.ok());
  auto dequantized = DequantizedKv(state->kv);
  ASSERT_TRUE(dequantized.ok());
  EXPECT_EQ(in_f16->kv, *dequantized);

  // Into an int8 engine of other scales: requantized with its own.
  auto wide = MakeCacheEngine(other_scales_);
  ASSERT_TRUE(wide->Restore(*decoded).ok());
  auto in_wide = wide->Capture(*id);
  ASSERT_TRUE(in_wide.ok());
  EXPECT_EQ(in_wide->kv.scales, other_scales_);
  EXPECT_NE(in_wide->kv.data_i8, state->kv.data_i8);
  Collector wide_events;
  EXPECT_EQ(GenerateN(*wide, wide_events, *id, 5).size(), 5u);

  // The f16 session's state back into an int8 engine of the first scales: quantized again to
  // the very int8 values it started from (dequantized rows requantize to themselves).
  ASSERT_TRUE(a->Close(*id).ok());
  ASSERT_TRUE(a->Restore(*in_f16).ok());
  auto back = a->Capture(*id);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->kv == state->kv);
  Collector f16_events;
  EXPECT_EQ(GenerateN(*f16, f16_events, *id, 5).size(), 5u);
}

TEST_F(EngineStateInt8Test, Int8StatesWithoutUsableScalesAreRefusedBeforeAdmission) {
  auto a = MakeCacheEngine(scales_);
  auto id = a->Open(Greedy());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(a->Append(*id, RandomTokens(60, 4)).ok());
  Collector events;
  GenerateN(*a, events, *id, 2);
  auto state = a->Capture(*id);
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(a->Close(*id).ok());
  auto b = MakeCacheEngine(nullptr);
  SessionState bad = *state;
  bad.kv.scales = nullptr;
  Status s = b->Restore(bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("restore: int8 K/V without their scales"), std::string::npos)
      << s.message();
  bad = *state;
  bad.kv.data_i8.pop_back();
  s = b->Restore(bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(b->List().empty());
  EXPECT_EQ(b->Stats().blocks_reserved, 0);
  ASSERT_TRUE(b->Restore(*state).ok());  // the sound state is still welcome
}

}  // namespace
}  // namespace streamd
