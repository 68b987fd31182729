// Tests' view of the page cache: how many pages of a file are in it now (mincore over a read-only
// mapping of the file). Used to tell a direct write (none) from a buffered one, and a warmed
// file (all) from a cold one.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <string>
#include <vector>

namespace streamd {

inline size_t ResidentPages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return 0;
  struct stat st {};
  ::fstat(fd, &st);
  size_t resident = 0;
  const size_t size = static_cast<size_t>(st.st_size);
  if (size > 0) {
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (map != MAP_FAILED) {
      const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
      std::vector<unsigned char> pages((size + page - 1) / page);
      if (::mincore(map, size, pages.data()) == 0) {
        for (unsigned char p : pages) resident += p & 1;
      }
      ::munmap(map, size);
    }
  }
  ::close(fd);
  return resident;
}

}  // namespace streamd
