#include <algorithm>
#include <string_view>

#include "model/device.h"
#include "util/status.h"

namespace devplug {
namespace {

// `item` is one of the comma-separated items of `list`.
bool ListHas(std::string_view list, std::string_view item) {
  for (;;) {
    const size_t comma = list.find(',');
    if (list.substr(0, comma) == item) return true;
    if (comma == std::string_view::npos) return false;
    list.remove_prefix(comma + 1);
  }
}

}  // namespace

void Recipe::Merge(const Recipe& other) {
  for (const DeviceNode& n : other.device_nodes) {
    if (std::none_of(device_nodes.begin(), device_nodes.end(),
                     [&](const DeviceNode& x) { return x.container_path == n.container_path; }))
      device_nodes.push_back(n);
  }
  for (const MountSpec& m : other.mounts) {
    if (std::none_of(mounts.begin(), mounts.end(),
                     [&](const MountSpec& x) { return x.container_path == m.container_path; }))
      mounts.push_back(m);
  }
  // (No structured bindings captured in lambdas: clang 14 cannot.)
  for (const auto& kv : other.envs) {
    const std::string& key = kv.first;
    const std::string& value = kv.second;
    auto it = std::find_if(envs.begin(), envs.end(), [&](const auto& e) { return e.first == key; });
    if (it == envs.end()) {
      envs.emplace_back(key, value);
      continue;
    }
    // Both are comma-separated lists: each item of the new value not in
    // the list yet is appended. Per-device IDs combine ("a" + "b" is
    // "a,b"), and a value every device sets alike stays as it is, commas
    // and all ("compute,utility" twice is "compute,utility").
    for (std::string_view rest = value;;) {
      const size_t comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      if (!ListHas(it->second, item)) StrAppend(&it->second, ",", item);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  for (const auto& kv : other.annotations) {
    auto it = std::find_if(annotations.begin(), annotations.end(),
                           [&](const auto& e) { return e.first == kv.first; });
    if (it == annotations.end())
      annotations.emplace_back(kv);
    else
      it->second = kv.second;
  }
  for (const std::string& cdi : other.cdi_devices) {
    if (std::find(cdi_devices.begin(), cdi_devices.end(), cdi) == cdi_devices.end())
      cdi_devices.push_back(cdi);
  }
  for (const NetworkData& n : other.networks) SetNetwork(n);
}

const NetworkData* Recipe::NetworkOf(std::string_view device_id) const {
  for (const NetworkData& n : networks)
    if (n.device_id == device_id) return &n;
  return nullptr;
}

void Recipe::SetNetwork(const NetworkData& network) {
  auto it = std::find_if(networks.begin(), networks.end(),
                         [&](const NetworkData& n) { return n.device_id == network.device_id; });
  if (it == networks.end())
    networks.push_back(network);
  else
    *it = network;
}

Recipe DefaultRecipe(const DeviceList& devices, const std::vector<std::string>& ids) {
  Recipe out;
  for (const std::string& id : ids) {
    auto it = std::lower_bound(devices.begin(), devices.end(), id,
                               [](const Device& d, const std::string& v) { return d.id < v; });
    if (it != devices.end() && it->id == id) out.Merge(it->recipe);
  }
  return out;
}

}  // namespace devplug
