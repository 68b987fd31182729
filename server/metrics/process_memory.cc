#include "server/metrics/process_memory.h"

#include <unistd.h>

#include <cstdio>
#include <limits>

namespace streamd::metrics {

double ResidentMemoryBytes() {
  constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return kUnknown;
  unsigned long long size_pages = 0;
  unsigned long long resident_pages = 0;
  const int fields = std::fscanf(f, "%llu %llu", &size_pages, &resident_pages);
  std::fclose(f);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (fields != 2 || page_size <= 0) return kUnknown;
  return static_cast<double>(resident_pages) * static_cast<double>(page_size);
}

}  // namespace streamd::metrics
