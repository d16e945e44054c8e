// The agent's view of a module's devices: what list_devices() reported,
// copied out of the module, and what a container needs to use them.
//
// Thread safety: plain values. DeviceList snapshots are shared as
// shared_ptr<const DeviceList> and never modified after publication.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace devplug {

struct DeviceNode {
  std::string host_path;
  std::string container_path;
  std::string permissions;
  bool operator==(const DeviceNode&) const = default;
};

struct MountSpec {
  std::string host_path;
  std::string container_path;
  bool read_only = false;
  bool operator==(const MountSpec&) const = default;
};

// The network interface a device gives the container (ABI 1.11): DRA's
// status.devices[].networkData. Either field may be empty, not both.
struct NetworkData {
  std::string device_id;  // the module's device
  std::string interface_name;
  std::string hardware_address;
  bool operator==(const NetworkData&) const = default;
};

// What Allocate returns for one container: device nodes, mounts, envs,
// annotations, CDI device names; and what DRA says of the devices in the
// claim's status (networks). Insertion order is kept.
struct Recipe {
  std::vector<DeviceNode> device_nodes;
  std::vector<MountSpec> mounts;
  std::vector<std::pair<std::string, std::string>> envs;
  std::vector<std::pair<std::string, std::string>> annotations;
  std::vector<std::string> cdi_devices;
  std::vector<NetworkData> networks;  // one per device at most
  bool operator==(const Recipe&) const = default;

  // Adds `other` to this recipe: device nodes and mounts deduplicated by
  // container path (first wins), env values of one key merged as
  // comma-separated lists (each item once, in order), annotations
  // last-wins, CDI names deduplicated, networks by device (last wins).
  void Merge(const Recipe& other);
  // The network of `device_id` (null: none).
  const NetworkData* NetworkOf(std::string_view device_id) const;
  // Sets its device's network, replacing one set before.
  void SetNetwork(const NetworkData& network);
};

// One attribute or capacity of a device, as a DRA ResourceSlice publishes
// it (ABI 1.9). Names follow model/dra_names.h.
struct DeviceAttribute {
  enum class Type : uint8_t { kString, kInt, kBool, kVersion, kCapacity };
  std::string name;
  Type type = Type::kString;
  std::string text;    // kString, kVersion
  int64_t number = 0;  // kInt, kBool (0 or 1), kCapacity (0 or more)
  bool operator==(const DeviceAttribute&) const = default;
};

struct Device {
  std::string id;
  bool healthy = false;
  int32_t numa_node = -1;  // -1: no NUMA affinity; with several, the lowest
  // Every node, when the module gave more than one (ABI 1.6); else empty.
  std::vector<int32_t> numa_nodes;
  Recipe recipe;  // default allocation recipe
  // Why it is Unhealthy (or what else is worth knowing), in a few words:
  // the module's (ABI 1.2), or the agent's while it releases the device.
  std::string health_reason;
  // Healthy as the module sees it, held back by the agent (a release runs):
  // reported Unhealthy, yet Allocate still accepts it.
  bool held_back = false;
  // What DRA publishes of it beyond the ID and NUMA node (ABI 1.9): the PCI
  // function ("0000:3b:00.0") and its root complex ("pci0000:3a", read
  // from sysfs; "" when sysfs does not say), and the module's attributes
  // and capacities, in the order given.
  std::string pci_address;
  std::string pcie_root;
  std::vector<DeviceAttribute> attributes;
  // The device this is one share of (ABI 1.10), "" for none: DRA publishes
  // that device once, shared by claims, with a capacity of its shares.
  std::string share_of;
  bool operator==(const Device&) const = default;

  // The NUMA nodes the kubelet is told (empty: none).
  std::vector<int32_t> Nodes() const {
    if (!numa_nodes.empty()) return numa_nodes;
    if (numa_node >= 0) return {numa_node};
    return {};
  }
};

// Sorted by id, ids unique.
using DeviceList = std::vector<Device>;
using DeviceListPtr = std::shared_ptr<const DeviceList>;

// Merges the default recipes of `ids` (those found in `devices`).
Recipe DefaultRecipe(const DeviceList& devices, const std::vector<std::string>& ids);

}  // namespace devplug
