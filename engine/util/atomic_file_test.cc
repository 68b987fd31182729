// WriteFileAtomically: the file appears whole, replaces an old one, leaves no temporary file,
// and a failure (a missing or read-only directory) leaves the old file as it was, with the
// failure's code.
#include "engine/util/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace streamd {
namespace {

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

int Entries(const std::string& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

TEST(AtomicFileTest, WritesAndReplacesWholeWithNothingLeftBehind) {
  const std::string dir = testing::TempDir() + "/atomic_file_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/f.bin";
  ASSERT_TRUE(WriteFileAtomically(path, Bytes("first")).ok());
  EXPECT_EQ(Contents(path), "first");
  ASSERT_TRUE(WriteFileAtomically(path, Bytes("second, longer")).ok());
  EXPECT_EQ(Contents(path), "second, longer");
  ASSERT_TRUE(WriteFileAtomically(dir + "/private", Bytes("x"), 0600).ok());
  struct stat st{};
  ASSERT_EQ(::stat((dir + "/private").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(Entries(dir), 2) << "a temporary file was left behind";
  std::filesystem::remove_all(dir);
}

TEST(AtomicFileTest, AMissingDirectoryIsNotFoundNamingThePath) {
  const Status missing = WriteFileAtomically("/nonexistent-dir-for-streamd/f", Bytes("x"));
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), ::testing::HasSubstr("/nonexistent-dir-for-streamd/"));
}

// The daemon's full-disk and read-only cases run with real processes in
// tests/e2e/durability_e2e_test.cc (as root too: a private mount namespace).
TEST(AtomicFileTest, AReadOnlyDirectoryKeepsTheOldFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories";
  const std::string dir = testing::TempDir() + "/atomic_ro_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/f";
  ASSERT_TRUE(WriteFileAtomically(path, Bytes("old")).ok());
  ::chmod(dir.c_str(), 0500);
  const Status ro = WriteFileAtomically(path, Bytes("new"));
  ::chmod(dir.c_str(), 0700);
  EXPECT_EQ(ro.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(Contents(path), "old");
  std::filesystem::remove_all(dir);
}

TEST(AtomicFileTest, ErrnoStatusCodesFollowTheCause) {
  EXPECT_EQ(ErrnoStatus(ENOSPC, "cannot write", "/p").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoStatus(EFBIG, "cannot write", "/p").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoStatus(EROFS, "cannot create", "/p").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus(ENOENT, "cannot open", "/p").code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoStatus(EIO, "cannot read", "/p").code(), StatusCode::kInternal);
  EXPECT_THAT(ErrnoStatus(ENOSPC, "cannot write", "/p").message(),
              ::testing::StartsWith("cannot write /p: "));
}

}  // namespace
}  // namespace streamd
