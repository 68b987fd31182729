#include "engine/build_plan/hardware_fingerprint.h"

#include <algorithm>
#include <set>
#include <sstream>

namespace streamd {
namespace {

// The flags that decide which kernels run and how fast (kernels/cpu: AVX2+FMA+F16C, AVX-VNNI,
// AVX-512 F/BW/VL/VNNI, AMX; BF16/FP16 for later kernels).
const std::set<std::string>& RelevantFlags() {
  static const std::set<std::string> flags = {
      "avx",      "avx2",     "fma",      "f16c",        "avx_vnni",    "avx512f",
      "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16", "avx512_fp16",
      "amx_tile", "amx_int8", "amx_bf16", "amx_fp16"};
  return flags;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

}  // namespace

HardwareFingerprint ParseCpuInfo(const std::string& cpuinfo) {
  HardwareFingerprint fp;
  fp.kind = "cpu";
  std::istringstream in(cpuinfo);
  std::string line;
  bool have_flags = false;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) {
      if (Trim(line).empty() && have_flags) break;  // the end of the first processor
      continue;
    }
    const std::string key = Trim(line.substr(0, colon));
    const std::string value = Trim(line.substr(colon + 1));
    if (key == "vendor_id" && fp.vendor.empty()) fp.vendor = value;
    if (key == "model name" && fp.model.empty()) fp.model = value;
    if (key == "flags" && !have_flags) {
      have_flags = true;
      std::istringstream words(value);
      std::string flag;
      while (words >> flag) {
        if (RelevantFlags().count(flag) > 0) fp.isa_flags.push_back(flag);
      }
      std::sort(fp.isa_flags.begin(), fp.isa_flags.end());
      fp.isa_flags.erase(std::unique(fp.isa_flags.begin(), fp.isa_flags.end()), fp.isa_flags.end());
    }
  }
  return fp;
}

std::string HardwareFingerprint::Describe() const {
  std::string out = kind + " " + vendor + " \"" + model + "\", " + std::to_string(cpus) +
                    " CPUs, kernels " + kernel_level + ", flags";
  for (const std::string& f : isa_flags) out += " " + f;
  return out;
}

}  // namespace streamd
