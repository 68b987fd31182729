#include "server/config/api_keys_file.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace streamd {
namespace {

const std::string kHashA(64, 'a');
const std::string kHashB = "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08";

TEST(ApiKeysFileTest, ParsesKeysRolesAndQuotas) {
  const std::string text =
      "tenants:\n"
      "  acme: {max_sessions: 10, max_generations: 2, max_kv_blocks: 300,"
      " tokens_per_second: 50}\n"
      "keys:\n"
      "  - tenant: acme\n"
      "    role: user\n"
      "    sha256: " +
      kHashA +
      "\n"
      "  - {tenant: ops.team_1, role: admin, sha256: " +
      kHashB + "}\n";
  auto keys = ParseApiKeys(text, "keys.yaml");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  ASSERT_EQ(keys->keys.size(), 2u);
  EXPECT_EQ(keys->keys[0].tenant, "acme");
  EXPECT_FALSE(keys->keys[0].admin);
  EXPECT_EQ(keys->keys[0].sha256[0], 0xaa);
  EXPECT_EQ(keys->keys[1].tenant, "ops.team_1");
  EXPECT_TRUE(keys->keys[1].admin);
  // Upper-case hex is the same hash.
  EXPECT_EQ(keys->keys[1].sha256[0], 0x9f);
  EXPECT_EQ(keys->keys[1].sha256[31], 0x08);
  ASSERT_EQ(keys->quotas.count("acme"), 1u);
  EXPECT_EQ(keys->quotas.at("acme").max_sessions, 10);
  EXPECT_EQ(keys->quotas.at("acme").max_generations, 2);
  EXPECT_EQ(keys->quotas.at("acme").max_kv_blocks, 300);
  EXPECT_EQ(keys->quotas.at("acme").tokens_per_second, 50);
}

TEST(ApiKeysFileTest, EveryMistakeNamesTheEntryAndTheField) {
  const std::string key = "    role: user\n    sha256: " + kHashA + "\n";
  struct Case {
    std::string text;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"keys:\n  - tenant: a\n    role: root\n    sha256: " + kHashA + "\n",
       "keys[0].role = \"root\" is not one of user, admin"},
      {"keys:\n  - tenant: a\n" + key + "  - tenant: b\n" + key,
       "keys[1].sha256 is the hash of an earlier key"},
      {"keys:\n  - tenant: a\n    role: user\n    sha256: abc\n",
       "keys[0].sha256 is not 64 hex digits"},
      {"keys:\n  - tenant: a\n    role: user\n    sha256: " + std::string(63, 'a') + "g\n",
       "keys[0].sha256 is not 64 hex digits"},
      {"keys:\n  - tenant: \"a b\"\n" + key, "keys[0].tenant = \"a b\" is not a tenant name"},
      {"keys:\n  - tenant: " + std::string(65, 't') + "\n" + key, "is not a tenant name"},
      {"keys:\n  - role: user\n    sha256: " + kHashA + "\n", "keys[0].tenant is missing"},
      {"keys:\n  - tenant: a\n    sha256: " + kHashA + "\n", "keys[0].role is missing"},
      {"keys:\n  - tenant: a\n    role: user\n", "keys[0].sha256 is missing"},
      {"keys:\n  - tenant: a\n    key: hunter2\n" + key, "unknown field keys[0].key"},
      {"keys: 3\n", "keys must be a list"},
      {"tenants:\n  a: {max_sessions: -1}\n", "tenants.a.max_sessions = -1 is not a whole number"},
      {"tenants:\n  a: {max_sessions: 2000000}\n", "tenants.a.max_sessions = 2000000 is outside"},
      {"tenants:\n  a: {max_tokens: 5}\n", "unknown quota tenants.a.max_tokens"},
      {"users: []\n", "unknown section users"},
      {"keys: [\n", "not valid YAML"},
      {"- 1\n", "must be a mapping"},
  };
  for (const Case& c : cases) {
    auto keys = ParseApiKeys(c.text, "k.yaml");
    ASSERT_FALSE(keys.ok()) << c.text;
    EXPECT_EQ(keys.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(keys.status().message().find("auth.keys_file k.yaml: "), std::string::npos)
        << keys.status().message();
    EXPECT_NE(keys.status().message().find(c.expect), std::string::npos)
        << "text:\n"
        << c.text << "message: " << keys.status().message();
  }
}

TEST(ApiKeysFileTest, AMissingFileIsNotFound) {
  auto keys = LoadApiKeysFile("/nonexistent/streamd-keys.yaml");
  ASSERT_FALSE(keys.ok());
  EXPECT_EQ(keys.status().code(), StatusCode::kNotFound);
  EXPECT_NE(keys.status().message().find("/nonexistent/streamd-keys.yaml"), std::string::npos);
}

TEST(ApiKeysFileTest, TenantNames) {
  EXPECT_TRUE(IsValidTenantName("acme"));
  EXPECT_TRUE(IsValidTenantName("A-b_c.9"));
  EXPECT_FALSE(IsValidTenantName(""));
  EXPECT_FALSE(IsValidTenantName("a/b"));
  EXPECT_FALSE(IsValidTenantName("caf\xc3\xa9"));
  EXPECT_FALSE(IsValidTenantName(std::string(65, 'a')));
  EXPECT_TRUE(IsValidTenantName(std::string(64, 'a')));
}

}  // namespace
}  // namespace streamd
