// CpuFingerprint(): this machine's CPU, read from /proc/cpuinfo and the kernels' own detection
// (apart from hardware_fingerprint.cc, which only parses and prints, so the plan reader's
// fuzzer needs no CPU checks).
#include <sched.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "engine/build_plan/hardware_fingerprint.h"
#include "kernels/cpu/matmul.h"

namespace streamd {
namespace {

int32_t AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

HardwareFingerprint CpuFingerprint() {
  std::ifstream f("/proc/cpuinfo");
  std::stringstream text;
  text << f.rdbuf();
  HardwareFingerprint fp = ParseCpuInfo(text.str());
  if (fp.vendor.empty()) fp.vendor = "unknown";
  if (fp.model.empty()) fp.model = "unknown";
  fp.kernel_level = kernels::cpu::IsaName(kernels::cpu::DetectIsa());
  fp.cpus = AllowedCpus();
  return fp;
}

}  // namespace streamd
