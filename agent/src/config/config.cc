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

#include "config/parser.h"
#include "model/api_server_url.h"
#include "model/cdi_names.h"
#include "model/kubelet_names.h"

namespace devplug::config {
namespace detail {

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

void Parser::ParseDocument(const toml::table& doc, const std::string& file) {
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

void Parser::Error(const toml::node& node, std::string_view key, std::string_view problem) {
  errors_.Add(file_, LineOf(node), key, problem);
}

const std::string* Parser::String(const toml::node& node, std::string_view key) {
  if (const auto* s = node.as_string()) return &s->get();
  Error(node, key, StrCat("must be a string, not ", TypeName(node)));
  return nullptr;
}

}  // namespace detail
namespace {

namespace fs = std::filesystem;
using detail::Errors;
using detail::Parser;
using kubelet::CheckResourceName;
using kubelet::CheckSocketName;
using kubelet::DefaultSocketName;

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

// api = "node-label": the API the Node's label chooses, and a note for the
// log. Not read, absent or "device-plugin": the device plugin API.
ServingApi ApiFromLabel(AgentConfig& cfg, const LoadOptions& options) {
  if (!options.node_labels) {
    cfg.api_label_note = StrCat(
        "node ", cfg.node_name, "'s labels not read (",
        options.node_labels_error.empty() ? std::string("not asked") : options.node_labels_error,
        "): the device plugin API");
    return ServingApi::kDevicePlugin;
  }
  auto it = options.node_labels->find(cfg.api_label);
  cfg.api_label_read = true;
  if (it != options.node_labels->end()) cfg.api_label_value = it->second;
  if (it == options.node_labels->end()) {
    cfg.api_label_note =
        StrCat("node ", cfg.node_name, " has no label ", cfg.api_label, ": the device plugin API");
    return ServingApi::kDevicePlugin;
  }
  ServingApi api = ServingApi::kDevicePlugin;
  if (!ParseServingApi(it->second, &api)) {
    cfg.api_label_note = StrCat("node ", cfg.node_name, "'s label ", cfg.api_label, "=", it->second,
                                " is neither dra nor device-plugin: the device plugin API");
    return ServingApi::kDevicePlugin;
  }
  cfg.api_label_note = StrCat("node ", cfg.node_name, "'s label ", cfg.api_label, "=", it->second);
  return api;
}

// Cross-table checks once every file is read: sockets, duplicates.
void Finish(AgentConfig& cfg, const Parser& parser, Errors& errors, const LoadOptions& options) {
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
  const bool dra = std::any_of(cfg.resources.begin(), cfg.resources.end(), [](const auto& r) {
    return r.api == ServingApi::kDra || r.api_from_node_label;
  });
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
  std::optional<ServingApi> labelled;
  for (size_t i = 0; i < cfg.resources.size(); ++i) {
    ResourceConfig& r = cfg.resources[i];
    const std::string prefix = ResourceKey(i, "");
    std::optional<ResourceConfig> as_dra;
    if (r.api_from_node_label) {
      // Checked for DRA on every node, whichever API this one serves.
      if (!labelled) labelled = ApiFromLabel(cfg, options);
      r.api = ServingApi::kDra;
      FinishDra(cfg, parser, errors, i, drivers);
      r.api = *labelled;
      // Served through the device plugin API it is what a table without
      // `api` would be (a reload to node-label changes nothing there).
      if (r.api == ServingApi::kDevicePlugin) {
        if (!r.driver.empty()) {
          as_dra = r;
          as_dra->api = ServingApi::kDra;
          as_dra->registration = RegistrationMode::kPluginWatcher;
        }
        r.socket.clear();
        r.driver.clear();
      }
    } else if (r.api == ServingApi::kDra) {
      FinishDra(cfg, parser, errors, i, drivers);
    } else {
      for (const char* key : {"dra_driver", "dra_taint_effect"})
        if (parser.KeySet(i, key))
          errors.Add(r.where.file, parser.KeyLine(i, key), prefix + key,
                     "is a DRA key; this resource serves the device plugin API (api = \"dra\" to "
                     "serve it through DRA)");
    }
    if (r.socket.empty() && !r.name.empty()) r.socket = DefaultSocketName(r.name);
    if (!parser.RegistrationSet(i)) r.registration = cfg.registration;
    if (r.api == ServingApi::kDra) r.registration = RegistrationMode::kPluginWatcher;
    if (!parser.KeySet(i, "cdi") && r.api == ServingApi::kDevicePlugin) r.cdi = cfg.cdi;
    if (r.cdi_dir.empty()) r.cdi_dir = cfg.cdi_dir;
    if (as_dra) {
      as_dra->cdi_dir = r.cdi_dir;
      r.dra_form = std::make_shared<const ResourceConfig>(std::move(*as_dra));
    }
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
  Finish(cfg, parser, errors, options);
  if (!errors.empty()) return errors.ToStatus();
  return cfg;
}

bool UsesNodeLabel(const AgentConfig& cfg) {
  return std::any_of(cfg.resources.begin(), cfg.resources.end(),
                     [](const ResourceConfig& r) { return r.api_from_node_label; });
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
  Finish(cfg, parser, errors, options);
  if (!errors.empty()) return errors.ToStatus();
  return cfg;
}

}  // namespace devplug::config
