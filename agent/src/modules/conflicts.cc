#include "modules/conflicts.h"

#include <map>
#include <set>

#include "util/status.h"

namespace devplug {
namespace {

// What one resource can emit: item -> the values seen for it.
struct Emits {
  std::map<std::string, std::set<std::string>> envs, paths, annotations;
};

Emits Collect(const DeviceList& devices) {
  Emits e;
  for (const Device& d : devices) {
    for (const auto& [k, v] : d.recipe.envs) e.envs[k].insert(v);
    for (const auto& n : d.recipe.device_nodes) e.paths[n.container_path].insert(n.host_path);
    for (const auto& m : d.recipe.mounts) e.paths[m.container_path].insert(m.host_path);
    for (const auto& [k, v] : d.recipe.annotations) e.annotations[k].insert(v);
  }
  return e;
}

// Same item in both; a conflict unless both always give one and the same
// value (two resources handing out the same /dev/nvidiactl are fine; two
// that both set NVIDIA_VISIBLE_DEVICES are not).
void Compare(const std::string& what, const std::map<std::string, std::set<std::string>>& a,
             const std::map<std::string, std::set<std::string>>& b, const std::string& name_a,
             const std::string& name_b, std::vector<std::string>* out) {
  for (const auto& [item, values_a] : a) {
    auto it = b.find(item);
    if (it == b.end()) continue;
    const auto& values_b = it->second;
    if (values_a.size() == 1 && values_b == values_a) continue;
    out->push_back(StrCat("resources \"", name_a, "\" and \"", name_b, "\" can both set ", what,
                          " ", item,
                          " with different values; a container given both gets one of them at "
                          "random (the kubelet keeps the first it merges)"));
  }
}

}  // namespace

std::vector<std::string> FindRecipeConflicts(
    const std::vector<std::pair<std::string, DeviceListPtr>>& resources) {
  std::vector<Emits> emits;
  for (const auto& [name, list] : resources) emits.push_back(list ? Collect(*list) : Emits{});
  std::vector<std::string> out;
  for (size_t i = 0; i < resources.size(); ++i) {
    for (size_t j = i + 1; j < resources.size(); ++j) {
      const std::string& a = resources[i].first;
      const std::string& b = resources[j].first;
      Compare("env", emits[i].envs, emits[j].envs, a, b, &out);
      Compare("container path", emits[i].paths, emits[j].paths, a, b, &out);
      Compare("annotation", emits[i].annotations, emits[j].annotations, a, b, &out);
    }
  }
  return out;
}

}  // namespace devplug
