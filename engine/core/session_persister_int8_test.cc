// SessionPersister with int8 KV caches, the daemon's own paths: Offload gathers the int8 K/V
// straight into the snapshot buffer (format version 2, half the K/V bytes of f16), Load on
// another replica of the same scales restores them from the read buffer bit for bit, and
// Export / Import moves the session to an f16 replica, which takes the dequantized values.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "engine/cache/kv_convert.h"
#include "engine/core/session_persister.h"
#include "tests/support/int8_engine_test_util.h"

namespace streamd {
namespace {

using namespace std::chrono_literals;
using namespace streamd::testing;

std::string PersisterDir() {
  char tmpl[] = "/tmp/streamd-persister-int8-XXXXXX";
  return ::mkdtemp(tmpl);
}

std::unique_ptr<SessionPersister> MakePersister(Engine& engine, const std::string& dir) {
  auto store = SnapshotStore::Open(dir);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return std::make_unique<SessionPersister>(engine, std::move(store).value(), ContextOf(engine),
                                            PersisterOptions{10ms, 10ms}, PersisterHooks{});
}

TEST(SessionPersisterInt8Test, Int8SessionsGoThroughTheStoreAndExportBitForBitOrDequantized) {
  const std::string dir = PersisterDir(), other_dir = PersisterDir();
  const auto scales = CalibratedScales(1.2f);
  auto a = MakeCacheEngine(scales);
  auto pa = MakePersister(*a, dir);
  auto id = a->Open(Greedy());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(a->Append(*id, RandomTokens(300, 5)).ok());
  Collector events;
  GenerateN(*a, events, *id, 10);
  auto state = a->Capture(*id);
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->kv.dtype, kernels::KvDtype::kInt8);
  // The reference: the same state restored directly (bit for bit) into an engine of its own.
  auto ref = MakeCacheEngine(scales);
  ASSERT_TRUE(ref->Restore(*state).ok());

  ASSERT_TRUE(pa->Offload(*id).ok());
  EXPECT_FALSE(a->Get(*id).ok()) << "offloaded: no longer resident";
  auto summary = pa->Summary(*id);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->format_version, 2u);
  EXPECT_EQ(summary->kv_dtype, kernels::KvDtype::kInt8);
  EXPECT_EQ(summary->kv_bytes, static_cast<uint64_t>(state->kv.elements()));

  // Another replica over the same directory, its own copy of the same scales.
  auto same = KvInt8Scales::Make(scales->n_layers(), scales->n_kv_heads(), scales->head_dim(),
                                 scales->k(), scales->v());
  ASSERT_TRUE(same.ok());
  auto b = MakeCacheEngine(*same);
  auto pb = MakePersister(*b, dir);
  auto loaded = pb->Load(*id);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto in_b = b->Capture(*id);
  ASSERT_TRUE(in_b.ok());
  in_b->saved_unix_ms = state->saved_unix_ms;
  EXPECT_EQ(*in_b, *state);
  Collector ref_events, b_events;
  EXPECT_EQ(GenerateN(*b, b_events, *id, 20), GenerateN(*ref, ref_events, *id, 20));

  // Export from b, Import into an f16 replica: the values b's scales give.
  auto exported = pb->Export(*id);
  ASSERT_TRUE(exported.ok()) << exported.status().ToString();
  auto c = MakeCacheEngine(nullptr);
  auto pc = MakePersister(*c, other_dir);
  auto b_state = b->Capture(*id);
  ASSERT_TRUE(b_state.ok());
  auto imported = pc->Import(*exported);
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_TRUE(imported->resident);
  auto in_c = c->Capture(*id);
  ASSERT_TRUE(in_c.ok());
  auto dequantized = DequantizedKv(b_state->kv);
  ASSERT_TRUE(dequantized.ok());
  EXPECT_TRUE(in_c->kv == *dequantized);
  Collector c_events;
  EXPECT_EQ(GenerateN(*c, c_events, *id, 5).size(), 5u);

  pa.reset();
  pb.reset();
  pc.reset();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(other_dir);
}

}  // namespace
}  // namespace streamd
