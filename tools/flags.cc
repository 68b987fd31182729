#include "tools/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace streamd::tools {
namespace {

std::string FormatDouble(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

void FlagParser::String(const std::string& name, std::string* dest, std::string help) {
  flags_.push_back({name, std::move(help), *dest, true, false, [dest](const std::string& v) {
                      *dest = v;
                      return OkStatus();
                    }});
}

void FlagParser::Strings(const std::string& name, std::vector<std::string>* dest,
                         std::string help) {
  flags_.push_back(
      {name, std::move(help) + " (repeatable)", "", true, false, [dest](const std::string& v) {
         dest->push_back(v);
         return OkStatus();
       }});
}

void FlagParser::Int(const std::string& name, int64_t* dest, int64_t min, int64_t max,
                     std::string help) {
  flags_.push_back(
      {name, std::move(help), std::to_string(*dest), true, false,
       [name, dest, min, max](const std::string& v) -> Status {
         errno = 0;
         char* end = nullptr;
         const long long x = std::strtoll(v.c_str(), &end, 10);
         if (v.empty() || *end != '\0' || errno == ERANGE) {
           return InvalidArgumentError("--" + name + " = \"" + v + "\" is not an integer");
         }
         if (x < min || x > max) {
           return InvalidArgumentError("--" + name + " = " + v + " is outside [" +
                                       std::to_string(min) + ", " + std::to_string(max) + "]");
         }
         *dest = x;
         return OkStatus();
       }});
}

void FlagParser::Float(const std::string& name, double* dest, double min, double max,
                       std::string help) {
  flags_.push_back(
      {name, std::move(help), FormatDouble(*dest), true, false,
       [name, dest, min, max](const std::string& v) -> Status {
         char* end = nullptr;
         const double x = std::strtod(v.c_str(), &end);
         if (v.empty() || *end != '\0' || !std::isfinite(x)) {
           return InvalidArgumentError("--" + name + " = \"" + v + "\" is not a finite number");
         }
         if (x < min || x > max) {
           return InvalidArgumentError("--" + name + " = " + v + " is outside [" +
                                       FormatDouble(min) + ", " + FormatDouble(max) + "]");
         }
         *dest = x;
         return OkStatus();
       }});
}

void FlagParser::Bool(const std::string& name, bool* dest, std::string help) {
  flags_.push_back({name, std::move(help), "", false, false, [dest](const std::string&) {
                      *dest = true;
                      return OkStatus();
                    }});
}

void FlagParser::Alias(const std::string& short_name, const std::string& name) {
  aliases_.emplace_back(short_name, name);
}

FlagParser::Flag* FlagParser::Find(const std::string& name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool FlagParser::was_set(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f.set;
  }
  return false;
}

Status FlagParser::Parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return OkStatus();
    }
    std::string name, value;
    bool has_value = false;
    if (arg.rfind("--", 0) == 0) {
      name = arg.substr(2);
      const size_t eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
    } else if (arg.size() > 1 && arg[0] == '-') {
      for (const auto& [alias, target] : aliases_) {
        if (arg == alias) name = target;
      }
      if (name.empty()) return InvalidArgumentError("unknown flag " + arg + " (see --help)");
    } else {
      return InvalidArgumentError("unexpected argument \"" + arg + "\" (see --help)");
    }
    Flag* flag = Find(name);
    if (flag == nullptr) return InvalidArgumentError("unknown flag --" + name + " (see --help)");
    if (flag->takes_value && !has_value) {
      if (i + 1 >= argc) return InvalidArgumentError("--" + name + " needs a value");
      value = argv[++i];
    } else if (!flag->takes_value && has_value) {
      return InvalidArgumentError("--" + name + " takes no value");
    }
    STREAMD_RETURN_IF_ERROR(flag->apply(value));
    flag->set = true;
  }
  return OkStatus();
}

std::string FlagParser::Help() const {
  std::ostringstream out;
  out << usage_ << "\n\nFlags:\n";
  for (const Flag& f : flags_) {
    std::string names = "--" + f.name;
    for (const auto& [alias, target] : aliases_) {
      if (target == f.name) names = alias + ", " + names;
    }
    if (f.takes_value) names += " VALUE";
    out << "  " << names << "\n      " << f.help;
    if (!f.default_text.empty()) out << " (default: " << f.default_text << ")";
    out << "\n";
  }
  return out.str();
}

}  // namespace streamd::tools
