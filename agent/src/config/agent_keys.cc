#include <algorithm>

#include "config/parser.h"
#include "model/api_server_url.h"

namespace devplug::config::detail {

void Parser::ParseAgent(const toml::table& t) {
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
        Error(
            node, key,
            StrCat("\"", *s,
                   "\" is not a node name (a DNS subdomain: a-z, 0-9, '-' and '.', at most 253)"));
      else
        cfg_.node_name = *s;
    } else if (name == "api_label") {
      const std::string* s = String(node, key);
      if (s == nullptr) continue;
      // A label key: an optional DNS-subdomain prefix and a name of at most
      // 63 characters.
      const size_t slash = s->rfind('/');
      const std::string label = slash == std::string::npos ? *s : s->substr(slash + 1);
      if (label.empty() || label.size() > 63 || s->size() > 316 ||
          s->find_first_not_of(
              "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._/") !=
              std::string::npos)
        Error(node, key, StrCat("\"", *s, "\" is not a label key"));
      else
        cfg_.api_label = *s;
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
                                     "api_label",
                                     "dra_state_dir"};
      for (const DurationKey& d : kDurationKeys) known.emplace_back(d.name);
      Error(node, key, StrCat("unknown key (expected one of ", StrJoin(known, ", "), ")"));
    }
  }
}

std::string AgentConfig::*Parser::PathField(std::string_view name) {
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

std::string Parser::SetPath(const std::string& value, std::string* out) {
  if (value.empty() || value.front() != '/')
    return StrCat("must be an absolute path, got \"", value, "\"");
  if (value.find('\0') != std::string::npos) return "holds a NUL byte";
  std::string v = value;
  while (v.size() > 1 && v.back() == '/') v.pop_back();
  *out = std::move(v);
  return "";
}

void Parser::ApplyOverrides(const LoadOptions& o) {
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

std::string Parser::SetControlSocket(const std::string& value) {
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

const DurationKey* Parser::FindDurationKey(std::string_view name) {
  for (const DurationKey& d : kDurationKeys)
    if (d.name == name) return &d;
  return nullptr;
}

}  // namespace devplug::config::detail
