#include "server/config/config_values.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace streamd::config {
namespace {

using std::chrono::milliseconds;

TEST(ConfigValuesTest, ParsesIntegers) {
  EXPECT_EQ(*ParseInteger("4"), 4);
  EXPECT_EQ(*ParseInteger("-1"), -1);
  for (const char* bad : {"", "4.0", "+4", "0x10", "4 ", "four", "99999999999999999999"}) {
    EXPECT_FALSE(ParseInteger(bad).ok()) << bad;
  }
}

TEST(ConfigValuesTest, ParsesAndFormatsNumbers) {
  EXPECT_DOUBLE_EQ(*ParseNumber("0.25"), 0.25);
  EXPECT_DOUBLE_EQ(*ParseNumber("1e-3"), 1e-3);
  EXPECT_DOUBLE_EQ(*ParseNumber("-2"), -2.0);
  EXPECT_FALSE(ParseNumber("nan").ok());
  EXPECT_FALSE(ParseNumber("inf").ok());
  EXPECT_FALSE(ParseNumber("1e999").ok());
  EXPECT_FALSE(ParseNumber("0.5x").ok());
  EXPECT_EQ(FormatNumber(0.8f), "0.8");
  EXPECT_EQ(FormatNumber(0.95f), "0.95");
  EXPECT_EQ(FormatNumber(1.0f), "1");
  for (float f : {0.8f, 0.05f, 1e-7f, 99.9f, 0.1f + 0.2f}) {
    EXPECT_EQ(static_cast<float>(*ParseNumber(FormatNumber(f))), f) << f;
  }
}

TEST(ConfigValuesTest, ParsesDurations) {
  EXPECT_EQ(*ParseDuration("250ms"), milliseconds(250));
  EXPECT_EQ(*ParseDuration("30s"), milliseconds(30'000));
  EXPECT_EQ(*ParseDuration("10m"), milliseconds(600'000));
  EXPECT_EQ(*ParseDuration("1h"), milliseconds(3'600'000));
  EXPECT_EQ(*ParseDuration("2d"), milliseconds(172'800'000));
  EXPECT_EQ(*ParseDuration("1m30s"), milliseconds(90'000));
  EXPECT_EQ(*ParseDuration("1h2m3s4ms"), milliseconds(3'723'004));
  EXPECT_EQ(*ParseDuration("0"), milliseconds(0));
  EXPECT_EQ(*ParseDuration("0s"), milliseconds(0));
  EXPECT_EQ(*ParseDuration(" 5s "), milliseconds(5000));
}

TEST(ConfigValuesTest, RejectsBadDurationsWithTheReason) {
  EXPECT_EQ(ParseDuration("10").status().message(), "needs a unit (ms, s, m, h, d)");
  EXPECT_EQ(ParseDuration("-5s").status().message(), "must not be negative");
  EXPECT_EQ(ParseDuration("5 minutes").status().message(),
            "is not a duration (e.g. 250ms, 30s, 10m, 1h, 1m30s)");
  EXPECT_EQ(ParseDuration("5min").status().message(),
            "has unknown unit 'min' (use ms, s, m, h, d)");
  EXPECT_FALSE(ParseDuration("").ok());
  EXPECT_FALSE(ParseDuration("1.5s").ok());
  EXPECT_FALSE(ParseDuration("s").ok());
  EXPECT_EQ(ParseDuration("99999999999999999d").status().message(), "is longer than ten years");
}

TEST(ConfigValuesTest, FormatsDurationsInTheLargestExactUnit) {
  EXPECT_EQ(FormatDuration(milliseconds(0)), "0s");
  EXPECT_EQ(FormatDuration(milliseconds(250)), "250ms");
  EXPECT_EQ(FormatDuration(milliseconds(1500)), "1500ms");
  EXPECT_EQ(FormatDuration(milliseconds(90'000)), "90s");
  EXPECT_EQ(FormatDuration(milliseconds(600'000)), "10m");
  EXPECT_EQ(FormatDuration(milliseconds(7'200'000)), "2h");
  EXPECT_EQ(FormatDuration(milliseconds(86'400'000)), "1d");
  for (int64_t ms : {0LL, 1LL, 999LL, 61'000LL, 3'723'004LL}) {
    EXPECT_EQ(*ParseDuration(FormatDuration(milliseconds(ms))), milliseconds(ms));
  }
}

TEST(ConfigValuesTest, ParsesSizes) {
  EXPECT_EQ(*ParseByteSize("0"), 0);
  EXPECT_EQ(*ParseByteSize("4194304"), 4194304);
  EXPECT_EQ(*ParseByteSize("512KiB"), 512 * 1024);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512LL << 20);
  EXPECT_EQ(*ParseByteSize("1GiB"), 1LL << 30);
  EXPECT_EQ(*ParseByteSize("2TiB"), 2LL << 40);
  EXPECT_EQ(*ParseByteSize("1.5GiB"), 3LL << 29);
  EXPECT_EQ(*ParseByteSize("1MB"), 1'000'000);
  EXPECT_EQ(*ParseByteSize("3KB"), 3000);
  EXPECT_EQ(*ParseByteSize("7B"), 7);
  EXPECT_EQ(*ParseByteSize("16 MiB"), 16LL << 20);
}

TEST(ConfigValuesTest, RejectsBadSizesWithTheReason) {
  EXPECT_EQ(ParseByteSize("-1").status().message(), "must not be negative");
  EXPECT_EQ(ParseByteSize("1.5").status().message(), "has a fraction but no unit (e.g. 1.5GiB)");
  EXPECT_EQ(ParseByteSize("5mb").status().message(),
            "has unknown unit 'mb' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("MiB").ok());
  EXPECT_FALSE(ParseByteSize("1.2.3MiB").ok());
  EXPECT_EQ(ParseByteSize("9999999TiB").status().message(), "is larger than 2^62 bytes");
}

TEST(ConfigValuesTest, FormatsSizesInTheLargestExactBinaryUnit) {
  EXPECT_EQ(FormatByteSize(0), "0");
  EXPECT_EQ(FormatByteSize(1000), "1000");
  EXPECT_EQ(FormatByteSize(4LL << 20), "4MiB");
  EXPECT_EQ(FormatByteSize(1LL << 30), "1GiB");
  EXPECT_EQ(FormatByteSize(1536LL << 20), "1536MiB");
  for (int64_t b : {0LL, 1LL, 1023LL, 1024LL, 3LL << 29, 1'000'000LL}) {
    EXPECT_EQ(*ParseByteSize(FormatByteSize(b)), b);
  }
}

TEST(ConfigValuesTest, KvPoolBudgetIsASizeOrAFraction) {
  EXPECT_EQ(*ParseKvPoolBudget("1GiB"), (KvPoolBudget{1LL << 30, 0.0}));
  EXPECT_EQ(*ParseKvPoolBudget("268435456"), (KvPoolBudget{268435456, 0.0}));
  EXPECT_EQ(*ParseKvPoolBudget("0.25"), (KvPoolBudget{0, 0.25}));
  EXPECT_EQ(*ParseKvPoolBudget("1.0"), (KvPoolBudget{0, 1.0}));
  EXPECT_EQ(ParseKvPoolBudget("1.5").status().message(), "is a fraction outside (0, 1]");
  EXPECT_EQ(ParseKvPoolBudget("0.0").status().message(), "is a fraction outside (0, 1]");
  EXPECT_EQ(ParseKvPoolBudget("1").status().message(), "is below the minimum of 1MiB");
  EXPECT_EQ(ParseKvPoolBudget("lots").status().message(),
            "is not a size (e.g. 4194304, 512MiB, 1GiB); give a size (1GiB) or a fraction of "
            "available memory (0.25)");
  for (const KvPoolBudget& b : {KvPoolBudget{1LL << 30, 0.0}, KvPoolBudget{0, 1.0},
                                KvPoolBudget{0, 0.3}, KvPoolBudget{3'000'000, 0.0}}) {
    EXPECT_EQ(*ParseKvPoolBudget(FormatKvPoolBudget(b)), b) << FormatKvPoolBudget(b);
  }
  EXPECT_EQ(FormatKvPoolBudget({0, 1.0}), "1.0");
}

TEST(ConfigValuesTest, ChecksAddresses) {
  for (const char* ok :
       {"127.0.0.1:50051", "0.0.0.0:0", "localhost:65535", "[::1]:9464", "[::]:50051"}) {
    EXPECT_TRUE(CheckAddress(ok, false).ok()) << ok;
  }
  EXPECT_TRUE(CheckAddress("unix:/run/streamd.sock", true).ok());
  EXPECT_EQ(CheckAddress("unix:/run/streamd.sock", false).message(),
            "must be host:port (unix: sockets not allowed)");
  EXPECT_EQ(CheckAddress("127.0.0.1:70000", false).message(), "has port 70000 outside [0, 65535]");
  EXPECT_EQ(CheckAddress("127.0.0.1:http", false).message(), "has a port that is not a number");
  for (const char* bad : {"127.0.0.1", ":50051", "::1:50051", "a b:1", "unix:", ""}) {
    EXPECT_FALSE(CheckAddress(bad, true).ok()) << bad;
  }
  EXPECT_EQ(AddressPort("127.0.0.1:9464"), 9464);
  EXPECT_EQ(AddressPort("unix:/x"), -1);
  EXPECT_EQ(AddressHost("[::1]:1"), "::1");
  EXPECT_EQ(AddressHost("localhost:1"), "localhost");
}

TEST(ConfigValuesTest, ExpandsHome) {
  const char* saved = std::getenv("HOME");
  const std::string saved_home = saved != nullptr ? saved : "";
  ASSERT_EQ(setenv("HOME", "/home/tester", 1), 0);
  EXPECT_EQ(ExpandHome("~/models/a.gguf"), "/home/tester/models/a.gguf");
  EXPECT_EQ(ExpandHome("~"), "/home/tester");
  EXPECT_EQ(ExpandHome("/abs/~/x"), "/abs/~/x");
  EXPECT_EQ(ExpandHome("~other/x"), "~other/x");
  EXPECT_EQ(ExpandHome("rel/x"), "rel/x");
  if (saved != nullptr) {
    setenv("HOME", saved_home.c_str(), 1);
  } else {
    unsetenv("HOME");
  }
}

TEST(ConfigValuesTest, EditDistance) {
  EXPECT_EQ(EditDistance("engine.thread", "engine.threads"), 1u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("same", "same"), 0u);
}

}  // namespace
}  // namespace streamd::config
