// MachineLoad: how much of this machine's CPU time other processes (and, on a VM, the host's
// steal) took while a timing ran. The tuner's timings hold for the machine as it was: a thread
// count chosen while a compiler ran on every core would be wrong on the quiet machine the plan
// serves on, so the tuner keeps the default thread count when others were busy, and the build
// records the share in the plan.
#pragma once

namespace streamd {

class MachineLoad {
 public:
  MachineLoad();  // starts measuring
  // Others' share of all CPU time since construction, in [0, 1]; 0 when /proc/stat cannot be
  // read (not Linux).
  double OthersShare() const;

 private:
  double busy_seconds_ = 0, total_seconds_ = 0, own_seconds_ = 0;
  bool ok_ = false;
};

}  // namespace streamd
