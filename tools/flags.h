// A small command-line flag parser for streamd's tools: `--name value`, `--name=value`,
// boolean `--name`, short aliases (`-n`). Every value is range-checked at parse time and every
// error names the flag and the limit, so tools can print one line and exit non-zero.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/util/status.h"

namespace streamd::tools {

class FlagParser {
 public:
  explicit FlagParser(std::string usage) : usage_(std::move(usage)) {}

  void String(const std::string& name, std::string* dest, std::string help);
  void Strings(const std::string& name, std::vector<std::string>* dest,
               std::string help);  // repeatable
  void Int(const std::string& name, int64_t* dest, int64_t min, int64_t max, std::string help);
  void Float(const std::string& name, double* dest, double min, double max, std::string help);
  void Bool(const std::string& name, bool* dest, std::string help);
  // `-n` for `--n-tokens`, etc.
  void Alias(const std::string& short_name, const std::string& name);

  // Parses argv[first..argc). Sets help_requested() on --help/-h.
  Status Parse(int argc, char** argv, int first);
  bool help_requested() const { return help_requested_; }
  bool was_set(const std::string& name) const;
  std::string Help() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string default_text;
    bool takes_value = true;
    bool set = false;
    std::function<Status(const std::string&)> apply;
  };
  Flag* Find(const std::string& name);

  std::string usage_;
  std::vector<Flag> flags_;
  std::vector<std::pair<std::string, std::string>> aliases_;
  bool help_requested_ = false;
};

}  // namespace streamd::tools
