// Per-model snapshot directories (model_snapshot_dir.h) on a real file system, with snapshots of
// real sessions: the flat layout is migrated for this model only (every other model's file and
// every unreadable one untouched, byte for byte), an older flat copy never replaces a newer one,
// and a snapshot of another model inside this model's directory, or offered to Import, is
// refused with both models named and never moved.
#include "engine/core/model_snapshot_dir.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "engine/core/session_persister.h"
#include "tests/support/engine_test_util.h"
#include "tests/support/store_test_util.h"

namespace streamd {
namespace {

using namespace streamd::testing;

std::string ModelDirRoot() { return store_testing::TempDir("streamd-model-dir"); }
using store_testing::Files;

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void WriteAll(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Two models of the same K/V shape (the synthetic one), told apart by their fingerprints.
SnapshotContext ModelContext(const Engine& engine, std::string fingerprint, std::string name) {
  const LlamaConfig& c = engine.model().config();
  SnapshotContext ctx;
  ctx.model_fingerprint = std::move(fingerprint);
  ctx.model_name = std::move(name);
  ctx.n_layers = c.n_layers;
  ctx.n_kv_heads = c.n_kv_heads;
  ctx.head_dim = c.head_dim;
  ctx.block_size = engine.config().block_size;
  ctx.streamd_version = "test";
  return ctx;
}

const std::string kFingerprintA = "a1b2c3d4e5f60718293a4b5c6d7e8f90";
const std::string kFingerprintB = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";

// A real session's state after `n` tokens.
SessionState SessionOf(Engine& engine, size_t n, uint64_t seed) {
  auto id = engine.Open(Greedy());
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_TRUE(engine.Append(*id, RandomTokens(n, seed)).ok());
  auto state = engine.Capture(*id);
  EXPECT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_TRUE(engine.Close(*id).ok());
  return *std::move(state);
}

std::string SnapName(const SessionState& s) { return s.id.ToString() + ".snap"; }

TEST(ModelSnapshotDirTest, NameIsTheFingerprintsFirstSixteenHexDigits) {
  EXPECT_EQ(ModelSnapshotDirName(kFingerprintA), "a1b2c3d4e5f60718");
  ModelDirMigration m;
  auto engine = MakeEngine();
  EXPECT_EQ(OpenModelSnapshotStore(ModelDirRoot(), ModelContext(*engine, "tiny", "t"), &m)
                .status()
                .code(),
            StatusCode::kInvalidArgument)
      << "a fingerprint that names no directory is refused, not used as a path";
  EXPECT_FALSE(
      OpenModelSnapshotStore(ModelDirRoot(), ModelContext(*engine, "../../etc/passwd0000", "t"), &m)
          .ok());
}

TEST(ModelSnapshotDirTest, MigratesThisModelsFlatSnapshotsAndLeavesEveryOtherFileAlone) {
  auto engine = MakeEngine();
  const SnapshotContext a = ModelContext(*engine, kFingerprintA, "model-a");
  const SnapshotContext b = ModelContext(*engine, kFingerprintB, "model-b");
  const std::string root = ModelDirRoot();
  const SessionState a0 = SessionOf(*engine, 20, 1), a1 = SessionOf(*engine, 33, 2);
  const SessionState b0 = SessionOf(*engine, 17, 3);
  const std::vector<uint8_t> a0_bytes = EncodeSnapshot(a0, a), a1_bytes = EncodeSnapshot(a1, a);
  const std::vector<uint8_t> b0_bytes = EncodeSnapshot(b0, b);
  const std::vector<uint8_t> junk = {'n', 'o', 't', ' ', 'a', ' ', 's', 'n', 'a', 'p'};
  const std::string junk_name = SessionId::Random().ToString() + ".snap";
  WriteAll(root + "/" + SnapName(a0), a0_bytes);
  WriteAll(root + "/" + SnapName(a1), a1_bytes);
  WriteAll(root + "/" + SnapName(b0), b0_bytes);
  WriteAll(root + "/" + junk_name, junk);
  WriteAll(root + "/notes.txt", {'h', 'i'});

  ModelDirMigration m;
  auto store = OpenModelSnapshotStore(root, a, &m);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const std::string dir_a = root + "/" + ModelSnapshotDirName(kFingerprintA);
  EXPECT_EQ((*store)->dir(), dir_a);
  EXPECT_EQ(m.dir, dir_a);
  EXPECT_EQ(m.moved, 2);
  EXPECT_EQ(m.superseded, 0);
  EXPECT_EQ(m.other_models, 1);
  ASSERT_EQ(m.unreadable.size(), 1u);
  EXPECT_NE(m.unreadable[0].find(junk_name), std::string::npos) << m.unreadable[0];
  EXPECT_TRUE(m.failed.empty());
  EXPECT_EQ(Files(dir_a), (std::vector<std::string>{std::min(SnapName(a0), SnapName(a1)),
                                                    std::max(SnapName(a0), SnapName(a1))}));
  EXPECT_EQ(ReadAll(dir_a + "/" + SnapName(a0)), a0_bytes);
  EXPECT_EQ(ReadAll(dir_a + "/" + SnapName(a1)), a1_bytes);
  // The other model's snapshot, the unreadable file and the stranger: exactly as they were.
  EXPECT_EQ(ReadAll(root + "/" + SnapName(b0)), b0_bytes);
  EXPECT_EQ(ReadAll(root + "/" + junk_name), junk);
  EXPECT_TRUE(Exists(root + "/notes.txt"));
  EXPECT_FALSE(Exists(root + "/rejected")) << "nothing of another model is ever set aside";

  // The persister over the model's store finds both and restores them (another engine).
  auto other = MakeEngine();
  SessionPersister pa(*other, std::move(store).value(), a, {}, {});
  std::vector<std::pair<SessionId, Status>> refused;
  EXPECT_EQ(pa.Scan(&refused).size(), 2u);
  EXPECT_TRUE(refused.empty());
  EXPECT_TRUE(pa.Load(a0.id).ok());

  // The second model's daemon on the same root takes only its own, and never looks into A's.
  ModelDirMigration mb;
  auto store_b = OpenModelSnapshotStore(root, b, &mb);
  ASSERT_TRUE(store_b.ok()) << store_b.status().ToString();
  EXPECT_EQ(mb.moved, 1);
  EXPECT_EQ(mb.other_models, 0) << "A's snapshots are in A's directory now";
  EXPECT_EQ(mb.unreadable.size(), 1u);
  const std::string dir_b = root + "/" + ModelSnapshotDirName(kFingerprintB);
  EXPECT_EQ(Files(dir_b), std::vector<std::string>{SnapName(b0)});
  EXPECT_EQ(ReadAll(dir_b + "/" + SnapName(b0)), b0_bytes);
  EXPECT_EQ(ReadAll(dir_a + "/" + SnapName(a1)), a1_bytes);

  // A restart of A: nothing left to move, its sessions where they were.
  ModelDirMigration again;
  ASSERT_TRUE(OpenModelSnapshotStore(root, a, &again).ok());
  EXPECT_EQ(again.moved, 0);
  EXPECT_EQ(Files(dir_a).size(), 2u);
}

TEST(ModelSnapshotDirTest, AnOlderFlatCopyNeverReplacesTheOneInTheModelDirectory) {
  auto engine = MakeEngine();
  const SnapshotContext a = ModelContext(*engine, kFingerprintA, "model-a");
  // One session at two revisions.
  auto id = engine->Open(Greedy());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(engine->Append(*id, RandomTokens(10, 7)).ok());
  auto older = engine->Capture(*id);
  ASSERT_TRUE(engine->Append(*id, RandomTokens(5, 8)).ok());
  auto newer = engine->Capture(*id);
  ASSERT_TRUE(older.ok() && newer.ok());
  ASSERT_LT(older->revision, newer->revision);
  const std::vector<uint8_t> old_bytes = EncodeSnapshot(*older, a);
  const std::vector<uint8_t> new_bytes = EncodeSnapshot(*newer, a);
  const std::string name = id->ToString() + ".snap";
  const std::string sub = ModelSnapshotDirName(kFingerprintA);

  {  // The model's directory holds the newer one: the flat copy goes to rejected/, kept.
    const std::string root = ModelDirRoot();
    ASSERT_EQ(::mkdir((root + "/" + sub).c_str(), 0700), 0);
    WriteAll(root + "/" + sub + "/" + name, new_bytes);
    WriteAll(root + "/" + name, old_bytes);
    ModelDirMigration m;
    ASSERT_TRUE(OpenModelSnapshotStore(root, a, &m).ok());
    EXPECT_EQ(m.moved, 0);
    EXPECT_EQ(m.superseded, 1);
    EXPECT_EQ(ReadAll(root + "/" + sub + "/" + name), new_bytes);
    EXPECT_FALSE(Exists(root + "/" + name));
    const auto rejected = Files(root + "/" + sub + "/rejected");
    ASSERT_EQ(rejected.size(), 1u);
    EXPECT_EQ(rejected[0].rfind(name + ".superseded-by-revision-", 0), 0u) << rejected[0];
    EXPECT_EQ(ReadAll(root + "/" + sub + "/rejected/" + rejected[0]), old_bytes);
  }
  {  // The flat one is newer (an old replica wrote it last): it takes the place.
    const std::string root = ModelDirRoot();
    ASSERT_EQ(::mkdir((root + "/" + sub).c_str(), 0700), 0);
    WriteAll(root + "/" + sub + "/" + name, old_bytes);
    WriteAll(root + "/" + name, new_bytes);
    ModelDirMigration m;
    ASSERT_TRUE(OpenModelSnapshotStore(root, a, &m).ok());
    EXPECT_EQ(m.moved, 1);
    EXPECT_EQ(ReadAll(root + "/" + sub + "/" + name), new_bytes);
    EXPECT_FALSE(Exists(root + "/" + name));
  }
  {  // Another replica linked it in and has not unlinked the flat name yet: one file, no copy.
    const std::string root = ModelDirRoot();
    ASSERT_EQ(::mkdir((root + "/" + sub).c_str(), 0700), 0);
    WriteAll(root + "/" + name, new_bytes);
    ASSERT_EQ(::link((root + "/" + name).c_str(), (root + "/" + sub + "/" + name).c_str()), 0);
    ModelDirMigration m;
    ASSERT_TRUE(OpenModelSnapshotStore(root, a, &m).ok());
    EXPECT_EQ(m.moved, 1);
    EXPECT_EQ(m.superseded, 0);
    EXPECT_FALSE(Exists(root + "/" + name));
    EXPECT_FALSE(Exists(root + "/" + sub + "/rejected"));
    EXPECT_EQ(ReadAll(root + "/" + sub + "/" + name), new_bytes);
  }
}

TEST(ModelSnapshotDirTest, AnotherModelsSnapshotIsRefusedNamingBothModelsAndNeverMoved) {
  auto engine = MakeEngine();
  const SnapshotContext a = ModelContext(*engine, kFingerprintA, "model-a");
  const SnapshotContext b = ModelContext(*engine, kFingerprintB, "model-b");
  const std::string root = ModelDirRoot();
  ModelDirMigration m;
  auto store = OpenModelSnapshotStore(root, a, &m);
  ASSERT_TRUE(store.ok());
  const std::string dir = (*store)->dir();
  const SessionState mine = SessionOf(*engine, 12, 11), foreign = SessionOf(*engine, 14, 12);
  const std::vector<uint8_t> foreign_bytes = EncodeSnapshot(foreign, b);
  WriteAll(dir + "/" + SnapName(mine), EncodeSnapshot(mine, a));
  WriteAll(dir + "/" + SnapName(foreign), foreign_bytes);  // copied in by hand

  struct Refusal {
    std::string file, moved_to;
    Status why;
  };
  std::vector<Refusal> refusals;
  PersisterHooks hooks;
  hooks.on_rejected = [&](const std::string& file, const std::string& moved_to, const Status& why) {
    refusals.push_back({file, moved_to, why});
  };
  auto other = MakeEngine();
  SessionPersister pa(*other, std::move(store).value(), a, {}, hooks);
  std::vector<std::pair<SessionId, Status>> refused;
  const auto found = pa.Scan(&refused);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].id, mine.id);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].first, foreign.id);
  const auto names_both = [](const Status& s) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    for (const std::string& part :
         {std::string("model-a"), std::string("model-b"), kFingerprintA, kFingerprintB}) {
      EXPECT_NE(s.message().find(part), std::string::npos) << part << " not in " << s.message();
    }
  };
  names_both(refused[0].second);
  ASSERT_EQ(refusals.size(), 1u);
  EXPECT_EQ(refusals[0].file, SnapName(foreign));
  EXPECT_EQ(refusals[0].moved_to, "") << "another model's snapshot must stay where it is";
  EXPECT_EQ(ReadAll(dir + "/" + SnapName(foreign)), foreign_bytes);
  EXPECT_FALSE(Exists(dir + "/rejected"));

  // A Resume's load of it: refused the same way, still not moved.
  auto loaded = pa.Load(foreign.id);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(loaded.status().message().find("another model"), std::string::npos);
  EXPECT_EQ(ReadAll(dir + "/" + SnapName(foreign)), foreign_bytes);
  EXPECT_FALSE(Exists(dir + "/rejected"));

  // Import of another model's snapshot: refused naming both, nothing written.
  const SessionState offered = SessionOf(*engine, 9, 13);
  auto imported = pa.Import(EncodeSnapshot(offered, b));
  ASSERT_FALSE(imported.ok());
  EXPECT_EQ(imported.status().code(), StatusCode::kFailedPrecondition);
  for (const std::string& part : {kFingerprintA, kFingerprintB}) {
    EXPECT_NE(imported.status().message().find(part), std::string::npos)
        << part << " not in " << imported.status().message();
  }
  EXPECT_FALSE(Exists(dir + "/" + SnapName(offered)));
  EXPECT_FALSE(Exists(root + "/" + SnapName(offered)));

  // A damaged snapshot of this directory is still set aside as before.
  const SessionState damaged = SessionOf(*engine, 8, 14);
  std::vector<uint8_t> damaged_bytes = EncodeSnapshot(damaged, a);
  damaged_bytes.resize(damaged_bytes.size() - 100);
  WriteAll(dir + "/" + SnapName(damaged), damaged_bytes);
  EXPECT_FALSE(pa.Load(damaged.id).ok());
  EXPECT_FALSE(Exists(dir + "/" + SnapName(damaged)));
  EXPECT_EQ(Files(dir + "/rejected").size(), 1u);
}

}  // namespace
}  // namespace streamd
