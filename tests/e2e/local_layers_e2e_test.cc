// End-to-end: a daemon on the real Gemma 3 270M keeps its local layers in a KV pool of their own
// (engine.local_layer_caches, on by default; session_cache.h "Local layers"). An idle session
// past the local layers' 512-token window is offloaded, read back on Resume, and carried across a
// kill -9, and it continues token for token as the same session in a daemon that keeps every
// layer in one pool. Needs $STREAMD_GEMMA_MODEL (scripts/fetch-gemma-model.sh; `make test` sets
// it), and skips visibly without it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/daemon_process.h"
#include "tests/e2e/durability_util.h"
#include "tests/e2e/e2e_util.h"

namespace streamd::e2e {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int32_t kGenerate = 8;

std::vector<std::string> GemmaFlags(const std::string& model, std::vector<std::string> extra) {
  // A window of 600 (> 512) makes the engine split its pools. Each daemon serves one session
  // at a time, so both batch its input alike (the same chunks of 64): the CPU kernels' sums
  // depend on the batch shape (durability_fixture.h), and here the shapes are the same.
  std::vector<std::string> f = {"--model.path=" + model,
                                "--engine.kv_pool=32MiB",
                                "--engine.max_batch_tokens=64",
                                "--engine.max_batch_sessions=1",
                                "--engine.max_chunk=64",
                                "--sessions.default_window=600",
                                "--sessions.snapshot_interval=50ms",
                                "--logging.level=info"};  // the start-up notes
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

// The ids of a stretch of the book, long enough to pass the local layers' window.
std::vector<int32_t> BookTokens(const std::string& model, size_t n) {
  std::ifstream in(std::string(STREAMD_SHARED_DATA) + "/pride-and-prejudice.txt");
  std::stringstream text;
  text << in.rdbuf();
  const RunResult r = RunStreamd(
      {"tokenize", "--model", model, "--no-bos", "--text", text.str().substr(2000, 4000)});
  std::string out = r.out;
  for (char& c : out) {
    if (c == '[' || c == ']' || c == ',') c = ' ';
  }
  std::istringstream ids(out);
  std::vector<int32_t> tokens;
  for (int32_t id; tokens.size() < n && ids >> id;) tokens.push_back(id);
  return tokens;
}

TEST(LocalLayersE2eTest, OffloadAndKillNineContinueAsOnePool) {
  const char* model = std::getenv("STREAMD_GEMMA_MODEL");
  if (model == nullptr || !fs::exists(model)) {
    GTEST_SKIP() << "needs $STREAMD_GEMMA_MODEL, the Gemma 3 270M file "
                    "(scripts/fetch-gemma-model.sh; `make test` sets it)";
  }
  TempDir tmp;
  const std::string root = tmp.Sub("sessions");
  const std::vector<std::string> split_flags =
      GemmaFlags(model, {"--sessions.snapshot_dir=" + root, "--sessions.offload_after=200ms"});
  auto split = DaemonProcess::Start(split_flags);
  auto one_pool = DaemonProcess::Start(GemmaFlags(model, {"--engine.local_layer_caches=false"}));
  ASSERT_NE(split, nullptr);
  ASSERT_NE(one_pool, nullptr);
  const std::vector<int32_t> context = BookTokens(model, 700);
  ASSERT_EQ(context.size(), 700u);

  // The same session in both daemons: 700 tokens, then a greedy generation.
  auto a = std::make_unique<RawStream>(split->Channel());
  RawStream b(one_pool->Channel());
  auto opened = a->Open();
  ASSERT_TRUE(opened && b.Open());
  const std::string id = opened->session_id();
  ASSERT_FALSE(a->Append(TokensMsg(context).append()));
  ASSERT_FALSE(b.Append(TokensMsg(context).append()));
  EXPECT_EQ(GenerateOn(*a, kGenerate).ids, GenerateOn(b, kGenerate).ids);

  // Offloaded while detached, read back on Resume.
  DetachStream(*a);
  ASSERT_TRUE(WaitFor([&] { return ListSessions(*split)[id].offloaded(); }))
      << "the detached session was not offloaded";
  Resumed r = ResumeSession(*split, id);
  ASSERT_TRUE(r.opened) << r.error.ShortDebugString();
  EXPECT_EQ(GenerateOn(*r.stream, kGenerate).ids, GenerateOn(b, kGenerate).ids)
      << "the reloaded session does not continue as in one pool";

  // kill -9 once its snapshot holds everything, then a new daemon on the same directory.
  const std::vector<int32_t> more(context.begin(), context.begin() + 40);
  ASSERT_FALSE(r.stream->Append(TokensMsg(more).append()));
  ASSERT_FALSE(b.Append(TokensMsg(more).append()));
  WaitPrefilled(*split, id);
  const int64_t seen = ListSessions(*split)[id].cache().tokens_seen();
  ASSERT_TRUE(WaitFor([&] {
    const auto stored = StoredSummary(ModelDir(root, model), id);
    return stored && SeenOf(*stored) == seen;
  })) << "the snapshot never caught up with "
      << seen << " tokens";
  split->Kill();
  split = DaemonProcess::Start(split_flags);
  ASSERT_NE(split, nullptr);
  EXPECT_NE(split->Stderr().find("engine.local_layer_caches: the model's local layers"),
            std::string::npos)
      << "the daemon did not say it keeps the local layers apart:\n"
      << split->Stderr();
  Resumed after = ResumeSession(*split, id);
  ASSERT_TRUE(after.opened) << after.error.ShortDebugString();
  EXPECT_EQ(after.opened->cache().tokens_seen(), seen);
  EXPECT_EQ(GenerateOn(*after.stream, kGenerate).ids, GenerateOn(b, kGenerate).ids)
      << "after kill -9 the session does not continue as in one pool";
  EXPECT_EQ(one_pool->Stderr().find("engine.local_layer_caches:"), std::string::npos);

  for (RawStream* s : {after.stream.get(), &b}) {
    s->Write(CloseMsg());
    EXPECT_TRUE(s->Finish().ok());
  }
  for (auto* d : {split.get(), one_pool.get()}) {
    d->Terminate();
    EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
  }
}

}  // namespace
}  // namespace streamd::e2e
