#include "config/config.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>

#include <toml++/toml.h>

#include "model/api_server_url.h"
#include "model/cdi_names.h"
#include "model/kubelet_names.h"

namespace devplug::config {
namespace {

namespace fs = std::filesystem;

using kubelet::CheckResourceName;
using kubelet::CheckSocketName;
using kubelet::DefaultSocketName;
using kubelet::kMaxSocketPathBytes;

// Where command-line overrides "come from" in messages.
const SourceLocation kCommandLine{"command line", 0};

// The [agent] keys that hold a duration.
struct DurationKey {
  std::string_view name;
  std::chrono::milliseconds AgentConfig::*field;
  std::chrono::milliseconds min;  // 0: "0s" allowed (and means off)
  std::chrono::milliseconds max;
};
constexpr DurationKey kDurationKeys[] = {
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

int LineOf(const toml::node& node) { return static_cast<int>(node.source().begin.line); }

std::string_view TypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    default:
      return "a date/time";
  }
}

ConfigNode TreeOf(const toml::node& node) {
  ConfigNode n;
  n.line = LineOf(node);
  if (const auto* s = node.as_string()) {
    n.kind = ConfigNode::Kind::kString;
    n.text = s->get();
  } else if (const auto* i = node.as_integer()) {
    n.kind = ConfigNode::Kind::kInt;
    n.integer = i->get();
  } else if (const auto* b = node.as_boolean()) {
    n.kind = ConfigNode::Kind::kBool;
    n.boolean = b->get();
  } else if (const auto* a = node.as_array()) {
    n.kind = ConfigNode::Kind::kArray;
    n.items.reserve(a->size());
    for (const toml::node& el : *a) n.items.push_back(TreeOf(el));
  } else if (const auto* t = node.as_table()) {
    n.kind = ConfigNode::Kind::kTable;
    for (const auto& [k, v] : *t)
      n.members.push_back(ConfigMember{std::string(k.str()), TreeOf(v)});
  } else {
    n.kind = ConfigNode::Kind::kOther;
    std::ostringstream text;
    node.visit([&](const auto& v) { text << v; });
    n.text = text.str();
  }
  return n;
}

class Parser {
 public:
  Parser(AgentConfig& cfg, Errors& errors) : cfg_(cfg), errors_(errors) {}

  void ParseDocument(const toml::table& doc, const std::string& file) {
    file_ = file;
    for (auto&& [key, node] : doc) {
      if (key.str() == "agent") {
        if (const toml::table* t = node.as_table()) {
          ParseAgent(*t);
        } else {
          Error(node, "agent", StrCat("must be a table, not ", TypeName(node)));
        }
      } else if (key.str() == "resource") {
        const toml::array* arr = node.as_array();
        if (arr == nullptr || !arr->is_array_of_tables()) {
          Error(node, "resource", "must be written as [[resource]] tables");
          continue;
        }
        for (const toml::node& el : *arr) {
          ParseResource(*el.as_table());
        }
      } else {
        Error(node, key.str(), "unknown key (expected [agent] or [[resource]])");
      }
    }
  }

 private:
  void Error(const toml::node& node, std::string_view key, std::string_view problem) {
    errors_.Add(file_, LineOf(node), key, problem);
  }

  const std::string* String(const toml::node& node, std::string_view key) {
    if (const auto* s = node.as_string()) return &s->get();
    Error(node, key, StrCat("must be a string, not ", TypeName(node)));
    return nullptr;
  }

  void ParseAgent(const toml::table& t) {
    for (auto&& [k, node] : t) {
      const std::string key = StrCat("agent.", k.str());
      const std::string_view name = k.str();
      cfg_.agent_keys[std::string(name)] = {file_, LineOf(node)};
      if (name == "control_socket") {
        const std::string* s = String(node, key);
        if (s == nullptr) continue;
        if (std::string why = SetControlSocket(*s); !why.empty()) Error(node, key, why);
      } else if (name == "metrics_address") {
        const std::string* s = String(node, key);
        if (s == nullptr) continue;
        if (std::string why = CheckMetricsAddress(*s); !why.empty())
          Error(node, key, why);
        else
          cfg_.metrics_address = *s;
      } else if (name == "pod_resources_socket") {
        const std::string* s = String(node, key);
        if (s == nullptr) continue;
        if (std::string why = SetPath(*s, &cfg_.pod_resources_socket); !why.empty())
          Error(node, key, why);
        else if (s->size() > kMaxSocketPathBytes)
          Error(node, key,
                StrCat("is ", s->size(), " bytes; a Unix socket path holds at most ",
                       kMaxSocketPathBytes));
      } else if (std::string AgentConfig::*field = PathField(name)) {
        const std::string* s = String(node, key);
        if (s == nullptr) continue;
        if (std::string why = SetPath(*s, &(cfg_.*field)); !why.empty()) Error(node, key, why);
      } else if (name == "node_name") {
        const std::string* s = String(node, key);
        if (s == nullptr) continue;
        if (s->empty() || s->size() > 253 ||
            s->find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-.") != std::string::npos)
          Error(node, key,
                StrCat(
                    "\"", *s,
                    "\" is not a node name (a DNS subdomain: a-z, 0-9, '-' and '.', at most 253)"));
        else
          cfg_.node_name = *s;
      } else if (name == "api_server") {
        const std::string* s = String(node, key);
        if (s == nullptr) continue;
        if (std::string why = s->empty() ? "" : CheckApiServerUrl(*s); !why.empty())
          Error(node, key, StrCat(why, "; or \"\" for in-cluster"));
        else
          cfg_.api_server = *s;
      } else if (name == "log_level") {
        const std::string* s = String(node, key);
        if (s == nullptr) continue;
        if (!ParseLogLevel(*s, &cfg_.log_level))
          Error(node, key,
                StrCat("unknown level \"", *s, "\" (expected trace|debug|info|warn|error)"));
      } else if (const DurationKey* dk = FindDurationKey(name)) {
        const std::string* s = String(node, key);
        if (s == nullptr) continue;
        auto d = ParseDuration(*s, dk->max);
        if (!d.ok()) {
          Error(node, key, d.status().message());
        } else if (dk->min.count() > 0 && *d < dk->min) {
          Error(node, key,
                StrCat("\"", *s, "\" is shorter than the minimum of ", FormatDuration(dk->min)));
        } else if ((name == "resync_interval" || name == "pod_resources_poll") && d->count() > 0 &&
                   *d < kMinResyncInterval) {
          Error(node, key,
                StrCat("\"", *s, "\" is shorter than the minimum of ",
                       FormatDuration(kMinResyncInterval), " (\"0s\" turns it off)"));
        } else {
          cfg_.*(dk->field) = *d;
        }
      } else if (name == "watch_config") {
        if (const auto* b = node.as_boolean())
          cfg_.watch_config = b->get();
        else
          Error(node, key, StrCat("must be a boolean, not ", TypeName(node)));
      } else if (name == "registration") {
        const std::string* s = String(node, key);
        if (s == nullptr) continue;
        if (!ParseRegistrationMode(*s, &cfg_.registration))
          Error(node, key, StrCat("unknown mode \"", *s, "\" (expected kubelet|plugin-watcher)"));
      } else if (name == "cdi") {
        const std::string* s = String(node, key);
        if (s == nullptr) continue;
        if (!ParseCdiMode(*s, &cfg_.cdi))
          Error(node, key, StrCat("unknown mode \"", *s, "\" (expected off|cri|annotations|both)"));
      } else if (name == "udev_source") {
        const std::string* s = String(node, key);
        if (s == nullptr) continue;
        if (*s == "auto")
          cfg_.udev_source = UdevSource::kAuto;
        else if (*s == "udev")
          cfg_.udev_source = UdevSource::kUdev;
        else if (*s == "kernel")
          cfg_.udev_source = UdevSource::kKernel;
        else
          Error(node, key, StrCat("unknown source \"", *s, "\" (expected auto|udev|kernel)"));
      } else {
        std::vector<std::string> known{"plugin_dir",
                                       "plugins_registry_dir",
                                       "registration",
                                       "module_dir",
                                       "host_root",
                                       "log_level",
                                       "udev_source",
                                       "pod_resources_socket",
                                       "control_socket",
                                       "metrics_address",
                                       "cdi",
                                       "cdi_dir",
                                       "node_name",
                                       "api_server",
                                       "api_ca_file",
                                       "api_token_file",
                                       "api_client_cert",
                                       "api_client_key",
                                       "api_kubeconfig",
                                       "dra_state_dir"};
        for (const DurationKey& d : kDurationKeys) known.emplace_back(d.name);
        Error(node, key, StrCat("unknown key (expected one of ", StrJoin(known, ", "), ")"));
      }
    }
  }

  static std::string AgentConfig::*PathField(std::string_view name) {
    if (name == "plugin_dir") return &AgentConfig::plugin_dir;
    if (name == "plugins_registry_dir") return &AgentConfig::plugins_registry_dir;
    if (name == "module_dir") return &AgentConfig::module_dir;
    if (name == "host_root") return &AgentConfig::host_root;
    if (name == "cdi_dir") return &AgentConfig::cdi_dir;
    if (name == "api_ca_file") return &AgentConfig::api_ca_file;
    if (name == "api_token_file") return &AgentConfig::api_token_file;
    if (name == "api_client_cert") return &AgentConfig::api_client_cert;
    if (name == "api_client_key") return &AgentConfig::api_client_key;
    if (name == "api_kubeconfig") return &AgentConfig::api_kubeconfig;
    if (name == "dra_state_dir") return &AgentConfig::dra_state_dir;
    return nullptr;
  }

 public:
  // Sets a path key's value, or says why it cannot be one.
  static std::string SetPath(const std::string& value, std::string* out) {
    if (value.empty() || value.front() != '/')
      return StrCat("must be an absolute path, got \"", value, "\"");
    if (value.find('\0') != std::string::npos) return "holds a NUL byte";
    std::string v = value;
    while (v.size() > 1 && v.back() == '/') v.pop_back();
    *out = std::move(v);
    return "";
  }

  // Applies the command line's overrides, each checked like a file value.
  void ApplyOverrides(const LoadOptions& o) {
    const std::pair<const std::optional<std::string>*, std::string_view> flags[] = {
        {&o.plugin_dir, "plugin_dir"}, {&o.module_dir, "module_dir"}, {&o.host_root, "host_root"}};
    for (const auto& [value, name] : flags) {
      if (!value->has_value()) continue;
      std::string flag = StrCat("--", name);
      std::replace(flag.begin(), flag.end(), '_', '-');
      if (std::string why = SetPath(**value, &(cfg_.*PathField(name))); !why.empty())
        errors_.Add(kCommandLine.file, 0, flag, why);
    }
    if (o.control_socket)
      if (std::string why = SetControlSocket(*o.control_socket); !why.empty())
        errors_.Add(kCommandLine.file, 0, "--control-socket", why);
  }

  // agent.control_socket: an absolute socket path, or "" for none.
  std::string SetControlSocket(const std::string& value) {
    if (value.empty()) {
      cfg_.control_socket.clear();
      return "";
    }
    std::string path;
    if (std::string why = SetPath(value, &path); !why.empty())
      return StrCat(why, " (or \"\" for none)");
    if (path.size() > kMaxSocketPathBytes)
      return StrCat("is ", path.size(), " bytes; a Unix socket path holds at most ",
                    kMaxSocketPathBytes);
    cfg_.control_socket = std::move(path);
    return "";
  }

 private:
  static const DurationKey* FindDurationKey(std::string_view name) {
    for (const DurationKey& d : kDurationKeys)
      if (d.name == name) return &d;
    return nullptr;
  }

  void ParseResource(const toml::table& t) {
    ResourceConfig r;
    r.where = {file_, LineOf(t)};
    const size_t index = cfg_.resources.size();
    auto key_of = [&](std::string_view k) { return ResourceKey(index, k); };
    bool has_name = false, has_module = false;
    for (auto&& [k, node] : t) {
      const std::string_view name = k.str();
      if (name == "name") {
        if (const std::string* s = String(node, key_of(name))) {
          r.name = *s;
          has_name = true;
          if (std::string why = CheckResourceName(*s); !why.empty()) {
            Error(node, key_of(name),
                  StrCat("\"", *s, "\" is not a valid extended resource name: ", why));
          }
        }
      } else if (name == "module") {
        if (const std::string* s = String(node, key_of(name))) {
          r.module = *s;
          has_module = true;
          if (s->empty() || (s->front() != '/' && s->find('/') != std::string::npos)) {
            Error(node, key_of(name),
                  StrCat("\"", *s, "\" must be a bare module name or an absolute path to a .so"));
          }
        }
      } else if (name == "socket") {
        if (const std::string* s = String(node, key_of(name))) {
          r.socket = *s;
          socket_lines_[index] = LineOf(node);
        }
      } else if (name == "registration") {
        if (const std::string* s = String(node, key_of(name))) {
          if (ParseRegistrationMode(*s, &r.registration))
            registration_set_.insert(index);
          else
            Error(node, key_of(name),
                  StrCat("unknown mode \"", *s, "\" (expected kubelet|plugin-watcher)"));
        }
      } else if (name == "api") {
        if (const std::string* s = String(node, key_of(name))) {
          if (ParseServingApi(*s, &r.api))
            key_lines_[{index, "api"}] = LineOf(node);
          else
            Error(node, key_of(name),
                  StrCat("unknown API \"", *s, "\" (expected device-plugin|dra)"));
        }
      } else if (name == "dra_driver") {
        if (const std::string* s = String(node, key_of(name))) {
          r.driver = *s;
          key_lines_[{index, "dra_driver"}] = LineOf(node);
          if (std::string why = CheckDriverName(*s); !why.empty())
            Error(node, key_of(name), StrCat("\"", *s, "\" is not a DRA driver name: ", why));
        }
      } else if (name == "required" || name == "cdi_only") {
        if (const auto* b = node.as_boolean())
          (name == "required" ? r.required : r.cdi_only) = b->get();
        else
          Error(node, key_of(name), StrCat("must be a boolean, not ", TypeName(node)));
        if (name == "cdi_only") key_lines_[{index, "cdi_only"}] = LineOf(node);
        if (name == "required") key_lines_[{index, "required"}] = LineOf(node);
      } else if (name == "cdi" && node.is_string()) {
        // A string: devplugd's. Anything else stays the module's own key (the
        // nvidia module's boolean `cdi`).
        if (const std::string* s = String(node, key_of(name))) {
          if (ParseCdiMode(*s, &r.cdi)) {
            key_lines_[{index, "cdi"}] = LineOf(node);
          } else {
            Error(node, key_of(name),
                  StrCat("unknown mode \"", *s, "\" (expected off|cri|annotations|both)"));
          }
        }
      } else if (name == "cdi_dir") {
        if (const std::string* s = String(node, key_of(name))) {
          if (std::string why = SetPath(*s, &r.cdi_dir); !why.empty())
            Error(node, key_of(name), why);
        }
      } else {
        ModuleValue mv;
        mv.where = {file_, LineOf(node)};
        mv.tree = std::make_shared<const ConfigNode>(TreeOf(node));
        if (const auto* s = node.as_string())
          mv.value = s->get();
        else if (const auto* i = node.as_integer())
          mv.value = i->get();
        else if (const auto* b = node.as_boolean())
          mv.value = b->get();
        else if (const auto* f = node.as_floating_point())
          mv.value = f->get();
        else if (const auto* a = node.as_array()) {
          std::vector<std::string> v;
          std::vector<int64_t> ints;
          for (const toml::node& el : *a) {
            if (const auto* s = el.as_string())
              v.push_back(s->get());
            else
              mv.array_of_non_strings = true;
            if (const auto* i = el.as_integer()) ints.push_back(i->get());
          }
          if (!a->empty() && ints.size() == a->size())
            mv.value = std::move(ints);
          else
            mv.value = std::move(v);
        } else if (node.is_table()) {
          mv.value = std::monostate{};
        } else {
          Error(node, key_of(name), StrCat("unsupported value type: ", TypeName(node)));
          continue;
        }
        r.module_keys.emplace(std::string(name), std::move(mv));
      }
    }
    if (!has_name) {
      Error(t, key_of("name"), "missing (every [[resource]] needs an extended resource name)");
    }
    if (!has_module) {
      Error(t, key_of("module"), "missing (every [[resource]] names the module that serves it)");
    }
    cfg_.resources.push_back(std::move(r));
  }

 public:
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
  AgentConfig& cfg_;
  Errors& errors_;
  std::string file_;
  std::map<size_t, int> socket_lines_;
  std::set<size_t> registration_set_;
  std::map<std::pair<size_t, std::string>, int> key_lines_;
};

// A DRA resource's own rules: its driver name, registration through the
// plugin watcher, devices always by CDI name (its own specs, one per claim).
void FinishDra(AgentConfig& cfg, const Parser& parser, Errors& errors, size_t i,
               std::map<std::string, size_t>& drivers) {
  ResourceConfig& r = cfg.resources[i];
  const std::string prefix = ResourceKey(i, "");
  if (parser.RegistrationSet(i) && r.registration != RegistrationMode::kPluginWatcher)
    errors.Add(r.where.file, r.where.line, prefix + "registration",
               "a DRA resource registers through the plugin watcher (leave registration out)");
  for (const char* key : {"cdi", "cdi_only"})
    if (parser.KeySet(i, key))
      errors.Add(r.where.file, parser.KeyLine(i, key), prefix + key,
                 "a DRA resource always hands its devices out by CDI name, in a spec per claim "
                 "(leave it out)");
  if (r.name.empty() || !CheckResourceName(r.name).empty()) return;
  if (r.driver.empty()) {
    r.driver = DefaultDriverName(r.name);
    if (std::string why = CheckDriverName(r.driver); !why.empty()) {
      errors.Add(r.where.file, parser.KeyLine(i, "api"), prefix + "dra_driver",
                 StrCat("the name derived from \"", r.name, "\", \"", r.driver,
                        "\", is not a DRA driver name: ", why, "; set dra_driver"));
      return;
    }
  }
  if (auto kind = cdi::KindOf(r.name); !kind.ok())
    errors.Add(r.where.file, parser.KeyLine(i, "api"), prefix + "api",
               StrCat("resource \"", r.name, "\" has no CDI kind: ", kind.status().message()));
  if (r.socket.empty()) r.socket = StrCat(r.driver, ".sock");
  auto [it, fresh] = drivers.emplace(r.driver, i);
  if (!fresh) {
    const ResourceConfig& first = cfg.resources[it->second];
    errors.Add(r.where.file, parser.KeyLine(i, "dra_driver"), prefix + "dra_driver",
               StrCat("DRA driver \"", r.driver, "\" is already served by resource \"", first.name,
                      "\" (", first.where.file, ":", first.where.line, ")"));
  }
}

// Cross-table checks once every file is read: sockets, duplicates.
void Finish(AgentConfig& cfg, const Parser& parser, Errors& errors) {
  if (!cfg.api_kubeconfig.empty()) {
    for (const char* key :
         {"api_server", "api_ca_file", "api_token_file", "api_client_cert", "api_client_key"}) {
      auto other = cfg.agent_keys.find(key);
      if (other == cfg.agent_keys.end()) continue;
      const SourceLocation& at = cfg.agent_keys.at("api_kubeconfig");
      errors.Add(at.file, at.line, "agent.api_kubeconfig",
                 StrCat("names the API server and its credentials, and so does agent.", key, " (",
                        other->second.file, ":", other->second.line, "): set one or the other"));
    }
  }
  if (cfg.resources.empty() && !cfg.files.empty()) {
    errors.Add(cfg.files.front(), 0, "",
               "no [[resource]] table (in this file or a conf.d/*.toml drop-in): nothing to "
               "serve");
  }
  std::map<std::string, size_t> names, sockets, cdi_files, drivers;
  bool dra = false;
  for (size_t i = 0; i < cfg.resources.size(); ++i) {
    ResourceConfig& r = cfg.resources[i];
    const std::string prefix = ResourceKey(i, "");
    if (r.api == ServingApi::kDra) {
      dra = true;
      FinishDra(cfg, parser, errors, i, drivers);
    } else if (parser.KeySet(i, "dra_driver")) {
      errors.Add(r.where.file, parser.KeyLine(i, "dra_driver"), prefix + "dra_driver",
                 "is a DRA key; this resource serves the device plugin API (api = \"dra\" to "
                 "serve it through DRA)");
    }
    if (r.socket.empty() && !r.name.empty()) r.socket = DefaultSocketName(r.name);
    if (!parser.RegistrationSet(i)) r.registration = cfg.registration;
    if (r.api == ServingApi::kDra) r.registration = RegistrationMode::kPluginWatcher;
    if (!parser.KeySet(i, "cdi") && r.api == ServingApi::kDevicePlugin) r.cdi = cfg.cdi;
    if (r.cdi_dir.empty()) r.cdi_dir = cfg.cdi_dir;
    if (r.cdi_only && r.cdi == CdiMode::kOff) {
      errors.Add(r.where.file, parser.KeyLine(i, "cdi_only"), prefix + "cdi_only",
                 "needs cdi = \"cri\", \"annotations\" or \"both\" (with cdi off nothing would "
                 "give the container its devices)");
    }
    // A DRA resource writes a CDI spec per claim, under its kind, whatever
    // `cdi` says.
    const bool writes_cdi = r.cdi != CdiMode::kOff || r.api == ServingApi::kDra;
    if (writes_cdi && !r.name.empty() && CheckResourceName(r.name).empty()) {
      const char* key = r.api == ServingApi::kDra ? "api" : "cdi";
      auto kind = cdi::KindOf(r.name);
      if (!kind.ok()) {
        if (r.api != ServingApi::kDra)  // FinishDra said so already
          errors.Add(
              r.where.file, parser.KeyLine(i, key), prefix + key,
              StrCat("resource \"", r.name, "\" has no CDI kind: ", kind.status().message()));
      } else {
        // Two resources whose names differ only in '.' against '_' would
        // write one kind's files, define each other's names, and sweep
        // each other's specs away (a claim's too).
        auto [it, fresh] = cdi_files.emplace(r.cdi_dir + "/" + cdi::SpecFileName(*kind), i);
        if (!fresh) {
          const ResourceConfig& first = cfg.resources[it->second];
          errors.Add(r.where.file, parser.KeyLine(i, key), prefix + key,
                     StrCat("resource \"", r.name, "\" has the CDI kind \"", kind->str(),
                            "\" of resource \"", first.name, "\" (", first.where.file, ":",
                            first.where.line, ")"));
        }
      }
    }
    if (!r.socket.empty()) {
      const bool watched = r.registration == RegistrationMode::kPluginWatcher;
      if (std::string why =
              CheckSocketName(r.socket, watched ? cfg.plugins_registry_dir : cfg.plugin_dir,
                              watched ? "plugins_registry_dir" : "plugin_dir");
          !why.empty()) {
        errors.Add(r.where.file, parser.SocketLine(i), prefix + "socket",
                   StrCat("\"", r.socket, "\": ", why));
      }
    }
    if (!r.name.empty()) {
      auto [it, fresh] = names.emplace(r.name, i);
      if (!fresh) {
        const ResourceConfig& first = cfg.resources[it->second];
        errors.Add(r.where.file, r.where.line, prefix + "name",
                   StrCat("duplicate resource name \"", r.name, "\" (first defined at ",
                          first.where.file, ":", first.where.line, ")"));
      }
    }
    if (!r.socket.empty()) {
      auto [it, fresh] = sockets.emplace(r.socket, i);
      if (!fresh) {
        const ResourceConfig& first = cfg.resources[it->second];
        errors.Add(r.where.file, parser.SocketLine(i), prefix + "socket",
                   StrCat("socket \"", r.socket, "\" is already used by resource \"", first.name,
                          "\" (", first.where.file, ":", first.where.line, ")"));
      }
    }
  }
  if (dra && cfg.node_name.empty()) {
    // The DaemonSet passes spec.nodeName as $NODE_NAME; a systemd service
    // runs under the host name, which is the kubelet's default node name.
    if (const char* env = std::getenv("NODE_NAME"); env != nullptr && *env != '\0') {
      cfg.node_name = env;
    } else {
      char host[256] = {};
      if (gethostname(host, sizeof(host) - 1) == 0) cfg.node_name = host;
      for (char& c : cfg.node_name)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    if (cfg.node_name.empty())
      errors.Add(cfg.files.empty() ? std::string() : cfg.files.front(), 0, "agent.node_name",
                 "DRA resources need this node's name: set node_name, or $NODE_NAME");
  }
}

bool ParseOne(std::string_view text, const std::string& name, Parser& parser, Errors& errors) {
  try {
    toml::table doc = toml::parse(text, name);
    parser.ParseDocument(doc, name);
    return true;
  } catch (const toml::parse_error& e) {
    errors.Add(name, static_cast<int>(e.source().begin.line), "",
               StrCat("TOML syntax error: ", e.description()));
    return false;
  }
}

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec(errno, std::generic_category());
    return NotFoundError(StrCat(path, ": cannot open: ", ec.message()));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return DataLossError(StrCat(path, ": read error"));
  return ss.str();
}

}  // namespace

StatusOr<AgentConfig> LoadString(std::string_view toml, const std::string& name,
                                 const LoadOptions& options) {
  AgentConfig cfg;
  cfg.module_dir = options.default_module_dir;
  Errors errors;
  Parser parser(cfg, errors);
  cfg.files.push_back(name);
  ParseOne(toml, name, parser, errors);
  parser.ApplyOverrides(options);
  Finish(cfg, parser, errors);
  if (!errors.empty()) return errors.ToStatus();
  return cfg;
}

StatusOr<AgentConfig> LoadFile(const std::string& path, const LoadOptions& options) {
  AgentConfig cfg;
  cfg.module_dir = options.default_module_dir;
  Errors errors;
  Parser parser(cfg, errors);

  std::vector<std::string> files{path};
  if (options.read_dropins) {
    const fs::path dropin_dir = fs::path(path).parent_path() / "conf.d";
    std::error_code ec;
    std::vector<std::string> dropins;
    for (fs::directory_iterator it(dropin_dir, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::path& p = it->path();
      if (p.extension() == ".toml" && p.filename().string().front() != '.' &&
          it->is_regular_file(ec))
        dropins.push_back(p.string());
    }
    std::sort(dropins.begin(), dropins.end());
    files.insert(files.end(), dropins.begin(), dropins.end());
  }
  for (const std::string& file : files) {
    auto text = ReadWholeFile(file);
    if (!text.ok()) {
      if (file == path) return text.status();
      errors.Add(file, 0, "", text.status().message());
      continue;
    }
    cfg.files.push_back(file);
    ParseOne(*text, file, parser, errors);
  }
  parser.ApplyOverrides(options);
  Finish(cfg, parser, errors);
  if (!errors.empty()) return errors.ToStatus();
  return cfg;
}

}  // namespace devplug::config
