#include "server/authenticator.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace streamd::server {
namespace {

// SHA-256 test vectors (FIPS 180-2 examples and `printf %s test | sha256sum`), so that the
// hashing is checked against values computed elsewhere, not by the code under test.
constexpr char kKeyTest[] = "test";
constexpr char kHashTest[] = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
constexpr char kKeyAbc[] = "abc";
constexpr char kHashAbc[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

class AuthenticatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/streamd-auth-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/keys.yaml";
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  // Written under another name and renamed, as an operator replacing the file would.
  void Write(const std::string& text) {
    const std::string tmp = path_ + ".tmp";
    std::ofstream(tmp) << text;
    ASSERT_EQ(std::rename(tmp.c_str(), path_.c_str()), 0);
  }
  static std::string Header(const std::string& key) { return "Bearer " + key; }

  std::string dir_, path_;
};

TEST_F(AuthenticatorTest, WithoutAKeysFileEveryCallerIsTheAnonymousAdmin) {
  auto auth = Authenticator::Create("");
  ASSERT_TRUE(auth.ok());
  EXPECT_FALSE((*auth)->enabled());
  auto caller = (*auth)->AuthenticateHeader(nullptr);
  ASSERT_TRUE(caller.ok());
  EXPECT_TRUE(caller->admin);
  EXPECT_FALSE(caller->authenticated);
  EXPECT_TRUE(caller->CanSee("anyone"));
}

TEST_F(AuthenticatorTest, KeysNameTheirTenantAndRole) {
  Write(std::string("keys:\n") + "  - {tenant: acme, role: user, sha256: " + kHashTest + "}\n" +
        "  - {tenant: ops, role: admin, sha256: " + kHashAbc + "}\n");
  std::vector<AuthFailure> refused;
  auto auth = Authenticator::Create(path_, [&](AuthFailure why) { refused.push_back(why); });
  ASSERT_TRUE(auth.ok()) << auth.status().ToString();
  const Authenticator& a = **auth;

  const std::string test_key = Header(kKeyTest);
  auto user = a.AuthenticateHeader(&test_key);
  ASSERT_TRUE(user.ok()) << user.status().ToString();
  EXPECT_EQ(user->tenant, "acme");
  EXPECT_FALSE(user->admin);
  EXPECT_TRUE(user->authenticated);
  EXPECT_TRUE(user->CanSee("acme"));
  EXPECT_FALSE(user->CanSee("other"));
  EXPECT_FALSE(user->CanSee(""));
  EXPECT_EQ(a.RequireAdmin(*user, "ImportSession").code(), StatusCode::kPermissionDenied);

  const std::string lower = "bearer " + std::string(kKeyAbc);  // the scheme is case-insensitive
  auto admin = a.AuthenticateHeader(&lower);
  ASSERT_TRUE(admin.ok());
  EXPECT_EQ(admin->tenant, "ops");
  EXPECT_TRUE(admin->admin);
  EXPECT_TRUE(admin->CanSee("acme"));
  EXPECT_TRUE(a.RequireAdmin(*admin, "ImportSession").ok());

  const std::string wrong = Header("tesT"), no_scheme = kKeyTest, empty = "Bearer ";
  const auto missing = a.AuthenticateHeader(nullptr);
  const auto unknown = a.AuthenticateHeader(&wrong);
  const auto malformed = a.AuthenticateHeader(&no_scheme);
  const auto blank = a.AuthenticateHeader(&empty);
  for (const auto* r : {&missing, &unknown, &malformed, &blank}) {
    ASSERT_FALSE(r->ok());
    EXPECT_EQ(r->status().code(), StatusCode::kUnauthenticated);
    // Never a hint of which keys or tenants exist.
    EXPECT_EQ(r->status().message().find("acme"), std::string::npos);
  }
  EXPECT_EQ(refused, (std::vector<AuthFailure>{AuthFailure::kNotAdmin, AuthFailure::kMissing,
                                               AuthFailure::kUnknownKey, AuthFailure::kMalformed,
                                               AuthFailure::kMalformed}));
}

TEST_F(AuthenticatorTest, TheFileIsReadAgainWhenItChangesAndABrokenOneKeepsTheOldKeys) {
  Write(std::string("keys:\n  - {tenant: acme, role: user, sha256: ") + kHashTest + "}\n");
  auto auth = Authenticator::Create(path_);
  ASSERT_TRUE(auth.ok());
  Authenticator& a = **auth;
  const std::string test = Header(kKeyTest), abc = Header(kKeyAbc);
  EXPECT_TRUE(a.AuthenticateHeader(&test).ok());
  EXPECT_FALSE(a.AuthenticateHeader(&abc).ok());
  EXPECT_FALSE(a.ReloadIfChanged());  // unchanged

  // Rotation: the old key goes, a new one comes, a quota appears.
  Write(std::string("tenants:\n  acme: {max_sessions: 3}\n") +
        "keys:\n  - {tenant: acme, role: user, sha256: " + kHashAbc + "}\n");
  EXPECT_TRUE(a.ReloadIfChanged());
  EXPECT_FALSE(a.AuthenticateHeader(&test).ok());
  EXPECT_TRUE(a.AuthenticateHeader(&abc).ok());
  EXPECT_EQ(a.QuotasOf("acme").max_sessions, 3);
  EXPECT_EQ(a.QuotasOf("other").max_sessions, 0);

  // A broken file: the keys stay as they were.
  Write("keys: [ {tenant: acme, role: user, sha256: nothex} ]\n");
  EXPECT_FALSE(a.ReloadIfChanged());
  EXPECT_TRUE(a.AuthenticateHeader(&abc).ok());

  // The reload thread picks a change up by itself.
  Write(std::string("keys:\n  - {tenant: acme, role: user, sha256: ") + kHashTest + "}\n");
  const auto deadline = std::chrono::steady_clock::now() + 4 * Authenticator::kReloadPeriod;
  while (!a.AuthenticateHeader(&test).ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(a.AuthenticateHeader(&test).ok());
  EXPECT_FALSE(a.AuthenticateHeader(&abc).ok());
}

TEST_F(AuthenticatorTest, ABadFileStopsTheStart) {
  Write("keys:\n  - {tenant: acme, role: owner, sha256: " + std::string(64, '0') + "}\n");
  auto auth = Authenticator::Create(path_);
  ASSERT_FALSE(auth.ok());
  EXPECT_NE(auth.status().message().find("keys[0].role"), std::string::npos);
  auto missing = Authenticator::Create(dir_ + "/none.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("none.yaml"), std::string::npos);
}

}  // namespace
}  // namespace streamd::server
