// HardwareFingerprint: the machine a build plan was tuned on. A plan's kernel choices and
// timings hold for that machine only (another CPU model may prefer other levels, splits or
// thread counts; a CPU without a level the plan picked cannot run it at all), so `serve --plan`
// refuses a plan whose fingerprint differs from this machine's, naming both.
//
// A CPU fingerprint is the vendor and model strings (/proc/cpuinfo), the instruction-set flags
// the kernels care about (not the whole flag list: microcode and mitigation flags change under
// a kernel update without changing what the kernels run), the best level the kernels can use
// here (AMX also needs the kernel's permission) and the CPUs this process may run on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace streamd {

struct HardwareFingerprint {
  std::string kind;                    // "cpu"
  std::string vendor;                  // "GenuineIntel", "AuthenticAMD"
  std::string model;                   // "Intel(R) Xeon(R) Platinum 8480+"
  std::vector<std::string> isa_flags;  // sorted: "amx_int8", "avx2", "avx512_vnni", ...
  std::string kernel_level;            // kernels::cpu::IsaName(DetectIsa())
  int32_t cpus = 0;                    // CPUs this process may run on

  bool operator==(const HardwareFingerprint&) const = default;
  // One line: "cpu GenuineIntel \"Intel(R) Xeon(R) ...\", 2 CPUs, kernels amx-int8, flags ...".
  std::string Describe() const;
};

// This machine's CPU.
HardwareFingerprint CpuFingerprint();

// Parses /proc/cpuinfo text (the first processor's vendor_id, model name and flags); cpus and
// kernel_level are left to the caller. Exposed for tests.
HardwareFingerprint ParseCpuInfo(const std::string& cpuinfo);

}  // namespace streamd
