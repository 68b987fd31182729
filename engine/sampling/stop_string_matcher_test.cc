#include "engine/sampling/stop_string_matcher.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace streamd {
namespace {

struct Outcome {
  std::string text;  // everything emitted, Flush() included
  bool stopped = false;
  int32_t stop_index = -1;
  bool operator==(const Outcome&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  return os << "{\"" << o.text << "\", stopped=" << o.stopped << ", index=" << o.stop_index << "}";
}

Outcome FeedAll(const std::vector<std::string>& stops, const std::vector<std::string>& chunks) {
  StopStringMatcher matcher(stops);
  Outcome outcome;
  for (const std::string& chunk : chunks) {
    StopStringMatcher::FeedResult r = matcher.Feed(chunk);
    outcome.text += r.text;
    if (r.stopped) {
      outcome.stopped = true;
      outcome.stop_index = r.stop_index;
      break;
    }
  }
  outcome.text += matcher.Flush();
  return outcome;
}

// Reference over the whole text: the stop ending first (ties: the longer one) wins.
Outcome Reference(const std::vector<std::string>& stops, const std::string& text) {
  for (size_t end = 1; end <= text.size(); ++end) {
    int32_t best = -1;
    for (size_t i = 0; i < stops.size(); ++i) {
      const std::string& s = stops[i];
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0 &&
          (best < 0 || s.size() > stops[static_cast<size_t>(best)].size())) {
        best = static_cast<int32_t>(i);
      }
    }
    if (best >= 0) {
      return {text.substr(0, end - stops[static_cast<size_t>(best)].size()), true, best};
    }
  }
  return {text, false, -1};
}

TEST(StopStringMatcherTest, NoStopsPassesThrough) {
  StopStringMatcher matcher({});
  const StopStringMatcher::FeedResult r = matcher.Feed("hello");
  EXPECT_EQ(r.text, "hello");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopStringMatcherTest, StopInOneChunk) {
  EXPECT_EQ(FeedAll({"</s>"}, {"hello</s>world"}), (Outcome{"hello", true, 0}));
  EXPECT_EQ(FeedAll({"</s>"}, {"</s>"}), (Outcome{"", true, 0}));
}

TEST(StopStringMatcherTest, StopSplitAcrossChunksIsHeldBack) {
  StopStringMatcher matcher({"<|end|>"});
  StopStringMatcher::FeedResult r = matcher.Feed("Hi <|e");
  EXPECT_EQ(r.text, "Hi ");  // "<|e" could still become the stop
  EXPECT_FALSE(r.stopped);
  r = matcher.Feed("n");
  EXPECT_EQ(r.text, "");
  r = matcher.Feed("d|> tail");
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.stop_index, 0);
  EXPECT_TRUE(matcher.stopped());
  // The stream is over: later text and Flush() emit nothing.
  r = matcher.Feed("more");
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopStringMatcherTest, HeldPrefixIsReleasedWhenItDiverges) {
  StopStringMatcher matcher({"<|end|>"});
  EXPECT_EQ(matcher.Feed("a <|en").text, "a ");
  EXPECT_EQ(matcher.Feed("ough").text, "<|enough");
  EXPECT_EQ(matcher.Feed("x <|").text, "x ");
  EXPECT_EQ(matcher.Flush(), "<|");
}

TEST(StopStringMatcherTest, HoldsTheLongestPossibleStart) {
  // "aab": after "aa" both "a|a" and "|aa" could start the stop; the earlier one must be held.
  StopStringMatcher matcher({"aab"});
  EXPECT_EQ(matcher.Feed("xaa").text, "x");
  EXPECT_EQ(matcher.Feed("a").text, "a");
  const StopStringMatcher::FeedResult r = matcher.Feed("b");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
}

TEST(StopStringMatcherTest, OverlappingPrefixes) {
  const std::vector<std::string> stops = {"abc", "ab"};
  // "ab" completes before "abc" could, whether or not the "c" arrives in the same chunk.
  EXPECT_EQ(FeedAll(stops, {"xabc"}), (Outcome{"x", true, 1}));
  EXPECT_EQ(FeedAll(stops, {"xa", "bc"}), (Outcome{"x", true, 1}));
  EXPECT_EQ(FeedAll(stops, {"x", "a", "b"}), (Outcome{"x", true, 1}));
  // Same end: the longer stop wins, so less text is emitted.
  EXPECT_EQ(FeedAll({"bc", "abc"}, {"xab", "c"}), (Outcome{"x", true, 1}));
  EXPECT_EQ(FeedAll({"bc", "abc"}, {"xbc"}), (Outcome{"x", true, 0}));
}

TEST(StopStringMatcherTest, MultipleStopsFirstToCompleteWins) {
  const std::vector<std::string> stops = {"STOP", "\n\n", "###"};
  EXPECT_EQ(FeedAll(stops, {"one\n", "\ntwo STOP"}), (Outcome{"one", true, 1}));
  EXPECT_EQ(FeedAll(stops, {"one ##", "# STOP"}), (Outcome{"one ", true, 2}));
  EXPECT_EQ(FeedAll(stops, {"ST", "OP###"}), (Outcome{"", true, 0}));
  EXPECT_EQ(FeedAll(stops, {"no stop here\n"}), (Outcome{"no stop here\n", false, -1}));
}

TEST(StopStringMatcherTest, Utf8MultibyteText) {
  // "世界" is E4 B8 96 E7 95 8C; the stop is split inside its second character.
  const std::vector<std::string> stops = {"世界"};
  StopStringMatcher matcher(stops);
  StopStringMatcher::FeedResult r = matcher.Feed("你好世\xE7");
  EXPECT_EQ(r.text, "你好");
  r = matcher.Feed("\x95\x8C!");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");

  EXPECT_EQ(FeedAll({"ö"}, {"héllo wörld"}), (Outcome{"héllo w", true, 0}));
  // A stop sharing a lead byte with the text ("é" vs "ê": C3 A9 / C3 AA) is released.
  EXPECT_EQ(FeedAll({"é"}, {"t\xC3", "\xAA", "te"}), (Outcome{"tête", false, -1}));
  EXPECT_EQ(FeedAll({"🙂"}, {"ok ", "\xF0\x9F", "\x99", "\x82", " no"}),
            (Outcome{"ok ", true, 0}));
}

TEST(StopStringMatcherTest, IncompleteUtf8IsNeverEmitted) {
  StopStringMatcher matcher({"zzz"});
  // "é" (C3 A9) and "🙂" (F0 9F 99 82) arrive byte by byte.
  EXPECT_EQ(matcher.Feed("caf\xC3").text, "caf");
  EXPECT_EQ(matcher.Feed("\xA9").text, "é");
  EXPECT_EQ(matcher.Feed("\xF0\x9F").text, "");
  EXPECT_EQ(matcher.Feed("\x99").text, "");
  EXPECT_EQ(matcher.Feed("\x82 z").text, "🙂 ");
  EXPECT_EQ(matcher.Flush(), "z");
  // Invalid bytes are not held forever.
  StopStringMatcher raw({"zzz"});
  EXPECT_EQ(raw.Feed("\xFF\x80x").text, "\xFF\x80x");
}

TEST(StopStringMatcherTest, ChunkingDoesNotChangeTheOutcome) {
  std::mt19937 rng(77);
  const std::string alphabet = "abc";
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::string> stops;
    const int num_stops = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < num_stops; ++i) {
      std::string stop;
      const int len = 1 + static_cast<int>(rng() % 4);
      for (int j = 0; j < len; ++j) stop += alphabet[rng() % alphabet.size()];
      stops.push_back(stop);
    }
    std::string text;
    const int len = static_cast<int>(rng() % 20);
    for (int j = 0; j < len; ++j) text += alphabet[rng() % alphabet.size()];
    // Split at random points.
    std::vector<std::string> chunks;
    for (size_t pos = 0; pos < text.size();) {
      const size_t n = std::min(text.size() - pos, static_cast<size_t>(rng() % 5));
      chunks.push_back(text.substr(pos, n));
      pos += n;
    }
    ASSERT_EQ(FeedAll(stops, chunks), Reference(stops, text))
        << "text " << text << " stops[0] " << stops[0];
  }
}

TEST(StopStringMatcherTest, ValidationNamesTheLimit) {
  EXPECT_TRUE(
      StopStringMatcher::Validate(std::vector<std::string>(16, std::string(256, 'x'))).ok());
  Status status = StopStringMatcher::Validate(std::vector<std::string>(17, "x"));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "stop: 17 stop strings exceed the limit of 16");
  status = StopStringMatcher::Validate({"ok", ""});
  EXPECT_EQ(status.message(), "stop[1] is empty");
  status = StopStringMatcher::Validate({std::string(257, 'x')});
  EXPECT_EQ(status.message(), "stop[0] is 257 bytes, over the limit of 256 bytes");

  const StatusOr<StopStringMatcher> bad = StopStringMatcher::Create({""});
  EXPECT_FALSE(bad.ok());
  StatusOr<StopStringMatcher> good = StopStringMatcher::Create({"\n"});
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(good->Feed("a\nb").stopped);
}

TEST(StopStringMatcherDeathTest, InvalidStopsAbortInTheConstructor) {
  EXPECT_DEATH(StopStringMatcher({""}), "invalid stop strings");
}

}  // namespace
}  // namespace streamd
