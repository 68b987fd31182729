#include "tests/e2e/deploy_manifest.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace streamd::e2e {
namespace {

StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError(path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The logical lines of a Containerfile or a unit: comments dropped, lines ending in '\'
// joined with the next.
std::vector<std::string> LogicalLines(const std::string& text) {
  std::vector<std::string> lines;
  std::string current;
  std::istringstream in(text);
  for (std::string raw; std::getline(in, raw);) {
    const size_t start = raw.find_first_not_of(" \t");
    if (start == std::string::npos) continue;
    if (current.empty() && (raw[start] == '#' || raw[start] == ';')) continue;
    std::string part = raw.substr(start);
    while (!part.empty() && (part.back() == ' ' || part.back() == '\t')) part.pop_back();
    if (!part.empty() && part.back() == '\\') {
      current += part.substr(0, part.size() - 1) + " ";
      continue;
    }
    lines.push_back(current + part);
    current.clear();
  }
  return lines;
}

// Words separated by blanks (the unit's ExecStart holds no quotes).
std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

StatusOr<std::vector<std::string>> JsonArray(const std::string& text, const std::string& what) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return InvalidArgumentError(what + ": not a JSON array: " + text);
  std::vector<std::string> out;
  for (const auto& e : j) {
    if (!e.is_string()) return InvalidArgumentError(what + ": not every element is a string");
    out.push_back(e.get<std::string>());
  }
  return out;
}

// "5s", "500ms", "1m" in seconds (Docker's HEALTHCHECK durations).
double DockerSeconds(const std::string& text) {
  char* end = nullptr;
  const double n = std::strtod(text.c_str(), &end);
  const std::string unit(end);
  return unit == "ms" ? n / 1000 : unit == "m" ? n * 60 : n;
}

}  // namespace

StatusOr<PodManifest> ReadPodManifest(const std::string& deployment_yaml) {
  try {
    const YAML::Node pod = YAML::LoadFile(deployment_yaml)["spec"]["template"]["spec"];
    const YAML::Node container = pod["containers"][0];
    PodManifest m;
    for (const auto& a : container["args"]) m.args.push_back(a.as<std::string>());
    for (const auto& p : container["ports"]) {
      if (p["name"].as<std::string>() == "grpc") m.grpc_port = p["containerPort"].as<int>();
    }
    std::map<std::string, std::string> secret_of_volume;
    for (const auto& v : pod["volumes"]) {
      if (v["secret"]) {
        secret_of_volume[v["name"].as<std::string>()] = v["secret"]["secretName"].as<std::string>();
      }
    }
    for (const auto& mount : container["volumeMounts"]) {
      auto it = secret_of_volume.find(mount["name"].as<std::string>());
      if (it != secret_of_volume.end()) {
        m.secret_mounts[mount["mountPath"].as<std::string>()] = it->second;
      }
    }
    for (const char* name : {"startupProbe", "readinessProbe", "livenessProbe"}) {
      const YAML::Node p = container[name];
      if (!p || !p["exec"]) {
        return InvalidArgumentError(deployment_yaml + ": " + name + " is not an exec probe");
      }
      Probe probe{name, {}, p["timeoutSeconds"] ? p["timeoutSeconds"].as<double>() : 1.0};
      for (const auto& a : p["exec"]["command"]) probe.argv.push_back(a.as<std::string>());
      m.probes.push_back(std::move(probe));
    }
    return m;
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(deployment_yaml + ": " + e.what());
  }
}

StatusOr<std::string> YamlValue(const std::string& yaml_file, const std::string& dotted_key) {
  try {
    YAML::Node node = YAML::LoadFile(yaml_file);
    std::istringstream parts(dotted_key);
    for (std::string part; std::getline(parts, part, '.');) {
      if (!node.IsMap() || !node[part]) return std::string();
      node = node[part];
    }
    return node.as<std::string>();
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(yaml_file + ": " + e.what());
  }
}

StatusOr<ImageManifest> ReadImageManifest(const std::string& containerfile) {
  STREAMD_ASSIGN_OR_RETURN(const std::string text, ReadText(containerfile));
  ImageManifest m;
  bool has_cmd = false, has_healthcheck = false;
  for (const std::string& line : LogicalLines(text)) {
    if (line.rfind("CMD ", 0) == 0) {
      STREAMD_ASSIGN_OR_RETURN(m.cmd, JsonArray(line.substr(4), containerfile + " CMD"));
      has_cmd = true;
    } else if (line.rfind("HEALTHCHECK ", 0) == 0) {
      const size_t cmd = line.find(" CMD ");
      if (cmd == std::string::npos) {
        return InvalidArgumentError(containerfile + ": HEALTHCHECK without CMD");
      }
      m.healthcheck.name = "HEALTHCHECK";
      m.healthcheck.timeout_s = 30;  // Docker's default
      for (const std::string& option : Words(line.substr(12, cmd - 12))) {
        if (option.rfind("--timeout=", 0) == 0) {
          m.healthcheck.timeout_s = DockerSeconds(option.substr(10));
        }
      }
      STREAMD_ASSIGN_OR_RETURN(m.healthcheck.argv,
                               JsonArray(line.substr(cmd + 5), containerfile + " HEALTHCHECK"));
      has_healthcheck = true;
    }
  }
  if (!has_cmd || !has_healthcheck) {
    return InvalidArgumentError(containerfile + ": no CMD or no HEALTHCHECK");
  }
  return m;
}

StatusOr<UnitManifest> ReadUnitManifest(const std::string& unit_file) {
  STREAMD_ASSIGN_OR_RETURN(const std::string text, ReadText(unit_file));
  UnitManifest m;
  for (const std::string& line : LogicalLines(text)) {
    if (line.rfind("ExecStart=", 0) == 0) {
      const std::vector<std::string> words = Words(line.substr(10));
      if (words.size() < 2 || words[1] != "serve") {
        return InvalidArgumentError(unit_file + ": ExecStart is not `streamd serve ...`");
      }
      m.serve_args.assign(words.begin() + 2, words.end());
    } else if (line.rfind("LoadCredential=", 0) == 0) {
      const std::string value = line.substr(15);
      const size_t colon = value.find(':');
      m.credentials[value.substr(0, colon)] =
          colon == std::string::npos ? "" : value.substr(colon + 1);
    }
  }
  if (m.serve_args.empty()) return InvalidArgumentError(unit_file + ": no ExecStart");
  return m;
}

std::vector<std::string> Rewrite(std::vector<std::string> args,
                                 const std::vector<std::pair<std::string, std::string>>& swaps) {
  for (std::string& a : args) {
    for (const auto& [from, to] : swaps) {
      for (size_t at = a.find(from); at != std::string::npos; at = a.find(from, at + to.size())) {
        a.replace(at, from.size(), to);
      }
    }
  }
  return args;
}

std::string FlagValue(const std::vector<std::string>& argv, const std::string& name) {
  const std::string flag = "--" + name;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == flag && i + 1 < argv.size()) return argv[i + 1];
    if (argv[i].rfind(flag + "=", 0) == 0) return argv[i].substr(flag.size() + 1);
  }
  return "";
}

}  // namespace streamd::e2e
