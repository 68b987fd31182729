#include "server/config/logging.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace streamd {
namespace {

using ::testing::MatchesRegex;

// Sets up logging into a string stream; Lines() returns what was logged, one entry per line.
class LoggingTest : public ::testing::Test {
 protected:
  void Setup(LogLevel level, LogFormat format) {
    out_.str("");
    ASSERT_TRUE(
        SetupLogging(level, format, std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)).ok());
  }
  std::vector<std::string> Lines() {
    spdlog::default_logger()->flush();
    std::vector<std::string> lines;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  // The logger must not outlive out_.
  void TearDown() override { ASSERT_TRUE(SetupLogging(LogLevel::kInfo, LogFormat::kText).ok()); }

  std::ostringstream out_;
};

TEST_F(LoggingTest, JsonLinesParseAndCarryTheSession) {
  Setup(LogLevel::kDebug, LogFormat::kJson);
  spdlog::info("listening on {}", "127.0.0.1:50051");
  LogSession(LogLevel::kInfo, 42, "opened: sinks={} window={}", 4, 1020);
  LogSession(LogLevel::kDebug, 7, "append \"{}\"\nnext line\t\\ \x01 caf\xc3\xa9", "quoted");
  spdlog::warn("invalid utf-8 \xff\xc3 end");
  LogSession(LogLevel::kTrace, 42, "per-token detail, filtered at debug");

  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 4u) << out_.str();
  std::vector<nlohmann::json> records;
  for (const std::string& line : lines) {
    records.push_back(nlohmann::json::parse(line));  // throws (fails the test) if not JSON
    EXPECT_THAT(records.back()["ts"].get<std::string>(),
                MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z"));
  }
  EXPECT_EQ(records[0]["level"], "info");
  EXPECT_EQ(records[0]["msg"], "listening on 127.0.0.1:50051");
  EXPECT_FALSE(records[0].contains("session"));
  EXPECT_EQ(records[1]["msg"], "opened: sinks=4 window=1020");
  EXPECT_EQ(records[1]["session"], 42);
  EXPECT_EQ(records[2]["level"], "debug");
  EXPECT_EQ(records[2]["session"], 7);
  EXPECT_EQ(records[2]["msg"], "append \"quoted\"\nnext line\t\\ \x01 caf\xc3\xa9");
  EXPECT_EQ(records[3]["level"], "warn");
  EXPECT_EQ(records[3]["msg"], "invalid utf-8 \xef\xbf\xbd\xef\xbf\xbd end");
}

TEST_F(LoggingTest, TextLinesHaveTimeLevelAndSession) {
  Setup(LogLevel::kInfo, LogFormat::kText);
  spdlog::info("started");
  LogSession(LogLevel::kInfo, 9, "closed after {}s", 12);
  LogSession(LogLevel::kError, 9, "two\n[fake] [info] lines\r\x1b\n");
  spdlog::debug("hidden at info");
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 4u) << out_.str();
  const std::string ts = "\\[[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z\\]";
  EXPECT_THAT(lines[0], MatchesRegex(ts + " \\[info\\] started"));
  EXPECT_THAT(lines[1], MatchesRegex(ts + " \\[info\\] session=9 closed after 12s"));
  EXPECT_THAT(lines[2], MatchesRegex(ts + " \\[error\\] session=9 two"));
  EXPECT_EQ(lines[3], "  [fake] [info] lines\\r\\x1b");  // indented: cannot pass for a record
}

TEST_F(LoggingTest, SessionScopesNestAndEnd) {
  Setup(LogLevel::kInfo, LogFormat::kJson);
  {
    SessionLogScope outer(1);
    spdlog::info("a");
    {
      SessionLogScope inner(2);
      spdlog::info("b");
    }
    spdlog::info("c");
  }
  spdlog::info("d");
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["session"], 1);
  EXPECT_EQ(nlohmann::json::parse(lines[1])["session"], 2);
  EXPECT_EQ(nlohmann::json::parse(lines[2])["session"], 1);
  EXPECT_FALSE(nlohmann::json::parse(lines[3]).contains("session"));
}

TEST_F(LoggingTest, LevelsBelowTheSetupLevelAreDropped) {
  Setup(LogLevel::kWarn, LogFormat::kText);
  LogSession(LogLevel::kInfo, 1, "no");
  spdlog::info("no");
  spdlog::warn("yes");
  LogSession(LogLevel::kError, 1, "yes");
  EXPECT_EQ(Lines().size(), 2u);
}

TEST(LoggingSetupTest, RejectsBadArguments) {
  EXPECT_FALSE(SetupLogging(static_cast<LogLevel>(17), LogFormat::kText).ok());
  EXPECT_FALSE(SetupLogging(LogLevel::kInfo, static_cast<LogFormat>(5)).ok());
  EXPECT_FALSE(SetupLogging(LogLevel::kInfo, LogFormat::kText, nullptr).ok());
  EXPECT_TRUE(SetupLogging(LogLevel::kInfo, LogFormat::kText).ok());  // stderr
  EXPECT_EQ(ToSpdlogLevel(LogLevel::kWarn), spdlog::level::warn);
  EXPECT_EQ(ToSpdlogLevel(LogLevel::kError), spdlog::level::err);
}

}  // namespace
}  // namespace streamd
