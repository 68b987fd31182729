// The fixture and settings of the durability end-to-end tests (durability_e2e_test.cc,
// durability_kill_e2e_test.cc): one reference daemon, never killed and without snapshots, for the
// whole suite, and the flags every daemon of these tests runs with.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/daemon_process.h"
#include "tests/e2e/durability_util.h"
#include "tests/e2e/e2e_util.h"

namespace streamd::e2e {

using namespace std::chrono_literals;

// ---- Settings -------------------------------------------------------------------------------

// Sessions keep 4 sinks (the default) and a window of 64: snapshots of up to ~1.5 MB.
inline constexpr int32_t kWindow = 64;
inline constexpr std::chrono::milliseconds kInterval{50};  // sessions.snapshot_interval
// How long a due write may take on this shared 2-core machine (capture, encode, write and fsync
// of ~1.5 MB, behind the other sessions' writes). It only bounds what the durability checks
// demand after a quiet period; nothing here measures speed.
inline constexpr std::chrono::milliseconds kWriteMargin{2000};
inline constexpr int32_t kContinuation = 8;  // greedy tokens compared with the reference

// The flags of every daemon here; `dir` is its snapshot directory ("" = memory only).
//
// One token per step (max_batch_tokens = 1). The CPU kernels' f32 sums are not bit-identical
// across batch shapes (a token multiplied in a batch of 3 differs in its last bits from the same
// token alone; kernels/cpu/matmul_test.cc pins only 1 token and multiples of 16), so two daemons
// that batched the same context differently can flip a greedy token at a near tie: about one
// continuation in 15 when three sessions share the steps. With one token per step every token's
// K/V and logits depend on the context alone, so "token-identical to a daemon that never
// restarted" is exact, whatever ran beside the session and however its input was chunked.
// A 24 MiB pool (68 blocks of 16 tokens; a session here is bound to 6) starts in a fraction of
// the time of a larger one, and there are 20 restarts.
inline std::vector<std::string> Flags(const std::string& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> f = {"--engine.kv_pool=24MiB",
                                "--engine.max_batch_tokens=1",
                                "--engine.max_batch_sessions=1",
                                "--engine.max_chunk=1",
                                "--sessions.default_window=" + std::to_string(kWindow),
                                "--sessions.snapshot_interval=50ms",
                                "--sessions.snapshot_dir=" + dir};
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

// ---- The suite: one reference daemon, never killed, without snapshots ----------------------

class DurabilityE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    reference_ = DaemonProcess::Start(Flags("")).release();
    // Ordinary text as token ids: the words sessions are made of.
    const RunResult r = RunStreamd(
        {"tokenize", "--model", ModelPath(), "--no-bos", "--text",
         "It was a bright cold day in April, and the clocks were striking thirteen. The "
         "harbour lay quiet under a pale sky while the fishing boats came home one by one, "
         "their engines coughing, gulls wheeling over the nets. In the village above, the "
         "baker had already sold the last loaf, and the schoolmaster was writing sums on the "
         "board for children who watched the window instead. Nobody expected the letter that "
         "the postman carried up the hill that afternoon."});
    std::string text = r.out;
    for (char& c : text) {
      if (c == '[' || c == ']' || c == ',') c = ' ';
    }
    std::istringstream in(text);
    for (int32_t id; in >> id;) words_.push_back(id);
  }
  static void TearDownTestSuite() {
    if (reference_ != nullptr) {
      reference_->Terminate();
      EXPECT_EQ(reference_->Wait(60s), 0) << reference_->Stderr();
    }
    delete reference_;
    reference_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(reference_, nullptr) << "the reference daemon did not start";
    ASSERT_GT(words_.size(), 60u) << "streamd tokenize gave no ids";
  }

  // `n` consecutive words starting at `from` (wrapping around).
  static std::vector<int32_t> Words(size_t from, size_t n) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < n; ++i) out.push_back(words_[(from + i) % words_.size()]);
    return out;
  }

  // A session on `d` with `context` appended as tokens and one greedy generation of `gen`
  // tokens; returns the stream (still attached) and fills the session's full context.
  static std::unique_ptr<RawStream> MakeSession(const DaemonProcess& d,
                                                const std::vector<int32_t>& context, int32_t gen,
                                                std::string* id, std::vector<int32_t>* full) {
    auto s = std::make_unique<RawStream>(d.Channel());
    auto opened = s->Open();
    if (!opened) return nullptr;
    *id = opened->session_id();
    if (auto e = s->Append(TokensMsg(context).append())) {
      ADD_FAILURE() << "append: " << e->ShortDebugString();
      return nullptr;
    }
    *full = context;
    if (gen > 0) {
      const Generation g = GenerateOn(*s, gen);
      EXPECT_EQ(g.done.reason(), v1::FINISH_REASON_LENGTH)
          << "pick a context whose greedy continuation does not end the text";
      full->insert(full->end(), g.ids.begin(), g.ids.end());
    }
    return s;
  }

  // Resumes `id` on `d`, expects `seen` tokens and a greedy continuation equal to the
  // reference's for `context`.
  static void ExpectResumesAndContinues(const DaemonProcess& d, const std::string& id,
                                        const std::vector<int32_t>& context) {
    SCOPED_TRACE("session " + id);
    Resumed r = ResumeSession(d, id);
    ASSERT_TRUE(r.opened) << "resume refused: " << r.error.ShortDebugString();
    EXPECT_TRUE(r.opened->resumed());
    EXPECT_EQ(r.opened->cache().tokens_seen(), static_cast<int64_t>(context.size()));
    const Generation g = GenerateOn(*r.stream, kContinuation);
    const Generation want = ReferenceContinuation(*reference_, context, kContinuation);
    EXPECT_EQ(g.ids, want.ids) << "the restored session does not continue as the reference";
    r.stream->Write(CloseMsg());
    EXPECT_TRUE(r.stream->Finish().ok());
  }

  inline static DaemonProcess* reference_ = nullptr;
  inline static std::vector<int32_t> words_;
};

}  // namespace streamd::e2e
