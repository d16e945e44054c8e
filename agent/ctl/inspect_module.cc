#include "inspect_module.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>

#include "config/config.h"
#include "modules/loaded_module.h"
#include "modules/module_instance.h"

namespace devplug::ctl {
namespace {

// A command-line value as TOML: integers, booleans, arrays and quoted
// strings as written; anything else becomes a string.
std::string TomlValue(const std::string& v) {
  if (v == "true" || v == "false" || (!v.empty() && (v.front() == '[' || v.front() == '"')))
    return v;
  size_t i = (!v.empty() && (v[0] == '-' || v[0] == '+')) ? 1 : 0;
  bool digits = i < v.size();
  for (size_t k = i; k < v.size(); ++k)
    digits = digits && std::isdigit(static_cast<unsigned char>(v[k]));
  if (digits) return v;
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

std::string Describe(const Recipe& r) {
  std::string out;
  for (const auto& n : r.device_nodes)
    StrAppend(&out, out.empty() ? "" : "; ", "dev ", n.host_path,
              n.container_path == n.host_path ? "" : " -> " + n.container_path, " (", n.permissions,
              ")");
  for (const auto& m : r.mounts)
    StrAppend(&out, out.empty() ? "" : "; ", "mount ", m.host_path, " -> ", m.container_path,
              m.read_only ? " (ro)" : "");
  for (const auto& [k, v] : r.envs) StrAppend(&out, out.empty() ? "" : "; ", "env ", k, "=", v);
  for (const auto& [k, v] : r.annotations)
    StrAppend(&out, out.empty() ? "" : "; ", "annotation ", k, "=", v);
  for (const auto& c : r.cdi_devices) StrAppend(&out, out.empty() ? "" : "; ", "cdi ", c);
  return out;
}

}  // namespace

int InspectModule(const InspectOptions& o) {
  std::string path = o.path;
  if (!path.empty() && path.front() != '/') {
    char cwd[4096];
    if (getcwd(cwd, sizeof(cwd)) != nullptr) path = StrCat(cwd, "/", path);
  }
  auto module = modules::LoadedModule::Load(path);
  if (!module.ok()) {
    std::fprintf(stderr, "devplugctl: %s\n", module.status().message().c_str());
    return 1;
  }
  const devplug_module& d = (*module)->descriptor();
  std::printf("module: %s\n  name: %s\n  version: %s\n  ABI: %u.%u (descriptor %u bytes)\n",
              path.c_str(), d.name, d.version ? d.version : "", d.abi_major, d.abi_minor,
              d.struct_size);
  if (d.description) std::printf("  description: %s\n", d.description);
  std::string hooks;
  if ((*module)->has_on_udev_event()) hooks += " on_udev_event";
  if ((*module)->has_allocate()) hooks += " allocate";
  if ((*module)->has_preferred_allocation()) hooks += " preferred_allocation";
  if ((*module)->has_pre_start()) hooks += " pre_start";
  if ((*module)->has_on_release()) hooks += " on_release";
  std::printf("  optional hooks:%s\n", hooks.empty() ? " none" : hooks.c_str());
  std::string subsystems;
  for (const char* const* s = d.udev_subsystems; s && *s; ++s) StrAppend(&subsystems, " ", *s);
  std::printf("  udev subsystems:%s\n", subsystems.empty() ? " none" : subsystems.c_str());
  std::printf("  keys:\n");
  for (const devplug_config_key* k = d.config_keys; k && k->name; ++k)
    std::printf("    %-20s %-13s%s %s\n", k->name,
                std::string(modules::KeyTypeName(k->type)).c_str(),
                (k->flags & DEVPLUG_CONFIG_REQUIRED) ? " required" : "", k->help ? k->help : "");

  std::string toml =
      StrCat("[[resource]]\nname = \"inspect.devplug.io/", d.name, "\"\nmodule = \"", path, "\"\n");
  for (const std::string& kv : o.settings) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "devplugctl: \"%s\" is not key=value\n", kv.c_str());
      return 1;
    }
    StrAppend(&toml, kv.substr(0, eq), " = ", TomlValue(kv.substr(eq + 1)), "\n");
  }
  auto cfg = config::LoadString(toml, "<command line>", {});
  if (!cfg.ok()) {
    std::fprintf(stderr, "devplugctl: %s\n", cfg.status().message().c_str());
    return 1;
  }
  const config::ResourceConfig& r = cfg->resources.at(0);
  if (Status st = (*module)->CheckKeys(r, 0); !st.ok()) {
    std::fprintf(stderr, "devplugctl: %s\n", st.message().c_str());
    return 1;
  }
  modules::ModuleInstance::Options opts;
  opts.host_root = o.host_root;
  auto inst = modules::ModuleInstance::Create(*module, r, std::move(opts));
  if (!inst.ok()) {
    std::fprintf(stderr, "devplugctl: %s\n", inst.status().message().c_str());
    return 1;
  }
  const auto devices = (*inst)->devices();
  size_t healthy = 0;
  for (const auto& dev : *devices) healthy += dev.healthy ? 1 : 0;
  std::printf("instance (host_root %s):\n  devices: %zu (%zu healthy)\n", o.host_root.c_str(),
              devices->size(), healthy);
  size_t shown = 0;
  for (const auto& dev : *devices) {
    if (!o.all_devices && shown++ == 20) {
      std::printf("    ... %zu more (--all shows every device)\n", devices->size() - 20);
      break;
    }
    std::string numa;
    for (int32_t node : dev.Nodes()) numa += (numa.empty() ? "" : ",") + std::to_string(node);
    std::printf("    %-24s %-9s numa %-3s %s%s\n", dev.id.c_str(),
                dev.healthy ? "Healthy" : "Unhealthy", numa.empty() ? "-" : numa.c_str(),
                Describe(dev.recipe).c_str(),
                dev.health_reason.empty() ? "" : (" (" + dev.health_reason + ")").c_str());
  }
  return 0;
}

}  // namespace devplug::ctl
