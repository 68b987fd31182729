// Helpers of the snapshot-directory tests (snapshot_store_test.cc, model_snapshot_dir_test.cc):
// a fresh temporary directory, and the names in a directory, sorted.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace streamd::store_testing {

// A new directory under /tmp named /tmp/<prefix>-XXXXXX.
inline std::string TempDir(const std::string& prefix) {
  std::string path = "/tmp/" + prefix + "-XXXXXX";
  const char* d = ::mkdtemp(path.data());
  EXPECT_NE(d, nullptr);
  return path;
}

// The names of the entries of `dir` (files and folders), sorted; empty when it does not exist.
inline std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace streamd::store_testing
