#include "engine/build_plan/machine_load.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace streamd {
namespace {

// The first line of /proc/stat: CPU time of all CPUs in clock ticks, by kind.
bool ReadProcStat(double* busy_seconds, double* total_seconds) {
  std::ifstream f("/proc/stat");
  std::string line;
  if (!f || !std::getline(f, line) || line.rfind("cpu ", 0) != 0) return false;
  std::istringstream in(line.substr(4));
  double v[8] = {};  // user nice system idle iowait irq softirq steal
  for (double& x : v) {
    if (!(in >> x)) return false;
  }
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  if (tick <= 0) return false;
  double total = 0;
  for (double x : v) total += x;
  *total_seconds = total / tick;
  *busy_seconds = (total - v[3] - v[4]) / tick;
  return true;
}

double OwnCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto s = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

}  // namespace

MachineLoad::MachineLoad() {
  ok_ = ReadProcStat(&busy_seconds_, &total_seconds_);
  own_seconds_ = OwnCpuSeconds();
}

double MachineLoad::OthersShare() const {
  double busy = 0, total = 0;
  if (!ok_ || !ReadProcStat(&busy, &total) || total <= total_seconds_) return 0;
  const double others = (busy - busy_seconds_) - (OwnCpuSeconds() - own_seconds_);
  return std::clamp(others / (total - total_seconds_), 0.0, 1.0);
}

}  // namespace streamd
