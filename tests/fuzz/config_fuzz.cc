// libFuzzer target: the configuration loader. Any input ends in a config or
// an error that names a location; nothing crashes, throws or hangs, and an
// accepted config holds only valid names and sockets. Module values keep
// their whole tree (ABI 1.3), and every node of it is found again by the
// path the module would use; the string values of the config double as
// (mostly malformed) paths, which must fail cleanly.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "config/config.h"
#include "model/kubelet_names.h"

namespace {

using devplug::config::ConfigNode;

// Every node under `n` is found by its path from `root`.
void CheckPaths(const ConfigNode& root, const ConfigNode& n, const std::string& path, int depth) {
  int error = 0;
  if (devplug::config::FindNode(root, path, &error) != &n) std::abort();
  if (depth > 8) return;
  for (size_t i = 0; i < n.items.size(); i++)
    CheckPaths(root, n.items[i], path + "[" + std::to_string(i) + "]", depth + 1);
  for (const auto& [name, child] : n.members) {
    std::string quoted = ".\"";
    for (char c : name) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    CheckPaths(root, child, path + quoted + "\"", depth + 1);
  }
  if (n.kind == ConfigNode::Kind::kString) {
    const ConfigNode* found = devplug::config::FindNode(root, n.text, &error);
    if (found == nullptr && error != -22 && error != -2) std::abort();  // EINVAL, ENOENT
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  devplug::config::LoadOptions options;
  options.default_module_dir = "/usr/lib/devplug/modules";
  auto cfg = devplug::config::LoadString(text, "fuzz.toml", options);
  if (!cfg.ok()) {
    if (cfg.status().message().rfind("fuzz.toml", 0) != 0) std::abort();  // no location
    return 0;
  }
  for (const auto& r : cfg->resources) {
    for (const auto& [key, value] : r.module_keys) {
      if (!value.tree) std::abort();
      if (devplug::config::PathTopKey(key) != key) continue;  // not reachable by path
      CheckPaths(*value.tree, *value.tree, "", 0);
    }
    if (!devplug::kubelet::CheckResourceName(r.name).empty()) std::abort();
    if (!devplug::kubelet::CheckSocketName(r.socket, cfg->plugin_dir).empty()) std::abort();
  }
  return 0;
}
