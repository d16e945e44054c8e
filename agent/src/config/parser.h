// The TOML reader behind config.h, for config/ only: the [agent] keys
// (agent_keys.cc), the [[resource]] keys (resource_keys.cc), and the
// document, the cross-table checks and loading (config.cc). Every mistake
// becomes "file:line: key: problem" in one Errors, so that a file's
// mistakes are all reported at once.
//
// Thread safety: not thread-safe; one Parser per load.
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "config/config.h"
#include "model/kubelet_names.h"

namespace devplug::config::detail {

using kubelet::CheckResourceName;
using kubelet::CheckSocketName;
using kubelet::DefaultSocketName;
using kubelet::kMaxSocketPathBytes;

// Where command-line overrides "come from" in messages.
inline const SourceLocation kCommandLine{"command line", 0};

// The [agent] keys that hold a duration.
struct DurationKey {
  std::string_view name;
  std::chrono::milliseconds AgentConfig::*field;
  std::chrono::milliseconds min;  // 0: "0s" allowed (and means off)
  std::chrono::milliseconds max;
};
inline constexpr DurationKey kDurationKeys[] = {
    {"resync_interval", &AgentConfig::resync_interval, std::chrono::milliseconds(0),
     kMaxResyncInterval},
    {"call_timeout", &AgentConfig::call_timeout, std::chrono::milliseconds(1), kMaxCallTimeout},
    {"start_timeout", &AgentConfig::start_timeout, std::chrono::milliseconds(1), kMaxStartTimeout},
    {"prestart_timeout", &AgentConfig::prestart_timeout, std::chrono::milliseconds(1),
     kMaxPrestartTimeout},
    {"pod_resources_poll", &AgentConfig::pod_resources_poll, std::chrono::milliseconds(0),
     kMaxPodResourcesDuration},
    {"release_grace", &AgentConfig::release_grace, std::chrono::milliseconds(0),
     kMaxPodResourcesDuration},
    {"kubelet_settle", &AgentConfig::kubelet_settle, std::chrono::milliseconds(0),
     kMaxPodResourcesDuration},
    {"unseen_timeout", &AgentConfig::unseen_timeout, std::chrono::milliseconds(0),
     kMaxPodResourcesDuration},
};

class Errors {
 public:
  void Add(const std::string& file, int line, std::string_view key, std::string_view problem) {
    lines_.push_back(Located({file, line}, key, problem));
  }
  bool empty() const { return lines_.empty(); }
  Status ToStatus() const { return InvalidArgumentError(StrJoin(lines_, "\n")); }

 private:
  std::vector<std::string> lines_;
};

inline int LineOf(const toml::node& node) { return static_cast<int>(node.source().begin.line); }

std::string_view TypeName(const toml::node& node);
// A module's value as the module-value tree (config_tree.h).
ConfigNode TreeOf(const toml::node& node);

class Parser {
 public:
  Parser(AgentConfig& cfg, Errors& errors) : cfg_(cfg), errors_(errors) {}

  void ParseDocument(const toml::table& doc, const std::string& file);

  // Sets a path key's value, or says why it cannot be one.
  static std::string SetPath(const std::string& value, std::string* out);
  // Applies the command line's overrides, each checked like a file value.
  void ApplyOverrides(const LoadOptions& o);
  // agent.control_socket: an absolute socket path, or "" for none.
  std::string SetControlSocket(const std::string& value);

  // Whether resource i's table sets `registration` itself.
  bool RegistrationSet(size_t i) const { return registration_set_.count(i) > 0; }
  // Whether resource i's table sets `key` itself (cdi, cdi_only).
  bool KeySet(size_t i, const std::string& key) const { return key_lines_.count({i, key}) > 0; }
  // Line of resource i's `key`, or the table's line.
  int KeyLine(size_t i, const std::string& key) const {
    auto it = key_lines_.find({i, key});
    return it != key_lines_.end() ? it->second : cfg_.resources[i].where.line;
  }
  // Line of the explicit socket key of resource i, or the table's line.
  int SocketLine(size_t i) const {
    auto it = socket_lines_.find(i);
    return it != socket_lines_.end() ? it->second : cfg_.resources[i].where.line;
  }

 private:
  void Error(const toml::node& node, std::string_view key, std::string_view problem);
  const std::string* String(const toml::node& node, std::string_view key);
  // [agent] (agent_keys.cc).
  void ParseAgent(const toml::table& t);
  static std::string AgentConfig::*PathField(std::string_view name);
  static const DurationKey* FindDurationKey(std::string_view name);
  // One [[resource]] (resource_keys.cc).
  void ParseResource(const toml::table& t);

  AgentConfig& cfg_;
  Errors& errors_;
  std::string file_;
  std::map<size_t, int> socket_lines_;
  std::set<size_t> registration_set_;
  std::map<std::pair<size_t, std::string>, int> key_lines_;
};

}  // namespace devplug::config::detail
