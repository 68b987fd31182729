// Build plans end to end (docs/BUILD.md): `streamd build` writes a plan for the default model on
// this machine, `streamd serve --plan` serves with it and gives the same greedy tokens as a
// daemon without one (the plan is built without --eval-text: numerics-exact choices only), and
// a damaged plan, or one bound to another machine or streamd version, fails the start with an
// error naming the file and the reason.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/build_plan/plan_file.h"
#include "tests/e2e/daemon_process.h"
#include "tests/e2e/durability_util.h"
#include "tests/e2e/e2e_util.h"

namespace streamd::e2e {
namespace {

using ::testing::HasSubstr;

class PlanE2eTest : public ::testing::Test {
 protected:
  // One plan for the whole suite: a quick build (one timing round, a short window).
  static void SetUpTestSuite() {
    // A directory of this process's own: ctest runs each test in a process of its own, two at
    // a time, and another checkout's tests may run beside them (a shared /tmp/plan_e2e had
    // them rebuild and overwrite each other's plan).
    tmp_ = new TempDir();
    plan_ = new std::string(dir() + "/smollm2.plan");
    build_ = new RunResult(RunStreamd(
        {"build", "--model", ModelPath(), "--out", *plan_, "--rounds", "1", "--window", "60"}));
  }
  static void TearDownTestSuite() {
    delete build_;
    delete plan_;
    delete tmp_;
  }
  static const std::string& dir() { return tmp_->path(); }
  static TempDir* tmp_;
  static std::string* plan_;
  static RunResult* build_;

  // `streamd serve` with `extra` flags, expected to exit on its own (bounded by timeout(1)).
  static RunResult ServeExpectingExit(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {"/usr/bin/timeout",
                                     "120",
                                     StreamdBinary(),
                                     "serve",
                                     "--server.listen_address=127.0.0.1:0",
                                     "--server.metrics_address=127.0.0.1:0",
                                     "--model.path=" + ModelPath(),
                                     "--engine.backend=cpu"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunProgram(argv);
  }
};
std::string* PlanE2eTest::plan_ = nullptr;
RunResult* PlanE2eTest::build_ = nullptr;
TempDir* PlanE2eTest::tmp_ = nullptr;

std::vector<int32_t> GreedyAfter(const DaemonProcess& d, const std::string& text, int32_t n) {
  RawStream s(d.Channel());
  if (!s.Open()) return {};
  if (s.Append(TextMsg(text).append())) return {};
  return GenerateOn(s, n).ids;
}

TEST_F(PlanE2eTest, ServesWithThePlanAndGivesTheSameGreedyTokens) {
  ASSERT_EQ(build_->exit_code, 0) << build_->err << build_->out;
  EXPECT_THAT(build_->out, HasSubstr("wrote " + *plan_));
  EXPECT_THAT(build_->out, HasSubstr("decode step, 16 sessions, tuned"));
  auto planned =
      DaemonProcess::Start({"--plan", *plan_, "--engine.backend=cpu", "--logging.level=info"});
  ASSERT_NE(planned, nullptr);
  EXPECT_THAT(planned->Stderr(), HasSubstr("model.plan " + *plan_ + ": built"));
  auto plain = DaemonProcess::Start({"--engine.backend=cpu"});
  ASSERT_NE(plain, nullptr);
  const std::string text = "The old lighthouse keeper climbed the stairs and";
  const std::vector<int32_t> with_plan = GreedyAfter(*planned, text, 24);
  const std::vector<int32_t> without = GreedyAfter(*plain, text, 24);
  ASSERT_EQ(with_plan.size(), 24u);
  EXPECT_EQ(with_plan, without);
}

TEST_F(PlanE2eTest, InspectPrintsEveryChoiceAndReuseKeepsACurrentPlan) {
  ASSERT_EQ(build_->exit_code, 0) << build_->err;
  const RunResult inspect = RunStreamd({"plan", "inspect", *plan_, "--model", ModelPath()});
  EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
  for (const char* want : {"choices", "threads", "split 16-63 tokens", "measurements",
                           "decode step, 1 session, default", "usable here: yes"}) {
    EXPECT_THAT(inspect.out, HasSubstr(want));
  }
  const RunResult reuse = RunStreamd({"build", "--model", ModelPath(), "--out", *plan_, "--reuse"});
  EXPECT_EQ(reuse.exit_code, 0) << reuse.err;
  EXPECT_THAT(reuse.out, HasSubstr("is current for this model, streamd version and machine"));
}

TEST_F(PlanE2eTest, DamagedAndForeignPlansFailTheStartNamingFileAndReason) {
  ASSERT_EQ(build_->exit_code, 0) << build_->err;
  std::ifstream in(*plan_, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GT(bytes.size(), 200u);

  const std::string truncated = dir() + "/truncated.plan";
  std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  RunResult r = ServeExpectingExit({"--plan", truncated});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("model.plan: " + truncated + ": "));

  std::string flipped_bytes = bytes;
  flipped_bytes[100] = static_cast<char>(flipped_bytes[100] ^ 0x20);  // inside the manifest
  const std::string flipped = dir() + "/flipped.plan";
  std::ofstream(flipped, std::ios::binary) << flipped_bytes;
  r = ServeExpectingExit({"--plan", flipped});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(flipped + ": "));
  EXPECT_THAT(r.err, HasSubstr("checksum"));

  auto file = PlanFile::Open(*plan_);
  ASSERT_TRUE(file.ok()) << file.status().message();
  BuildPlan elsewhere = (*file)->plan();
  elsewhere.hardware.model = "A CPU This Test Made Up";
  const std::string foreign = dir() + "/foreign.plan";
  ASSERT_TRUE(WritePlanFile(foreign, elsewhere, (*file)->weights()).ok());
  r = ServeExpectingExit({"--plan", foreign});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("tuned on other hardware"));
  EXPECT_THAT(r.err, HasSubstr("A CPU This Test Made Up"));
  const RunResult inspect = RunStreamd({"plan", "inspect", foreign});
  EXPECT_EQ(inspect.exit_code, 1);
  EXPECT_THAT(inspect.out, HasSubstr("usable here: no"));

  BuildPlan older = (*file)->plan();
  older.streamd_version = "0.0.1";
  const std::string old_plan = dir() + "/old.plan";
  ASSERT_TRUE(WritePlanFile(old_plan, older, (*file)->weights()).ok());
  r = ServeExpectingExit({"--plan", old_plan});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("built by streamd 0.0.1"));

  r = ServeExpectingExit({"--plan", dir() + "/missing.plan"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("missing.plan"));
}

// model.plan: auto takes the plan beside the model (its path with .plan) when it is current, and
// otherwise serves with the defaults, saying why, instead of failing the start: what a
// deployment sets before a plan was built on the machine it lands on.
TEST_F(PlanE2eTest, AutoTakesACurrentPlanBesideTheModelAndServesWithoutAnyOther) {
  ASSERT_EQ(build_->exit_code, 0) << build_->err;
  const std::string models = dir() + "/auto";
  std::filesystem::create_directories(models);
  const std::string model = models + "/m.gguf", beside = models + "/m.plan";
  std::filesystem::remove(model);
  std::filesystem::create_symlink(ModelPath(), model);
  const auto serve = [&] {
    return DaemonProcess::Start({"--model.path=" + model, "--plan", "auto", "--engine.backend=cpu",
                                 "--logging.level=info"});
  };
  const std::string text = "The old lighthouse keeper climbed the stairs and";

  // None there: the defaults, and how to make one.
  std::filesystem::remove(beside);
  auto none = serve();
  ASSERT_NE(none, nullptr);
  EXPECT_THAT(none->Stderr(), HasSubstr("model.plan auto: no plan at " + beside));
  EXPECT_THAT(none->Stderr(), HasSubstr("streamd build --model " + model));
  const std::vector<int32_t> without = GreedyAfter(*none, text, 16);
  ASSERT_EQ(without.size(), 16u);
  none.reset();

  // A current one: used.
  std::filesystem::copy_file(*plan_, beside, std::filesystem::copy_options::overwrite_existing);
  auto current = serve();
  ASSERT_NE(current, nullptr);
  EXPECT_THAT(current->Stderr(), HasSubstr("model.plan auto: " + beside + ": built"));
  EXPECT_EQ(GreedyAfter(*current, text, 16), without);
  current.reset();

  // One from another machine: the defaults, with a warning naming the file and the reason.
  auto file = PlanFile::Open(*plan_);
  ASSERT_TRUE(file.ok()) << file.status().message();
  BuildPlan elsewhere = (*file)->plan();
  elsewhere.hardware.model = "A CPU This Test Made Up";
  ASSERT_TRUE(WritePlanFile(beside, elsewhere, (*file)->weights()).ok());
  auto foreign = serve();
  ASSERT_NE(foreign, nullptr);
  EXPECT_THAT(foreign->Stderr(), HasSubstr("model.plan auto: " + beside + " not used"));
  EXPECT_THAT(foreign->Stderr(), HasSubstr("A CPU This Test Made Up"));
  EXPECT_EQ(GreedyAfter(*foreign, text, 16), without);
  foreign.reset();

  // A damaged one: the same.
  std::ofstream(beside, std::ios::binary | std::ios::trunc) << "not a plan";
  auto damaged = serve();
  ASSERT_NE(damaged, nullptr);
  EXPECT_THAT(damaged->Stderr(), HasSubstr("model.plan auto: " + beside + " not used"));
}

}  // namespace
}  // namespace streamd::e2e
