// The stage lines of `streamd build`: what it is doing now and how long each stage took, so that
// a first `make run` (which builds quietly) is not silent for a minute or two.
//
//   streamd build: [0.0 s] load: reading the model, converting tensors the products cannot read
//   streamd build: [2.3 s] load: done in 2.3 s
//   streamd build: [2.3 s] tune: timing kernel choices on this machine (5 rounds each)
//   ...
//
// They go to stderr, even with --quiet: stdout keeps the results (the tuner's lines and the
// "wrote" line that scripts and tests read). Every stage line is printed only after the input
// was validated, so a bad-input error stays the one line on stderr (tests/cli_errors_test.sh).
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace streamd::tools {

class BuildStages {
 public:
  using Clock = std::chrono::steady_clock;
  explicit BuildStages(Clock::time_point started) : started_(started) {}

  // Starts stage `name` (ending the one before, if any).
  void Begin(const std::string& name, const std::string& what) {
    End();
    name_ = name;
    begun_ = Clock::now();
    Print(name_ + ": " + what);
  }

  // Ends the current stage, if any, with its elapsed time and an optional result.
  void End(const std::string& result = "") {
    if (name_.empty()) return;
    char took[48];
    std::snprintf(took, sizeof took, "done in %.1f s", Seconds(begun_));
    Print(name_ + ": " + took + (result.empty() ? "" : " (" + result + ")"));
    name_.clear();
  }

 private:
  static double Seconds(Clock::time_point since) {
    return std::chrono::duration<double>(Clock::now() - since).count();
  }
  void Print(const std::string& line) const {
    std::fprintf(stderr, "streamd build: [%.1f s] %s\n", Seconds(started_), line.c_str());
    std::fflush(stderr);
  }

  Clock::time_point started_;
  Clock::time_point begun_;
  std::string name_;
};

}  // namespace streamd::tools
