// End-to-end: two models share one snapshot directory (the default config's, as two daemons on
// one host have it) and neither touches the other's sessions (docs/SESSIONS.md, "Where snapshots
// live"). The second model is the default one rewritten with another general.name (GgufWriter):
// another fingerprint, the same weights. Model A leaves three sessions, one of them in the flat
// layout of an older streamd; a daemon of model B serves sessions of its own on the same
// directory and leaves every file of A as it was; A, restarted, resumes all three (the flat one
// migrated into its directory) exactly as a daemon that never stopped, and B's files stay as
// B left them.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "tests/e2e/daemon_process.h"
#include "tests/e2e/durability_fixture.h"
#include "tests/e2e/durability_util.h"
#include "tests/e2e/e2e_util.h"

namespace streamd::e2e {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// `from` with general.name replaced by `name`, written to `to`.
Status WriteRenamedModel(const std::string& from, const std::string& to, const std::string& name) {
  STREAMD_ASSIGN_OR_RETURN(auto file, gguf::GgufFile::Open(from));
  gguf::GgufWriter w;
  w.SetAlignment(static_cast<uint32_t>(file->alignment()));
  for (const auto& [key, value] : file->metadata()) {
    if (key == "general.alignment") continue;
    w.Add(key, key == "general.name" ? gguf::MakeString(name) : value);
  }
  for (const gguf::TensorInfo& t : file->tensors()) {
    w.AddRawTensor(t.name, static_cast<uint32_t>(t.type), t.dims,
                   std::vector<uint8_t>(t.data, t.data + t.size_bytes));
  }
  return w.WriteFile(to);
}

// Every file under `dir` (recursively) with its bytes.
std::map<std::string, std::vector<uint8_t>> Tree(const std::string& dir) {
  std::map<std::string, std::vector<uint8_t>> out;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file()) out[e.path().string()] = ReadBytes(e.path().string());
  }
  return out;
}

std::map<std::string, std::vector<uint8_t>> Only(
    const std::map<std::string, std::vector<uint8_t>>& tree, const std::string& prefix) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& [path, bytes] : tree) {
    if (path.rfind(prefix, 0) == 0) out[path] = bytes;
  }
  return out;
}

TEST_F(DurabilityE2eTest, TwoModelsShareOneDirectoryAndNeverTouchEachOthersSessions) {
  TempDir tmp;
  const std::string root = tmp.Sub("state");
  const std::string second = tmp.Sub("models") + "/second.gguf";
  const Status written = WriteRenamedModel(ModelPath(), second, "SmolLM2-second");
  ASSERT_TRUE(written.ok()) << written.ToString();
  const std::string dir_a = ModelDir(root), dir_b = ModelDir(root, second);
  ASSERT_NE(dir_a, dir_b) << "the renamed model must have another fingerprint";

  // Model A: three sessions, detached; SIGTERM writes them.
  constexpr int kA = 3, kB = 2;
  std::vector<std::string> ids_a(kA), ids_b(kB);
  std::vector<std::vector<int32_t>> contexts_a(kA);
  {
    auto a = DaemonProcess::Start(Flags(root));
    ASSERT_NE(a, nullptr);
    for (int i = 0; i < kA; ++i) {
      auto s = MakeSession(*a, Words(13 * i, 7 + i), 3, &ids_a[i], &contexts_a[i]);
      ASSERT_TRUE(s);
      DetachStream(*s);
    }
    a->Terminate();
    ASSERT_EQ(a->Wait(60s), 0) << a->Stderr();
  }
  // One of them as a streamd before per-model directories left it: in the flat layout.
  const std::string flat = root + "/" + ids_a[2] + ".snap";
  fs::rename(dir_a + "/" + ids_a[2] + ".snap", flat);
  const auto a_files = Only(Tree(root), dir_a + "/");
  ASSERT_EQ(a_files.size(), static_cast<size_t>(kA - 1));
  const std::vector<uint8_t> flat_bytes = ReadBytes(flat);
  ASSERT_FALSE(flat_bytes.empty());

  // Model B on the same directory: its own sessions only; every file of A as it was.
  {
    auto b = DaemonProcess::Start(Flags(root, {"--model.path=" + second}));
    ASSERT_NE(b, nullptr);
    for (int i = 0; i < kB; ++i) {
      std::vector<int32_t> context;
      auto s = MakeSession(*b, Words(50 + 11 * i, 9), 2, &ids_b[i], &context);
      ASSERT_TRUE(s);
      DetachStream(*s);
    }
    const auto listed = ListSessions(*b);
    EXPECT_EQ(listed.size(), static_cast<size_t>(kB)) << "B lists another model's sessions";
    for (const std::string& id : ids_a) EXPECT_EQ(listed.count(id), 0u) << id;
    b->Terminate();
    ASSERT_EQ(b->Wait(60s), 0) << b->Stderr();
    EXPECT_EQ(b->Stderr().find("refused"), std::string::npos) << b->Stderr();
  }
  EXPECT_EQ(Only(Tree(root), dir_a + "/"), a_files) << "B changed A's directory";
  EXPECT_EQ(ReadBytes(flat), flat_bytes) << "B moved or changed A's flat snapshot";
  for (const std::string& d : {root, dir_a, dir_b}) {
    EXPECT_FALSE(fs::exists(d + "/rejected")) << d;
  }
  const auto b_files = Only(Tree(root), dir_b + "/");
  EXPECT_EQ(b_files.size(), static_cast<size_t>(kB));

  // A again: all three sessions, the flat one moved into its directory, each continuing
  // exactly as the reference daemon that never stopped.
  {
    auto a = DaemonProcess::Start(Flags(root));
    ASSERT_NE(a, nullptr);
    EXPECT_FALSE(fs::exists(flat)) << "A's flat snapshot was not migrated";
    EXPECT_EQ(ReadBytes(dir_a + "/" + ids_a[2] + ".snap"), flat_bytes);
    const auto listed = ListSessions(*a);
    EXPECT_EQ(listed.size(), static_cast<size_t>(kA));
    for (const std::string& id : ids_b) EXPECT_EQ(listed.count(id), 0u) << id;
    for (int i = 0; i < kA; ++i) ExpectResumesAndContinues(*a, ids_a[i], contexts_a[i]);
    a->Terminate();
    ASSERT_EQ(a->Wait(60s), 0) << a->Stderr();
    EXPECT_EQ(a->Stderr().find("refused"), std::string::npos) << a->Stderr();
  }
  EXPECT_EQ(Only(Tree(root), dir_b + "/"), b_files) << "A changed B's directory";
}

}  // namespace
}  // namespace streamd::e2e
