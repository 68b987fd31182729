// WriteFileAtomically: the file appears whole, replaces an old one, leaves no temporary file,
// and a failure (a missing or read-only directory) leaves the old file as it was, with the
// failure's code.
#include "engine/util/atomic_file.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "tests/support/page_cache_test_util.h"

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
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/private").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(Entries(dir), 2) << "a temporary file was left behind";
  std::filesystem::remove_all(dir);
}

// The direct-I/O path (PageAlignedBuffer): every length, page multiple or not, gives a file of
// exactly those bytes, the buffer's tail up to the page boundary is zeroed, nothing temporary is
// left; on /dev/shm (tmpfs, which may refuse O_DIRECT) the fallback gives the same. On ext4 and
// XFS, which take direct I/O, the file's pages stay out of the page cache.
TEST(AtomicFileTest, DirectWritesGiveExactlyTheBytesOnEveryFileSystem) {
  std::mt19937 rng(::getpid());
  for (const std::string& base : {testing::TempDir(), std::string("/dev/shm")}) {
    if (!std::filesystem::is_directory(base)) continue;
    const std::string dir = base + "/atomic_direct_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    struct statfs fs {};
    ASSERT_EQ(::statfs(dir.c_str(), &fs), 0);
    const bool takes_direct_io =
        fs.f_type == 0xEF53 /* ext4 */ || fs.f_type == 0x58465342 /* xfs */;
    PageAlignedBuffer buffer;
    for (const size_t size : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{4097},
                              size_t{(1 << 20) + 3}, size_t{100}}) {
      SCOPED_TRACE(dir + ", " + std::to_string(size) + " bytes");
      buffer.Reserve(std::max<size_t>(size, 1));
      ASSERT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % PageAlignedBuffer::kAlignment, 0u);
      std::memset(buffer.data(), 0xAB, buffer.capacity());  // stale bytes past `size`
      std::string want(size, '\0');
      for (char& c : want) c = static_cast<char>(rng());
      std::memcpy(buffer.data(), want.data(), size);
      const std::string path = dir + "/f.snap";
      const Status s = WriteFileAtomically(path, buffer, size, 0600);
      ASSERT_TRUE(s.ok()) << s.ToString();
      if (takes_direct_io && size > 0) {  // before anything reads it
        EXPECT_EQ(ResidentPages(path), 0u) << "written through the page cache, not directly";
      }
      EXPECT_EQ(Contents(path), want);
      for (size_t i = size; i < PageAlignedBuffer::RoundUp(size); ++i) {
        ASSERT_EQ(buffer.data()[i], 0) << "byte " << i << " of the written page is not zeroed";
      }
      EXPECT_EQ(Entries(dir), 1) << "a temporary file was left behind";
    }
    EXPECT_EQ(WriteFileAtomically(dir + "/g", buffer, buffer.capacity() + 1).code(),
              StatusCode::kInvalidArgument);
    std::filesystem::remove_all(dir);
  }
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
